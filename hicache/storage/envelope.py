"""The stored form of one page: a 24-byte header, then the payload bytes.

    offset  size  field
    0       4     magic  b"HCKV"
    4       2     format version (1), little-endian
    6       2     header size (24), so a reader can reject a layout it does not know
    8       8     payload length in bytes
    16      4     CRC-32 of the key's UTF-8 bytes followed by the payload
    20      4     reserved, zero (a reader rejects any other value)

The checksum covers the key as well as the payload, so bytes stored under another key (a
misplaced file, a stale object) fail verification just like flipped bits. Every reader calls
`check` before handing bytes on: a page that fails is a miss, never wrong KV.
The header size is a multiple of 8, so a payload read in place stays 8-byte aligned.
Pure: struct and zlib only.
"""
from __future__ import annotations

import enum
import struct
import zlib

MAGIC = b"HCKV"
VERSION = 1
HEADER = struct.Struct("<4sHHQII")
HEADER_BYTES = HEADER.size  # 24

assert HEADER_BYTES % 8 == 0


class Verdict(enum.Enum):
    """Outcome of verifying one stored page; only OK hands bytes on."""
    OK = "ok"
    BAD_SIZE = "bad_size"        # fewer bytes than a header, or not what the header announces
    BAD_MAGIC = "bad_magic"
    BAD_VERSION = "bad_version"  # version or header size this reader does not know
    BAD_LENGTH = "bad_length"    # payload length differs from what the caller expects
    BAD_CHECKSUM = "bad_checksum"


def checksum(key: str, payload) -> int:
    """CRC-32 of key || payload (payload: any bytes-like object, read in place)."""
    return zlib.crc32(payload, zlib.crc32(key.encode()))


def header(key: str, payload) -> bytes:
    """The header for `payload` stored under `key`."""
    n = memoryview(payload).nbytes
    return HEADER.pack(MAGIC, VERSION, HEADER_BYTES, n, checksum(key, payload), 0)


def encode(key: str, payload) -> bytes:
    """Header and payload as one contiguous value."""
    return header(key, payload) + bytes(payload)


def check_header(head, expect_len: int | None = None) -> tuple[Verdict, int]:
    """Verdict on a header alone, and the payload length it announces."""
    if memoryview(head).nbytes < HEADER_BYTES:
        return Verdict.BAD_SIZE, 0
    magic, version, hsize, length, _crc, reserved = HEADER.unpack_from(head, 0)
    if magic != MAGIC:
        return Verdict.BAD_MAGIC, 0
    # A non-zero reserved word is a layout this reader does not know; checking it also
    # means every single-byte change of a stored value is detected.
    if version != VERSION or hsize != HEADER_BYTES or reserved != 0:
        return Verdict.BAD_VERSION, 0
    if expect_len is not None and length != expect_len:
        return Verdict.BAD_LENGTH, length
    return Verdict.OK, length


def check(key: str, head, payload) -> Verdict:
    """Verdict on a header and the payload read beside it (the payload exactly, no slack)."""
    verdict, length = check_header(head)
    if verdict is not Verdict.OK:
        return verdict
    if memoryview(payload).nbytes != length:
        return Verdict.BAD_SIZE
    if HEADER.unpack_from(head, 0)[4] != checksum(key, payload):
        return Verdict.BAD_CHECKSUM
    return Verdict.OK


def decode(key: str, blob) -> tuple[Verdict, memoryview | None]:
    """Verdict on one contiguous stored value, and a view of its payload when OK."""
    mv = memoryview(blob).cast("B")
    verdict, length = check_header(mv)
    if verdict is not Verdict.OK:
        return verdict, None
    if mv.nbytes != HEADER_BYTES + length:
        return Verdict.BAD_SIZE, None
    payload = mv[HEADER_BYTES:]
    verdict = check(key, mv[:HEADER_BYTES], payload)
    return verdict, (payload if verdict is Verdict.OK else None)
