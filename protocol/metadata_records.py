"""KIP-405 ``__remote_log_metadata`` record formats.

The state enums are the wire values of KIP-405's ``RemoteLogState`` and
``RemotePartitionState`` (int8 in the schemas).
"""

from __future__ import annotations

from enum import IntEnum


class RemoteLogSegmentState(IntEnum):
    """State of one remote log segment copy (KIP-405 ``RemoteLogState``)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class RemotePartitionDeleteState(IntEnum):
    """State of a deleted partition's clean-up (KIP-405 ``RemotePartitionState``)."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2
