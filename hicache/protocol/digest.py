"""Digests that let one MIN-reduction prove agreement.

A rank puts the pair [x, -x] into a MIN-reduced tensor. After the reduction the tensor holds
[min x, min(-x)] = [min x, -max x]; all ranks had the same x iff min x == max x, i.e.
iff reduced[0] == -reduced[1] (REFERENCE.md). Digests are 62-bit so both x and -x fit in int64.
Pure: hashlib only.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable

DIGEST_BITS = 62
_MASK = (1 << DIGEST_BITS) - 1


def digest_of(items: Iterable[object]) -> int:
    """Stable digest of a sequence of canonical values (ints, strs, tuples thereof).

    Invariant: 0 <= result < 2**62; equal sequences give equal digests on every process
    (repr of ints/strs/tuples is deterministic, unlike hash()).
    """
    h = hashlib.sha256()
    for item in items:
        h.update(repr(item).encode())
        h.update(b"\x00")
    return int.from_bytes(h.digest()[:8], "little") & _MASK


def step_code(name: str, seq: int) -> int:
    """Identity of one collective-bearing step: its name and how many steps came before."""
    return digest_of((name, seq))


def pair(x: int) -> tuple[int, int]:
    return (x, -x)


def pair_agrees(min_x: int, min_neg_x: int) -> bool:
    """True iff every rank contributed the same x to the MIN-reduced pair."""
    return min_x == -min_neg_x
