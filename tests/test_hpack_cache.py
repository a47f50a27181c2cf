"""`CachedDecoder` (issue 16): a header block must mean what a plain `hpack.Decoder` fed the
same blocks says it means, whatever the encoder did to the dynamic table in between.

Each case feeds one sequence of blocks to both and compares every block's headers. The
sequences are the shapes servers send: hpack's own encoder (incremental indexing, dynamic
references, evictions, table size changes) over a long seeded random run; nginx-like
blocks (static names, every field added to the table again every time); grpc-core-like
blocks (indexed once, referred to afterwards); and hand-built blocks whose bytes stay the
same while what they name changes. Each case also checks that the cache answered most
blocks, or it would not be testing the cache.
"""

from __future__ import annotations

import random

import hpack
import pytest

from servebench.clients.hpack_cache import CACHE_LIMIT, CachedDecoder

Headers = tuple[tuple[bytes, bytes], ...]


class Pair:
    """A `CachedDecoder` and a plain `hpack.Decoder`, fed the same blocks."""

    def __init__(self) -> None:
        self.real_decodes = 0  # blocks the cached decoder really decoded
        self.fed = 0
        self.cached: CachedDecoder[Headers] = CachedDecoder(self._interpret, 2**24)
        self.plain = hpack.Decoder(max_header_list_size=2**24)

    def _interpret(self, headers: list[tuple[bytes, bytes]]) -> Headers:
        self.real_decodes += 1
        return tuple((bytes(name), bytes(value)) for name, value in headers)

    def feed(self, blocks: list[bytes]) -> None:
        """Compare block by block; a block the plain decoder refuses must be refused too."""
        for block in blocks:
            try:
                headers = self.plain.decode(block, raw=True)
            except hpack.HPACKError:
                with pytest.raises(hpack.HPACKError):
                    self.cached.decode(block)
            else:
                expected = tuple((bytes(name), bytes(value)) for name, value in headers)
                assert self.cached.decode(block) == expected, f"block {self.fed}: {block!r}"
            self.fed += 1

    @property
    def hits(self) -> int:
        return self.fed - self.real_decodes


# -- hand-built representations (RFC 7541 section 6) ---------------------------------------


def integer(value: int, bits: int, first: int) -> bytes:
    """An HPACK integer with a `bits`-bit prefix; `first` holds the first byte's flag bits."""
    limit = (1 << bits) - 1
    if value < limit:
        return bytes([first | value])
    out = bytearray([first | limit])
    value -= limit
    while value >= 128:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def string(text: str) -> bytes:
    data = text.encode()
    return integer(len(data), 7, 0) + data


def indexed(index: int) -> bytes:
    return integer(index, 7, 0x80)


def added(name: str | int, value: str) -> bytes:
    """A literal with incremental indexing; `name` an index or a new name."""
    if isinstance(name, int):
        return integer(name, 6, 0x40) + string(value)
    return b"\x40" + string(name) + string(value)


def not_added(name: str | int, value: str, never: bool = False) -> bytes:
    """A literal without indexing (or never indexed)."""
    first = 0x10 if never else 0x00
    if isinstance(name, int):
        return integer(name, 4, first) + string(value)
    return bytes([first]) + string(name) + string(value)


def table_size(size: int) -> bytes:
    return integer(size, 5, 0x20)


STATUS_200, CONTENT_TYPE, CONTENT_LENGTH, DATE, SERVER = 8, 31, 28, 33, 54  # static indexes
DYNAMIC = 62  # the newest dynamic entry


# -- sequences -----------------------------------------------------------------------------


def test_hpack_encoder_random_run_with_evictions_and_table_size_changes() -> None:
    rng = random.Random(7541)
    encoder = hpack.Encoder()
    words = ["unknown model", "queue full", "deadline", "ok", "model 'x' not ready"]
    blocks = []
    for n in range(6000):
        fields: list[tuple[str, str, bool]] = [
            (":status", rng.choice(["200", "200", "200", "404", "503"]), False),
            ("content-type", "application/grpc", False),
        ]
        if rng.random() < 0.5:
            fields.append(("grpc-status", rng.choice(["0", "0", "5", "14"]), False))
        if rng.random() < 0.3:
            fields.append(("grpc-message", rng.choice(words), False))
        if rng.random() < 0.4:
            fields.append(("date", f"second {n // 50}", False))  # changes now and then
        if rng.random() < 0.1:
            fields.append(("x-padding", "p" * rng.randrange(100, 1500), False))  # evicts
        if rng.random() < 0.05:
            fields.append(("x-request-id", str(n), False))  # new every time
        if rng.random() < 0.05:
            fields.append(("authorization", "secret", True))  # never indexed
        rng.shuffle(fields)
        if rng.random() < 0.01:
            encoder.header_table_size = rng.choice([0, 256, 1024, 4096])
        blocks.append(encoder.encode(fields, huffman=rng.random() < 0.5))
    pair = Pair()
    pair.feed(blocks)
    assert pair.hits > len(blocks) // 10


def test_nginx_like_blocks_add_every_field_every_time() -> None:
    """Static names, every field added again on every answer; a block that names a dynamic
    entry now and then, so the queued additions must have put the table right."""
    rng = random.Random(1)
    pair = Pair()
    for second in range(30):
        answer = (
            indexed(STATUS_200)
            + added(SERVER, "nginx/1.27.0")
            + added(DATE, f"Sun, 29 Nov 2026 00:00:{second:02d} GMT")
            + added(CONTENT_TYPE, "application/grpc")
        )
        trailers = added("grpc-status", "0") + added("grpc-message", "")
        blocks = [answer, trailers] * rng.randrange(1, 80)
        # Names the entries the last answer and trailers added (grpc-message newest).
        blocks.append(indexed(DYNAMIC) + indexed(DYNAMIC + 1) + indexed(DYNAMIC + 3))
        pair.feed(blocks)
    assert pair.hits > pair.fed // 2


def test_grpc_core_like_blocks_index_once_and_refer_afterwards() -> None:
    """Answers that only name dynamic entries; now and then a new grpc-message is added,
    which moves every index by one: the same bytes then name other entries."""
    rng = random.Random(2)
    pair = Pair()
    pair.feed([added(":status", "200") + added("content-type", "application/grpc")])
    pair.feed([added("grpc-status", "0")])
    for n in range(400):
        # :status is the oldest entry, then content-type; grpc-status the newest of the three
        # unless messages were added after it.
        count = len(pair.plain.header_table.dynamic_entries)
        answer = indexed(DYNAMIC + count - 1) + indexed(DYNAMIC + count - 2)
        trailers = indexed(DYNAMIC + rng.randrange(count))
        pair.feed([answer, trailers])
        if rng.random() < 0.1 and count < 40:
            pair.feed([added("grpc-status", "5") + added("grpc-message", f"error {n}")])
    assert pair.hits > pair.fed // 2


FIRST, SECOND = added("x-a", "1"), added("x-b", "2")
NEWEST = indexed(DYNAMIC)  # one byte whose meaning is whatever was added last


def test_same_bytes_new_meaning_after_queued_additions() -> None:
    named = not_added(DYNAMIC, "v")  # the newest entry's name with a value of its own
    pair = Pair()
    pair.feed([FIRST, NEWEST, named, SECOND, NEWEST, named, FIRST, NEWEST, named, NEWEST])
    pair.feed([SECOND, named, NEWEST])
    assert pair.hits >= 3


def test_a_block_that_names_and_adds_is_applied_every_time() -> None:
    again = added(DYNAMIC, "2")  # names the newest entry and adds one: the same bytes each time
    pair = Pair()
    pair.feed([FIRST, again, again, again, indexed(DYNAMIC + 3), NEWEST, again])
    assert len(pair.plain.header_table.dynamic_entries) == 5


def test_table_size_updates_are_never_skipped() -> None:
    shrink, grow = table_size(0) + indexed(STATUS_200), table_size(4096)
    pair = Pair()
    pair.feed([FIRST, SECOND, shrink, grow, FIRST, shrink, grow, FIRST, NEWEST])
    pair.feed([indexed(DYNAMIC + 1)])  # only one entry is left: this must not decode
    assert pair.hits >= 2


def test_many_small_entries_queued_past_what_the_table_holds() -> None:
    """More additions from cached blocks than fit in 4096 octets, then references to all
    that remain: indexes that need several bytes, and only the newest entries may count."""
    pair = Pair()
    names = [f"n{i}" for i in range(300)]
    for _ in range(3):
        for name in names:
            pair.feed([added(name, "")])  # 34-octet entries: 120 fit
        count = len(pair.plain.header_table.dynamic_entries)
        pair.feed([b"".join(indexed(DYNAMIC + i) for i in range(count))])
        pair.feed([b"".join(not_added(DYNAMIC + i, "v") for i in range(0, count, 7))])
        pair.feed([added(DYNAMIC + count - 1, "x" * 200)])  # a long value, a high name index
    assert count > 100
    assert pair.hits >= 2 * len(names) - 3


def test_literals_without_indexing_and_never_indexed_add_nothing() -> None:
    pair = Pair()
    pair.feed([added("x-a", "1")])
    quiet = not_added("x-q", "v") + not_added(CONTENT_LENGTH, "12", never=True)
    pair.feed([quiet, indexed(DYNAMIC), quiet, indexed(DYNAMIC)])
    assert pair.hits >= 2


def test_more_distinct_blocks_than_the_cache_holds() -> None:
    pair = Pair()
    blocks = [added(DATE, f"moment {i}") + indexed(STATUS_200) for i in range(CACHE_LIMIT + 200)]
    pair.feed(blocks)
    pair.feed([*blocks[-300:], indexed(DYNAMIC) + indexed(DYNAMIC + 5)])
    assert pair.hits >= 200  # the newest blocks after the cache was emptied once


def test_a_block_that_does_not_decode_raises_hpack_error() -> None:
    pair = Pair()
    with pytest.raises(hpack.HPACKError):
        pair.cached.decode(indexed(DYNAMIC))  # the table is empty
    with pytest.raises(hpack.HPACKError):
        pair.cached.decode(b"\x40\x05ab")  # truncated
