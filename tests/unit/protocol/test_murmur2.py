"""murmur2: Kafka's and librdkafka's published vectors, and the metadata partition choice."""

from __future__ import annotations

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given
from hypothesis import strategies as st

from protocol.errors import LocalProtocolError
from protocol.murmur2 import metadata_partition_for, murmur2, to_positive

# Apache Kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.testMurmur2.
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# librdkafka src/rdmurmur2.c unittest_murmur2 ("java_murmur2_results"), as unsigned.
LIBRDKAFKA_VECTORS = {
    b"kafka": 0xD067CF64,
    b"giberish123456789": 0x8F552B0C,
    b"1234": 0x9FC97B14,
    b"234": 0xE7C009CA,
    b"34": 0x873930DA,
    b"4": 0x5A4B5CA1,
    b"PreAmbleWillBeRemoved,ThePrePartThatIs": 0x78424F1C,
    b"reAmbleWillBeRemoved,ThePrePartThatIs": 0x4A62B377,
    b"eAmbleWillBeRemoved,ThePrePartThatIs": 0xE0E4E09E,
    b"AmbleWillBeRemoved,ThePrePartThatIs": 0x62B8B43F,
    b"": 0x106E08D9,
}


@pytest.mark.parametrize(("data", "expected"), JAVA_VECTORS.items())
def test_kafka_utils_test_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@pytest.mark.parametrize(("data", "expected"), LIBRDKAFKA_VECTORS.items())
def test_librdkafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) & 0xFFFFFFFF == expected


@given(st.binary(max_size=64))
def test_signed_int32_and_agrees_with_aiokafka(data: bytes) -> None:
    # aiokafka ports the same Java method but returns the unsigned bit pattern.
    result = murmur2(data)
    assert -(2**31) <= result < 2**31
    assert result & 0xFFFFFFFF == aiokafka_murmur2(data)


def test_to_positive_clears_the_sign_bit_like_java() -> None:
    assert to_positive(5) == 5
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(-(2**31)) == 0
    assert to_positive(-973932308) == -973932308 & 0x7FFFFFFF


def test_metadata_partition_follows_kip_405_formula() -> None:
    # toPositive(murmur2("foobar")) % 50 computed by hand from the Java vector.
    assert metadata_partition_for("foobar", 50) == (-790332482 & 0x7FFFFFFF) % 50
    assert metadata_partition_for("21", 7) == (-973932308 & 0x7FFFFFFF) % 7


@given(
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=40),
    st.integers(0, 1000),
    st.integers(1, 200),
)
def test_metadata_partition_is_in_range_and_hashes_utf8(
    topic: str, partition: int, count: int
) -> None:
    topic_partition = f"{topic}-{partition}"
    chosen = metadata_partition_for(topic_partition, count)
    assert 0 <= chosen < count
    assert chosen == to_positive(murmur2(topic_partition.encode("utf-8"))) % count


@pytest.mark.parametrize("count", [0, -3])
def test_metadata_partition_needs_partitions(count: int) -> None:
    with pytest.raises(LocalProtocolError):
        metadata_partition_for("t-0", count)
