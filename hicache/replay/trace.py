"""Mooncake-format request traces: parse (with file:line errors) and expand into pages.

A trace line is `{"timestamp", "input_length", "output_length", "hash_ids"}`; each hash id
names one 512-token block. Block b expands into 512/P pages whose tokens are
`b*512 + i` (i the token index within the block), so chained page hashes, radix matching
and eviction run on real token sequences. Only whole pages of `input_length` are cached.
"""
from __future__ import annotations

import array
import dataclasses
import itertools
import json
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator

import numpy as np

from hicache.storage.keys import _U32_MAX
from hicache.validate import INT64_MAX

BLOCK_TOKENS = 512
#: the largest block id whose token ids (`expand`: b*512 + i, i < 512) a storage key can hash:
#: hicache.storage.keys writes each token as a little-endian u32 (ids <= _U32_MAX, "tokens: ids
#: must lie in [0, 2**32)"), so the last token of the block, b*512 + 511, must not pass _U32_MAX.
#: A larger id would fail mid-replay when storage is on; it also keeps expand's int64 far from
#: wrapping (b*512 onto another block's tokens: false hits) or overflowing numpy.
MAX_HASH_ID = (_U32_MAX - (BLOCK_TOKENS - 1)) // BLOCK_TOKENS      # 2**23 - 1

#: paths of an already-open descriptor (`/dev/stdin`, `<(zcat t.gz)`): opening one never
#: waits for a writer, so a pipe there is read (once); a named FIFO could block open() forever
_OPEN_FD = re.compile(r"/dev/(stdin|fd/\d+)|/proc/(self|\d+)/fd/\d+")


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
    if kind is int and (not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= INT64_MAX):
        # (int64: timestamps and lengths go into int64 arrays; a larger one cannot be stored)
        raise TraceError(f"{where}: field {name!r} must be a non-negative int that fits int64, got {v!r}")
    return v


def check_source(path: str) -> bool:
    """Whether the trace at `path` can be read again (a regular file); False for a pipe
    behind an open descriptor, which can be read once. TraceError for anything else:
    missing, a directory, a named FIFO (open() would wait for a writer that may never come)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(st.st_mode):
        return True
    if _OPEN_FD.fullmatch(path) and not stat.S_ISDIR(st.st_mode):
        return False
    if stat.S_ISDIR(st.st_mode):
        raise TraceError(f"{path}: not a regular file (a directory)")
    if stat.S_ISFIFO(st.st_mode):
        raise TraceError(f"{path}: not a regular file (a named pipe: open() would wait for a writer); "
                         f"to stream a trace, give it on stdin: hicache replay /dev/stdin < {path}")
    raise TraceError(f"{path}: not a regular file (a device or socket)")


class _DuplicateKey(Exception):
    """A key seen twice in one JSON object (json keeps the last, silently)."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    """object_pairs_hook: the object, or _DuplicateKey for a key given twice."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise _DuplicateKey(k)
            seen.add(k)
    return obj


#: built once: json.loads(..., object_pairs_hook=) builds a decoder per call (a third slower)
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _lines(f, path: str) -> Iterator[tuple[int, bytes]]:
    """(line number, raw line) of an open trace; an I/O error becomes a TraceError naming the
    path and the line being read (a device error, a file like /proc/self/mem)."""
    lineno = 0
    while True:
        try:
            raw = f.readline()
        except OSError as exc:
            raise TraceError(f"{path}:{lineno + 1}: cannot read ({exc.strerror or exc})") from None
        if not raw:
            return
        lineno += 1
        yield lineno, raw


def _decode(raw: bytes, path: str, lineno: int) -> str:
    try:
        # utf-8-sig on line 1: a byte-order mark some editors write is not part of the JSON
        return raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
    except UnicodeDecodeError as exc:
        msg = f"{path}:{lineno}: not UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
        if lineno == 1 and raw.startswith(b"\x1f\x8b"):
            msg += "; the file is gzip-compressed (magic 1f 8b): decompress it first, " \
                   f"e.g. hicache replay <(zcat {path})"
        raise TraceError(msg) from None


def read_trace(path: str, limit: int | None = None) -> Iterator[TraceRequest]:
    """Parse and validate every line; raises TraceError(file:line: field ...), and
    TraceError("no requests in FILE") for a trace with no request line."""
    check_limit(limit)
    check_source(path)
    try:
        f = open(path, "rb")    # binary: each line is decoded alone, so an error names its line
    except OSError as exc:
        raise TraceError(f"{path}: {exc.strerror or exc}") from None
    with f:
        count = 0
        for lineno, raw in _lines(f, path):
            where = f"{path}:{lineno}"
            decoded = _decode(raw, path, lineno)
            text = decoded.strip()
            if not text:
                continue
            try:
                obj = _DECODER.decode(text)
            except _DuplicateKey as exc:
                raise TraceError(f"{where}: field {exc.key!r} appears twice in one object "
                                 f"(JSON would keep only the last)") from None
            except json.JSONDecodeError as exc:
                # the column in the line as read: text lost its leading whitespace
                col = exc.colno + len(decoded) - len(decoded.lstrip())
                raise TraceError(f"{where}:{col}: not JSON ({exc.msg})") from None
            except RecursionError:
                raise TraceError(f"{where}: not JSON (nested too deeply)") from None
            except ValueError:
                # int() refuses a longer decimal string (CVE-2020-10735); json names no position
                raise TraceError(f"{where}: not JSON (an integer of more than "
                                 f"{sys.get_int_max_str_digits()} digits)") from None
            if not isinstance(obj, dict):
                raise TraceError(f"{where}: expected an object")
            ts = _field(obj, "timestamp", where)
            n = _field(obj, "input_length", where)
            out = _field(obj, "output_length", where)
            ids = _field(obj, "hash_ids", where, kind=list)
            if not isinstance(ids, list) or not all(
                    isinstance(b, int) and not isinstance(b, bool) and b >= 0 for b in ids):
                raise TraceError(f"{where}: field 'hash_ids' must be a list of non-negative ints")
            big = next((b for b in ids if b > MAX_HASH_ID), None)
            if big is not None:
                raise TraceError(f"{where}: field 'hash_ids' has block id {big}, above {MAX_HASH_ID}: "
                                 f"its token ids (id*{BLOCK_TOKENS} + i) would not fit the u32 token ids of "
                                 f"storage keys (< 2**32)")
            if len(ids) * BLOCK_TOKENS < n:
                raise TraceError(f"{where}: field 'hash_ids' has {len(ids)} blocks, too few for "
                                 f"input_length {n}")
            yield TraceRequest(lineno, ts, n, out, tuple(ids))
            count += 1
            if limit is not None and count >= limit:
                return
        if count == 0:
            raise TraceError(f"no requests in {path} (empty, or blank lines only)")


class LoadedTrace:
    """A trace parsed once into compact int64 arrays (8 bytes per block id), for work that
    passes over it several times (`--evaluate`): a pipe cannot be read twice, and every
    pass must see the same requests."""

    __slots__ = ("path", "lines", "timestamps", "input_lengths", "output_lengths", "ids", "ends")

    def __init__(self, path: str, limit: int | None = None) -> None:
        self.path = path
        self.lines, self.timestamps, self.input_lengths, self.output_lengths, self.ids, self.ends = (
            array.array("q") for _ in range(6))
        for r in read_trace(path, limit):
            self.lines.append(r.line)
            self.timestamps.append(r.timestamp)
            self.input_lengths.append(r.input_length)
            self.output_lengths.append(r.output_length)
            self.ids.extend(r.hash_ids)
            self.ends.append(len(self.ids))

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self) -> Iterator[TraceRequest]:
        start = 0
        for i, end in enumerate(self.ends):
            yield TraceRequest(self.lines[i], self.timestamps[i], self.input_lengths[i],
                               self.output_lengths[i], tuple(self.ids[start:end]))
            start = end


def iter_requests(source: str | LoadedTrace, limit: int | None = None) -> Iterable[TraceRequest]:
    """The requests of a trace file (parsed as it streams) or of a loaded trace."""
    if isinstance(source, LoadedTrace):
        check_limit(limit)
        return source if limit is None else itertools.islice(source, limit)
    return read_trace(source, limit)


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
