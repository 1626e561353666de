"""The one-pass CPU page copy: ``csrc/pagecopy.c``, compiled on first use and loaded with ctypes.

torch has no indexed-to-indexed copy, so its fallback moves a transfer in two passes
(``index_select`` into a staging buffer, then ``index_copy_``). The C loop copies each
(component, layer, page pair) chunk in one run when both sides store a page's rows together,
else each token row: a single pass over the bytes. Runs of 16 KiB and more go to ``memcpy``,
shorter ones to an inline 16-byte-vector loop; pages are visited in sorted order of the side
walked in address order (:func:`loop_nest`) and prefetched two pages ahead. It runs only on
plans the Python side has already validated (:mod:`.transfer`, :mod:`.page_gather`,
:mod:`.packed`), so bad input still raises ValueError before any byte moves; the C side trusts
its arguments. A call splits its page list across up to ``torch.get_num_threads()`` threads.

Build: the system C compiler (``$CC``, default ``cc``) turns the source into a shared library in
the per-user cache (``$HICACHE_CACHE_DIR``, default ``~/.cache/hicache``), named by a hash of the
source, the compiler, its flags and the platform, so a changed source never loads a stale
library. Each build goes to a temporary file that is then renamed over the final name
(``os.replace`` is atomic), so concurrent processes never load a half-written library. The
library is plain C without torch headers: a build takes well under a second.

Choice: :func:`library` decides once per process. ``HICACHE_NATIVE=0`` disables the native path;
when the compiler is missing or the build fails, the torch fallback serves and one
RuntimeWarning says why. ctypes releases the GIL for the duration of a call.
"""
from __future__ import annotations

import ctypes
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

from hicache import buildcache
from hicache.buildcache import COMPILE_TIMEOUT_S, ENV_CACHE, ENV_CC, ENV_DISABLE  # noqa: F401 (this module's settings)

SOURCE = Path(__file__).resolve().parent / "csrc" / "pagecopy.c"
#: -O2 is enough for a memcpy loop; no -march=native, so a cache shared by machines stays valid.
CFLAGS = ("-O2", "-shared", "-fPIC", "-pthread")
#: must equal ABI_VERSION in pagecopy.c (checked on load).
ABI_VERSION = 4
#: the C side's loop nest depth (component, layer, token).
MAX_DIMS = 3
#: bytes each extra thread must have to move before a call splits its page list.
PARALLEL_MIN_BYTES = 2 << 20


class NativeUnavailable(RuntimeError):
    """The native library could not be built or loaded (the torch fallback serves instead)."""


@dataclass(frozen=True, slots=True)
class Dim:
    """One loop around the memcpy: ``count`` steps of ``src_stride`` / ``dst_stride`` bytes."""
    count: int
    src_stride: int
    dst_stride: int


@dataclass(frozen=True, slots=True)
class LoopNest:
    """A copy's loops: ``dims`` (outermost first) around a copy of ``run`` bytes, with the
    loop over the page list between ``dims[page_depth - 1]`` and ``dims[page_depth]``;
    ``lead_src``: the source is the side walked in order (else the destination).
    Invariant: ``0 <= page_depth <= len(dims) <= MAX_DIMS``."""
    dims: tuple[Dim, ...]
    run: int
    page_depth: int
    lead_src: bool


def loop_nest(dims: list[Dim], run: int, *, lead_src: bool, src_page_stride: int, dst_page_stride: int) -> LoopNest:
    """Order the loops, fold adjacent runs into one copy, and place the page loop.

    One side *leads*: its addresses are walked in order as far as possible. It is the side
    that keeps a page's layers together (a ``page_first`` or ``page_first_direct`` host pool)
    when only one does, else the destination. Measured on the CPU: walking a ``page_first``
    page front to back, whichever direction the copy goes, while the other side is read or
    written in a few per-layer streams, runs at 0.9 of a contiguous copy; walking it with a
    stride runs at 0.5.

    Loops of one step are dropped; the rest go outermost to innermost by decreasing lead
    stride. While the innermost loop's strides both equal ``run``, its runs are adjacent on
    both sides and it joins the copied run (a whole page chunk, or a whole
    ``page_first_direct`` page across layers). The page loop goes inside every loop whose
    lead stride spans at least a lead page (components; layers of a ``layer_first`` lead),
    so each such region receives its pages one after another, in list order.
    """
    key = (lambda d: (d.src_stride, d.dst_stride)) if lead_src else (lambda d: (d.dst_stride, d.src_stride))
    kept = sorted((d for d in dims if d.count != 1), key=key, reverse=True)
    while kept and kept[-1].src_stride == run and kept[-1].dst_stride == run:
        run *= kept.pop().count
    if len(kept) > MAX_DIMS:
        raise AssertionError(f"{len(kept)} loops around a page copy; the C side takes {MAX_DIMS}")
    page_stride = src_page_stride if lead_src else dst_page_stride
    depth = sum(1 for d in kept if key(d)[0] >= page_stride)
    return LoopNest(tuple(kept), run, depth, lead_src)


# ------------------------------------------------------------------------------ build and load


def compiler() -> str:
    return buildcache.compiler()


def cache_dir() -> Path:
    return buildcache.cache_dir()


def library_path() -> Path:
    """Where the library for this source, compiler, flags and platform lives in the cache."""
    return buildcache.cached_path("pagecopy", [SOURCE.read_bytes(), " ".join(CFLAGS).encode()])


def build(path: Path) -> None:
    """Compile the source into ``path`` through a temporary file renamed into place."""
    try:
        buildcache.build(path, lambda tmp: [compiler(), *CFLAGS, "-o", tmp, str(SOURCE)])
    except buildcache.BuildFailed as exc:
        raise NativeUnavailable(str(exc)) from None


def open_library(path: Path) -> ctypes.CDLL:
    """Load a built library and declare its functions; NativeUnavailable if it is not ours."""
    try:
        lib = ctypes.CDLL(str(path))
        abi = lib.hicache_pagecopy_abi
        copy = lib.hicache_copy_pages
    except (OSError, AttributeError) as exc:
        raise NativeUnavailable(f"cannot load {path}: {exc}") from None
    abi.restype, abi.argtypes = ctypes.c_int, []
    if abi() != ABI_VERSION:
        raise NativeUnavailable(f"{path}: ABI {abi()} but this module speaks {ABI_VERSION}")
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    copy.restype = ctypes.c_int
    copy.argtypes = [ptr, ptr, i64, ptr, ptr, i64, i64, ctypes.c_int, ctypes.c_int, ctypes.POINTER(i64), i64,
                     ctypes.c_int]
    try:
        check = lib.hicache_check_pages
    except AttributeError as exc:
        raise NativeUnavailable(f"cannot load {path}: {exc}") from None
    check.restype = i64
    check.argtypes = [ptr, i64, i64, ptr, ctypes.POINTER(ctypes.c_int)]
    return lib


def load() -> ctypes.CDLL:
    """The library from the cache, built first when absent (or when the cached file will not load)."""
    path = library_path()
    if path.exists():
        try:
            return open_library(path)
        except NativeUnavailable:
            pass        # damaged or foreign file: rebuild it (the rename replaces it atomically)
    build(path)
    return open_library(path)


def disabled() -> bool:
    return buildcache.disabled()


_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL | None] = {}
_reason: list[str] = []


def library() -> ctypes.CDLL | None:
    """The native library, or None (disabled, or it failed: one warning). Decided once."""
    with _lock:
        if "lib" not in _loaded:
            lib = None
            if disabled():
                _reason[:] = [f"{ENV_DISABLE}=0"]
            else:
                try:
                    lib = load()
                except (NativeUnavailable, OSError) as exc:
                    _reason[:] = [str(exc)]
                    warnings.warn(f"hicache.kernels: the native CPU page copy is unavailable ({exc}); "
                                  "using the torch fallback", RuntimeWarning, stacklevel=2)
            _loaded["lib"] = lib
        return _loaded["lib"]


def unavailable_reason() -> str:
    """Why :func:`library` returned None ("" when it did not, or has not been asked)."""
    return _reason[0] if _reason else ""


def forget() -> None:
    """Drop the decision so the next :func:`library` call decides again (tests only)."""
    with _lock:
        _loaded.clear()
        _reason.clear()


# ----------------------------------------------------------------------------------- the call


def threads_for(nbytes: int) -> int:
    """As many threads as torch uses on the CPU, but none that would move under
    :data:`PARALLEL_MIN_BYTES`: a thread start costs more than a small copy."""
    import torch

    return max(1, min(torch.get_num_threads(), nbytes // PARALLEL_MIN_BYTES))


def copy_pages(src_ptr: int, dst_ptr: int, n: int, src_pages, dst_pages, src_page_stride: int,
               dst_page_stride: int, nest: LoopNest, *, page_bytes: int) -> None:
    """Copy ``n`` page pairs; ``src_pages``/``dst_pages`` are CPU int64 contiguous tensors or
    None (identity). Pointers and strides in bytes; the plan must be validated already."""
    lib = library()
    if lib is None:
        raise NativeUnavailable(f"native page copy unavailable: {unavailable_reason()}")
    flat = [v for d in nest.dims for v in (d.count, d.src_stride, d.dst_stride)]
    dims = (ctypes.c_int64 * max(1, len(flat)))(*flat)
    rc = lib.hicache_copy_pages(src_ptr, dst_ptr, n, src_pages.data_ptr() if src_pages is not None else None,
                                dst_pages.data_ptr() if dst_pages is not None else None, src_page_stride,
                                dst_page_stride, len(nest.dims), nest.page_depth, dims, nest.run,
                                threads_for(n * page_bytes))
    if rc != 0:
        raise AssertionError(f"hicache_copy_pages refused its arguments ({rc}): a planning bug")


def check_pages(ids, limit: int, unique: bool) -> tuple[int, int] | None:
    """One-pass validation of a CPU int64 contiguous page list: None when the native library
    is unavailable (the caller checks with torch), else (position of the first bad index or
    -1, why: 1 out of range, 2 repeated)."""
    lib = library()
    if lib is None:
        return None
    n = ids.numel()
    seen = ctypes.create_string_buffer((limit + 7) // 8) if unique else None
    why = ctypes.c_int(0)
    pos = lib.hicache_check_pages(ids.data_ptr() if n else None, n, limit, seen, ctypes.byref(why))
    return int(pos), why.value
