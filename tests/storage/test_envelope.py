"""The stored page format: every corruption is detected, nothing else is."""
from __future__ import annotations

import struct

import pytest

from hicache.storage import envelope
from hicache.storage.envelope import HEADER_BYTES, Verdict, check, check_header, decode, encode

KEY = "0f" * 32


def test_layout_is_as_documented():
    payload = bytes(range(40))
    blob = encode(KEY, payload)
    assert HEADER_BYTES == 24 and len(blob) == 64
    magic, version, hsize, length, crc, reserved = struct.unpack_from("<4sHHQII", blob)
    assert (magic, version, hsize, length, reserved) == (b"HCKV", 1, 24, 40, 0)
    assert crc == envelope.checksum(KEY, payload)
    assert blob[24:] == payload


@pytest.mark.parametrize("payload", [b"", b"x", bytes(range(256)) * 3])
def test_round_trip(payload):
    verdict, view = decode(KEY, encode(KEY, payload))
    assert verdict is Verdict.OK and bytes(view) == payload


def test_every_single_byte_change_is_detected():
    blob = encode(KEY, bytes(range(16)))
    for offset in range(len(blob)):
        for xor in (0x01, 0x80, 0xFF):
            bad = bytearray(blob)
            bad[offset] ^= xor
            verdict, view = decode(KEY, bytes(bad))
            assert verdict is not Verdict.OK and view is None, (offset, xor)


def test_each_field_has_its_verdict():
    blob = bytearray(encode(KEY, b"abcdefgh"))
    cases = {0: Verdict.BAD_MAGIC, 4: Verdict.BAD_VERSION, 6: Verdict.BAD_VERSION,
             8: Verdict.BAD_SIZE, 16: Verdict.BAD_CHECKSUM, 20: Verdict.BAD_VERSION,
             30: Verdict.BAD_CHECKSUM}
    for offset, expected in cases.items():
        bad = bytearray(blob)
        bad[offset] ^= 0x01
        assert decode(KEY, bytes(bad))[0] is expected, offset
    assert decode(KEY, bytes(blob[:-1]))[0] is Verdict.BAD_SIZE
    assert decode(KEY, bytes(blob) + b"\0")[0] is Verdict.BAD_SIZE
    assert decode(KEY, bytes(blob[:10]))[0] is Verdict.BAD_SIZE
    assert decode("1" + KEY[1:], bytes(blob))[0] is Verdict.BAD_CHECKSUM   # another key's page


def test_split_header_and_payload_checks():
    payload = b"0123456789abcdef"
    head = envelope.header(KEY, payload)
    assert check_header(head, 16) == (Verdict.OK, 16)
    assert check_header(head, 8) == (Verdict.BAD_LENGTH, 16)
    assert check(KEY, head, payload) is Verdict.OK
    assert check(KEY, head, payload[:-1]) is Verdict.BAD_SIZE
    assert check(KEY, head, payload[::-1]) is Verdict.BAD_CHECKSUM
