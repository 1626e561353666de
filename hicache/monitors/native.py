"""The monitors' native map writes: `csrc/incmap.c`, a CPython extension built on first use.

`module()` returns the loaded extension, or None when it cannot serve: `HICACHE_NATIVE=0`,
no C compiler or no Python headers (one RuntimeWarning says why), or a library that will not
load. Then maps/poswrites.py's Python loops serve, which define what each function does: the
monitors check the same properties either way, only their cost differs. Decided once per
process; the library is cached as hicache/buildcache.py describes, its name hashed with the
interpreter's extension ABI (`EXT_SUFFIX`), so each Python version builds its own.
"""
from __future__ import annotations

import threading
import warnings
from pathlib import Path
from types import ModuleType

from hicache import buildcache

SOURCE = Path(__file__).resolve().parent / "csrc" / "incmap.c"
NAME = "_hicache_incmap"
#: must equal ABI_VERSION in incmap.c (checked on load)
ABI_VERSION = 6

_lock = threading.Lock()
_loaded: dict[str, ModuleType | None] = {}
_reason: list[str] = []


def library_path() -> Path:
    return buildcache.extension_path("incmap", SOURCE.read_bytes())


def _open(path: Path) -> ModuleType:
    # (an extension module's init function is named after the module: the file's own name,
    # which carries the hash, is only where the loader reads it from)
    mod = buildcache.load_extension(NAME, path)
    if mod.abi() != ABI_VERSION:
        raise ImportError(f"{path}: ABI {mod.abi()} but this module speaks {ABI_VERSION}")
    return mod


def load() -> ModuleType:
    """The extension from the cache, built first when absent (or when the cached file will
    not load); BuildFailed or ImportError when it cannot be had."""
    path = library_path()
    if path.exists():
        try:
            return _open(path)
        except (ImportError, OSError, AttributeError):
            pass        # damaged or foreign: rebuilt below (the rename replaces it atomically)
    buildcache.build_extension(path, SOURCE)
    return _open(path)
def module() -> ModuleType | None:
    """The native writes, or None (disabled, or unavailable: one warning). Decided once."""
    with _lock:
        if "mod" not in _loaded:
            mod = None
            if buildcache.disabled():
                _reason[:] = [f"{buildcache.ENV_DISABLE}=0"]
            else:
                try:
                    mod = load()
                except (buildcache.BuildFailed, ImportError, OSError) as exc:
                    _reason[:] = [str(exc)]
                    warnings.warn(f"hicache.monitors: the native map writes are unavailable ({exc}); "
                                  "the Python loops serve (same checks, slower strict mode)",
                                  RuntimeWarning, stacklevel=2)
            _loaded["mod"] = mod
        return _loaded["mod"]


def unavailable_reason() -> str:
    """Why `module()` returned None ("" when it did not, or has not been asked)."""
    return _reason[0] if _reason else ""
