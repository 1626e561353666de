"""The runtime's view of the one key derivation: `hicache.storage.keys`.

The tree keeps page-aligned token ids as int64 little-endian bytes; storage keys are the
chained SHA-256 digests of hicache.storage.keys (h_i = SHA256(h_{i-1} || page_i as u32)),
seeded by the namespace hash. This module only adapts the tree's encoding: there is a
single derivation for `batch_exists`, `batch_get` and `batch_set` (REFERENCE.md bug 14).
Digests are computed once per page, lazily (on backup or prefetch), never on the match
path of a device hit.
"""
from __future__ import annotations

import numpy as np

from hicache.storage import keys as _keys


def namespace_seed(model: str, salt: str = "", page_format: str = "") -> bytes:
    """Digest that starts every chain of this (model, salt, page format) namespace."""
    return _keys.namespace_hash(model, salt=salt, page_format=page_format)


def chain_hashes(prev: bytes, page_tokens: bytes, page_size: int) -> list[bytes]:
    """Digests of consecutive pages (int64 token bytes) continuing the chain after `prev`."""
    return _keys.chain(prev, np.frombuffer(page_tokens, dtype="<i8"), page_size)


def storage_key(digest: bytes) -> str:
    """Backend key of one page: hex of its chained digest."""
    return _keys.key_of(digest)
