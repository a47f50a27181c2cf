"""HPACK decoding that skips the work for header blocks seen before (the lean gRPC transport).

A load generator reads the same few header blocks hundreds of thousands of times, and
`hpack` (pure Python, the library under h2) spent two thirds of a lean gRPC call decoding
them: nginx, for one, sends every answer's `server`, `date` and `content-length` again as
literals that are added to the dynamic table. What a block means depends on the dynamic
table only through the dynamic entries it names, so:

- a block that names no dynamic entry means the same thing forever: its meaning is cached
  with the entries it adds, which are queued for the real decoder's table (only the last
  few that fit can matter, so the queue is bounded) and applied before the next block that
  must really be decoded;
- a block that names dynamic entries but changes nothing (a server such as grpc core,
  which indexes once and refers to the index afterwards) is cached until the table changes.

Everything else goes to `hpack.Decoder`, which also checks what this walk does not.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

import hpack

Meaning = TypeVar("Meaning")
Headers = list[tuple[bytes, bytes]]

STATIC_ENTRIES = 61  # RFC 7541 appendix A
SMALLEST_ENTRY = 32  # an entry's size is its name and value plus 32 octets
CACHE_LIMIT = 1024  # blocks remembered; a server with unique headers per answer resets it


def read_int(block: bytes, i: int, bits: int) -> tuple[int, int]:
    """An HPACK integer with a `bits`-bit prefix at `block[i]`: (value, index after it)."""
    mask = (1 << bits) - 1
    value = block[i] & mask
    i += 1
    if value < mask:
        return value, i
    shift = 0
    while True:
        byte = block[i]
        i += 1
        value += (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def walk(block: bytes) -> tuple[bool, list[bool], bool]:
    """(names a dynamic entry, per field: is it added to the table, resizes the table) for
    a block `hpack` has already decoded, so well-formed."""
    dynamic = resized = False
    added: list[bool] = []
    i, end = 0, len(block)
    while i < end:
        byte = block[i]
        if byte & 0x80:  # indexed field
            index, i = read_int(block, i, 7)
            dynamic |= index > STATIC_ENTRIES
            added.append(False)
        elif byte & 0xE0 == 0x20:  # dynamic table size update: not a field
            _, i = read_int(block, i, 5)
            resized = True
        else:  # a literal: incremental indexing (6-bit name index) or not (4-bit)
            incremental = byte & 0xC0 == 0x40
            index, i = read_int(block, i, 6 if incremental else 4)
            dynamic |= index > STATIC_ENTRIES
            if index == 0:
                length, i = read_int(block, i, 7)
                i += length
            length, i = read_int(block, i, 7)
            i += length
            added.append(incremental)
    return dynamic, added, resized


class CachedDecoder(Generic[Meaning]):
    """Decodes header blocks to what the caller makes of them (`interpret`), with caches."""

    def __init__(self, interpret: Callable[[Headers], Meaning], max_header_list: int) -> None:
        self.interpret = interpret
        self.decoder = hpack.Decoder(max_header_list_size=max_header_list)
        self._forever: dict[bytes, tuple[Meaning, tuple[tuple[bytes, bytes], ...]]] = {}
        self._while_unchanged: dict[bytes, Meaning] = {}
        limit = self.decoder.header_table.maxsize // SMALLEST_ENTRY + 1
        self._unapplied: deque[tuple[bytes, bytes]] = deque(maxlen=limit)

    def decode(self, block: bytes) -> Meaning:
        """The block's meaning; `hpack.HPACKError` for a block that does not decode."""
        hit = self._forever.get(block)
        if hit is not None:
            meaning, adds = hit
            if adds:
                self._unapplied.extend(adds)
                self._while_unchanged.clear()
            return meaning
        meaning_now = self._while_unchanged.get(block)
        if meaning_now is not None:
            return meaning_now
        return self._decode(block)

    def _decode(self, block: bytes) -> Meaning:
        table = self.decoder.header_table
        if self._unapplied:
            for name, value in self._unapplied:
                table.add(name, value)
            self._unapplied.clear()
        headers = self.decoder.decode(block, raw=True)
        meaning = self.interpret(headers)
        dynamic, added, resized = walk(block)
        if any(added) or resized:
            self._while_unchanged.clear()
        if len(self._forever) >= CACHE_LIMIT:
            self._forever.clear()
        if len(self._while_unchanged) >= CACHE_LIMIT:
            self._while_unchanged.clear()
        if not dynamic and not resized:
            adds = tuple(field for field, add in zip(headers, added, strict=True) if add)
            self._forever[block] = (meaning, adds)
        elif not any(added) and not resized:
            self._while_unchanged[block] = meaning
        return meaning
