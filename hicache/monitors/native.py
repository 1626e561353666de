"""The monitors' native map writes: `csrc/incmap.c`, a CPython extension built on first use.

`module()` returns the loaded extension, or None when it cannot serve: `HICACHE_NATIVE=0`,
no C compiler or no Python headers (one RuntimeWarning says why), or a library that will not
load. Then maps/loops.py's Python loops serve, which define what each function does: the
monitors check the same properties either way, only their cost differs. Decided once per
process; the library is cached as hicache/buildcache.py describes, its name hashed with the
interpreter's extension ABI (`EXT_SUFFIX`), so each Python version builds its own.
"""
from __future__ import annotations

from pathlib import Path

from hicache import buildcache

SOURCE = Path(__file__).resolve().parent / "csrc" / "incmap.c"
NAME = "_hicache_incmap"
#: must equal ABI_VERSION in incmap.c (checked on load)
ABI_VERSION = 26

_EXTENSION = buildcache.Extension(
    "incmap", NAME, SOURCE, ABI_VERSION,
    warning="hicache.monitors: the native map writes are unavailable; the Python loops serve (same checks, "
            "slower strict mode)")
library_path = _EXTENSION.library_path
load = _EXTENSION.load
module = _EXTENSION.module
unavailable_reason = _EXTENSION.unavailable_reason
