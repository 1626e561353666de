"""Chained SHA-256 page hashes: the one key derivation for every storage call.

h_{-1} = SHA256(namespace), h_i = SHA256(h_{i-1} || page_i tokens as little-endian u32).
The namespace (model, salt) seeds the chain, so two models never share keys.
Computed once per page, lazily (on backup or prefetch), never on the match path of a
device hit. `batch_exists`, `batch_get` and `batch_set` all use `storage_key` of the
same digest (REFERENCE.md bug 14).
"""
from __future__ import annotations

import hashlib

import numpy as np


def namespace_seed(model: str, salt: str = "") -> bytes:
    """Digest that starts every chain of this (model, salt) namespace."""
    return hashlib.sha256(f"hicache\x00{model}\x00{salt}".encode()).digest()


def chain_hashes(prev: bytes, page_tokens: bytes, page_size: int) -> list[bytes]:
    """Digests of consecutive pages continuing the chain after `prev`.

    `page_tokens` holds whole pages of int64 little-endian token ids (the tree's key
    encoding); each page is hashed as little-endian u32, the reference format.
    """
    toks = np.frombuffer(page_tokens, dtype="<i8").astype("<u4")
    raw = toks.tobytes()
    step = page_size * 4
    out = []
    sha = hashlib.sha256
    h = prev
    for off in range(0, len(raw), step):
        h = sha(h + raw[off:off + step]).digest()
        out.append(h)
    return out


def storage_key(digest: bytes) -> str:
    """Backend key of one page: hex of its chained digest."""
    return digest.hex()
