"""Mooncake-format request traces: parse (with file:line errors) and expand into pages.

A trace line is `{"timestamp", "input_length", "output_length", "hash_ids"}`; each hash id
names one 512-token block. Block b expands into 512/P pages whose tokens are
`b*512 + i` (i the token index within the block), so chained page hashes, radix matching
and eviction run on real token sequences. Only whole pages of `input_length` are cached.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import numpy as np

BLOCK_TOKENS = 512


class TraceError(ValueError):
    """A malformed trace line: names file:line and the field."""


@dataclasses.dataclass(frozen=True, slots=True)
class TraceRequest:
    line: int
    timestamp: int
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]


def _field(obj: dict, name: str, where: str, kind=int) -> object:
    if name not in obj:
        raise TraceError(f"{where}: missing field {name!r}")
    v = obj[name]
    if kind is int and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
        raise TraceError(f"{where}: field {name!r} must be a non-negative int, got {v!r}")
    return v


def read_trace(path: str, limit: int | None = None) -> Iterator[TraceRequest]:
    """Parse and validate every line; raises TraceError(file:line: field ...)."""
    check_limit(limit)
    with open(path) as f:
        count = 0
        for lineno, raw in enumerate(f, 1):
            raw = raw.strip()
            if not raw:
                continue
            where = f"{path}:{lineno}"
            try:
                obj = json.loads(raw)
            except json.JSONDecodeError as exc:
                raise TraceError(f"{where}: not JSON ({exc.msg})") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: expected an object")
            ts = _field(obj, "timestamp", where)
            n = _field(obj, "input_length", where)
            out = _field(obj, "output_length", where)
            ids = _field(obj, "hash_ids", where, kind=list)
            if not isinstance(ids, list) or not all(
                    isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in ids):
                raise TraceError(f"{where}: field 'hash_ids' must be a list of non-negative ints")
            if len(ids) * BLOCK_TOKENS < n:
                raise TraceError(f"{where}: field 'hash_ids' has {len(ids)} blocks, too few for "
                                 f"input_length {n}")
            yield TraceRequest(lineno, ts, n, out, tuple(ids))
            count += 1
            if limit is not None and count >= limit:
                return


def check_limit(limit: int | None) -> None:
    """A request limit is None (the whole trace) or a positive int."""
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise ValueError(f"limit: must be a positive int (requests), got {limit!r}")


def check_page_size(page_size: int) -> None:
    if page_size <= 0 or BLOCK_TOKENS % page_size:
        raise ValueError(f"page_size: must divide the {BLOCK_TOKENS}-token block, got {page_size}")


def expand(req: TraceRequest, page_size: int) -> bytes:
    """Key bytes (int64 little-endian) of the whole pages of the request's prompt."""
    n_pages = req.input_length // page_size
    per_block = BLOCK_TOKENS // page_size
    p = np.arange(n_pages, dtype=np.int64)
    hid = np.asarray(req.hash_ids, dtype=np.int64)
    bases = hid[p // per_block] * BLOCK_TOKENS + (p % per_block) * page_size
    toks = bases[:, None] + np.arange(page_size, dtype=np.int64)[None, :]
    return toks.astype("<i8", copy=False).tobytes()
