"""The copy stage's spill reading: a segment in one piece or across windows' spill files is
the same segment, byte for byte, with the same indexes."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.records import Record, build_record_batch
from storage.segment.builder import BuiltSegment, SegmentBuilder
from storage.tiering.copy_stage import SpillPiece, _append_spilled


def _batches(count: int) -> list[bytes]:
    return [
        build_record_batch(
            base_offset=10 * i,
            records=[Record(value=bytes([i]) * 900, timestamp=1_000 + i)] * 10,
            partition_leader_epoch=i // 3,
        )
        for i in range(count)
    ]


def _built(pieces: list[SpillPiece]) -> BuiltSegment:
    builder = SegmentBuilder(base_offset=0, index_interval_bytes=4096)
    _append_spilled(builder, pieces)
    return builder.finish()


def test_a_segment_across_spill_files_is_the_segment_in_one(tmp_path: Path) -> None:
    batches = _batches(9)
    whole = b"".join(batches)
    # Two windows' spill files; each holds bytes of other segments around this one's.
    first = tmp_path / "w0000000.bin"
    first.write_bytes(b"\x01" * 100 + b"".join(batches[:4]))
    second = tmp_path / "w0000001.bin"
    second.write_bytes(b"".join(batches[4:]) + b"\x02" * 50)
    split = [
        SpillPiece(path=str(first), position=100, size=sum(map(len, batches[:4]))),
        SpillPiece(path=str(second), position=0, size=sum(map(len, batches[4:]))),
    ]
    one = tmp_path / "whole.bin"
    one.write_bytes(whole)

    joined = _built(split)
    single = _built([SpillPiece(path=str(one), position=0, size=len(whole))])
    assert bytes(joined.data.log) == whole
    assert joined.data == single.data
    assert (joined.end_offset, joined.segment_leader_epochs) == (89, ((0, 0), (1, 30), (2, 60)))
    # The joined copy is one more file of the cycle's spill, recycled with the others.
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if not n.startswith("joined-")] == [
        "w0000000.bin",
        "w0000001.bin",
        "whole.bin",
    ]
    assert len(names) == 4


def test_a_spill_file_shorter_than_its_piece_is_an_error(tmp_path: Path) -> None:
    batch = _batches(1)[0]
    spill = tmp_path / "w0000000.bin"
    spill.write_bytes(batch)
    other = tmp_path / "w0000001.bin"
    other.write_bytes(batch)
    pieces = [
        SpillPiece(path=str(spill), position=0, size=len(batch)),
        SpillPiece(path=str(other), position=0, size=len(batch) + 10),
    ]
    with pytest.raises(OSError, match="ends at"):
        _built(pieces)
