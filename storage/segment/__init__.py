"""Remote segments: building a segment and its indexes from raw batches, and reading it back.

:mod:`storage.segment.builder` turns the record batches of one partition range (as a Fetch
returns them) into the ``.log`` bytes and the five auxiliary files KIP-405 uploads;
:mod:`storage.segment.reader` serves whole batches from a stored segment through its offset
index with as few ranged reads as possible.
"""
