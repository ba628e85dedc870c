"""``tierproxy tier`` says what failed, as the real command against Apache Kafka with the
remote tier in a local directory:

- a partition whose segments cannot be planned (the state of its last remote segment is
  gone: its leader-epoch checkpoint was deleted from the remote tier) is counted in the
  cycle's last line and in the summary table, which name it, the stage and the reason, and
  ``--once`` exits 1;
- a remote directory that cannot be written (its path runs through a regular file, which
  stops writes for root too, where a read-only mode would not) is reported at start with the
  local directory's own hint, not an object store's; the copies are announced
  (COPY_SEGMENT_STARTED) and not uploaded, the log says that no COPY_SEGMENT_FINISHED was
  published and that they are deleted next cycle; the metadata topic never gets
  COPY_SEGMENT_FINISHED for them (read record by record), the next cycle deletes them once the
  directory can be written, and every segment that is finished has its objects.
"""

from __future__ import annotations

import asyncio
import re
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path

import pytest

from protocol.metadata_records import (
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    RemoteLogSegmentState,
    decode_metadata_record,
)
from proxy.embedded import BrokerInfo
from proxy.embedded.process import ManagedProcess, environment
from storage.rsm.layout import kafka_uuid_string
from tests.conditions import wait_until
from tests.integration.tiering.support import (
    COPIED,
    local_tier_config,
    metadata_topic_records,
    tier_command,
    wait_for_line,
)
from tests.integration.tiering.workload import create_topic, produce_numbered

pytestmark = [pytest.mark.integration, pytest.mark.spark]

_S = RemoteLogSegmentState
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def run_once(config: Path) -> subprocess.CompletedProcess[str]:
    """``tier --once``, with the summary table printed as on a terminal."""
    return subprocess.run(
        tier_command(config, "--once"),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env=environment(TTY_COMPATIBLE="1", NO_COLOR="1"),
    )


def output(result: subprocess.CompletedProcess[str]) -> str:
    return ANSI.sub("", result.stdout + result.stderr)


async def segment_states(bootstrap: str, metadata_topic: str) -> dict[uuid.UUID, list[_S]]:
    """Every segment state ever written to the metadata topic, per segment id, in order
    (aborted transactions included: a state written at all counts)."""
    states: dict[uuid.UUID, list[_S]] = defaultdict(list)
    for _, r in await metadata_topic_records(bootstrap, metadata_topic):
        record = decode_metadata_record(r.value or b"")
        if isinstance(
            record, RemoteLogSegmentMetadataRecord | RemoteLogSegmentMetadataUpdateRecord
        ):
            states[record.segment_id].append(record.state)
    return dict(states)


def test_a_partition_that_cannot_be_planned_is_counted_named_and_exits_1(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    topic = f"unplanned-{uuid.uuid4().hex[:8]}"
    remote = tmp_path / "remote"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 200, first=0)
    config = local_tier_config(tmp_path / "tier.toml", broker.bootstrap, remote, topic)
    first = run_once(config)
    assert first.returncode == 0 and COPIED.search(output(first)), output(first)[-3000:]
    # The state after the last remote segment is read from its leader-epoch checkpoint when
    # the next copy is planned: gone (deleted by hand, a bucket lifecycle rule), it cannot be.
    checkpoints = sorted(remote.rglob("*.leader-epoch-checkpoint*"))
    assert checkpoints, sorted(remote.rglob("*"))
    checkpoints[-1].unlink()
    produce_numbered(broker.bootstrap, topic, 200, first=200)

    second = run_once(config)

    log = output(second)
    assert second.returncode == 1, log[-3000:]
    done = re.search(r'msg="tiering cycle done in [^"]*"', log)
    assert done is not None, log[-3000:]
    assert re.search(r"[1-9]\d* failed", done.group(0)), done.group(0)
    assert f"{topic}-0" in done.group(0) and "planning" in done.group(0), done.group(0)
    assert "leader-epoch-checkpoint" in done.group(0), done.group(0)
    row = re.search(rf"│ {re.escape(topic)} .*", log)
    assert row is not None, log[-3000:]
    cells = [c.strip() for c in row.group(0).strip("│ ").split("│")]
    assert int(cells[4]) >= 1, row.group(0)  # the "failed" column
    # The table of what failed: what, at which stage, why.
    failed = rf"│ {re.escape(topic)}-0 +│ planning +│ cannot read the state"
    assert re.search(failed, log), log[-3000:]
    assert "Traceback" not in log, log[-3000:]


def test_copies_that_were_not_uploaded_are_never_finished_and_are_deleted_next_cycle(
    broker: BrokerInfo, tmp_path: Path
) -> None:
    topic = f"unwritable-{uuid.uuid4().hex[:8]}"
    metadata_topic = f"__rlm-{topic}"
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file where the remote directory's parent should be\n")
    remote = blocker / "remote"
    create_topic(broker.bootstrap, topic, 1)
    produce_numbered(broker.bootstrap, topic, 200, first=0)
    config = local_tier_config(tmp_path / "tier.toml", broker.bootstrap, remote, topic)
    tier = ManagedProcess(
        "tierproxy tier", tier_command(config), log_path=tmp_path / "tier.log", stop_grace_s=60
    )
    tier.start()
    try:
        unusable = wait_for_line(tier, re.compile(r".*event=remote\.storage\.unusable .*"))
        assert str(remote) in unusable and "writable" in unusable, unusable
        for word in ("endpoint", "bucket", "credentials"):
            assert word not in unusable, unusable
        uploaded = wait_for_line(tier, re.compile(r".*event=tiering\.copy\.uploaded .*"))
        cut = r"of (\d+) segments cut, \1 announced \(COPY_SEGMENT_STARTED\) and 0 uploaded"
        assert re.search(cut, uploaded), uploaded
        none = wait_for_line(tier, re.compile(r".*event=tiering\.copy\.none_finished .*"))
        assert "no COPY_SEGMENT_FINISHED published" in none, none
        assert "stay COPY_SEGMENT_STARTED" in none and "next cycle" in none, none
        done = wait_for_line(tier, re.compile(r'msg="tiering cycle done in [^"]*"'))
        assert re.search(r"[1-9]\d* failed", done) and "copy failed" in done, done
        assert "Not a directory" in done and "ExceptionGroup" not in done, done

        # Nothing can have been uploaded yet, so nothing may be finished.
        announced = asyncio.run(segment_states(broker.bootstrap, metadata_topic))
        assert announced, "no copy was announced"
        assert all(_S.COPY_SEGMENT_FINISHED not in s for s in announced.values()), announced

        fixed = len(tier.log_path.read_text(errors="replace"))
        blocker.unlink()  # the directory can be created and written from now on
        wait_for_line(tier, COPIED, fixed)
        failed = {
            uuid.UUID(found)
            for found in re.findall(
                r"segment \d+\.\.\d+ \(([0-9a-f-]{36})\): copy failed",
                tier.log_path.read_text(errors="replace")[:fixed],
            )
        }
        assert failed, tier.log_path.read_text(errors="replace")[:fixed][-3000:]

        def cleaned_up() -> bool:
            states = asyncio.run(segment_states(broker.bootstrap, metadata_topic))
            return all(states[s][-1] == _S.DELETE_SEGMENT_FINISHED for s in failed)

        wait_until(cleaned_up, what="the copies that failed are deleted")
    finally:
        tier.stop()
    log = tier.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
    assert "published COPY_SEGMENT_FINISHED" not in log[:fixed], log[:fixed][-3000:]

    states = asyncio.run(segment_states(broker.bootstrap, metadata_topic))
    for segment_id in failed:
        assert states[segment_id][0] == _S.COPY_SEGMENT_STARTED, states[segment_id]
        assert _S.COPY_SEGMENT_FINISHED not in states[segment_id], states[segment_id]
    finished = [s for s, history in states.items() if _S.COPY_SEGMENT_FINISHED in history]
    assert finished, states
    files = {p.name for p in remote.rglob("*")}
    for segment_id in finished:
        name = kafka_uuid_string(segment_id)
        assert any(f"-{name}.log" in f for f in files), (name, sorted(files))
