"""Shared libraries compiled on first use, kept in the per-user cache (the native page copy,
hicache/kernels/native.py; the monitors' native loops, hicache/monitors/native.py and
fused_native.py, sample mode's gate, hicache/monitors/gate.py, and the event bus's dispatch,
hicache/runtime/events.py, which are CPython extension modules: the last two sections).

A library is named by a hash of everything its bytes depend on (source, compiler, flags,
platform, and for a Python extension the interpreter's ABI), so a changed input never loads
a stale file. Each build goes to a temporary file in the cache directory, renamed over the
final name (`os.replace` is atomic): concurrent processes never load a half-written library.

Settings: `$CC` (default `cc`), `$HICACHE_CACHE_DIR` (default `~/.cache/hicache`), and
`HICACHE_NATIVE=0`, which turns every native path off (the Python or torch code serves).
"""
from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable

ENV_DISABLE = "HICACHE_NATIVE"
ENV_CACHE = "HICACHE_CACHE_DIR"
ENV_CC = "CC"
COMPILE_TIMEOUT_S = 120


class BuildFailed(RuntimeError):
    """The compiler could not be run, or it failed (its message is the reason)."""


def compiler() -> str:
    return os.environ.get(ENV_CC) or "cc"


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "hicache")


def disabled() -> bool:
    return os.environ.get(ENV_DISABLE, "1").strip().lower() in ("0", "false", "no", "off")


def cached_path(stem: str, parts: list[bytes], suffix: str = ".so") -> Path:
    """Where the library built from `parts` (source, flags, ...) lives: `stem-<hash><suffix>`
    in the cache; the compiler, machine and platform are always part of the hash."""
    key = hashlib.sha256()
    for part in (*parts, compiler().encode(), platform.machine().encode(), sys.platform.encode()):
        key.update(part)
        key.update(b"\0")
    return cache_dir() / f"{stem}-{key.hexdigest()[:16]}{suffix}"


def build(path: Path, command: Callable[[str], list[str]]) -> None:
    """Run `command(tmp)` (a compiler line writing `tmp`) and rename its output to `path`;
    BuildFailed with the compiler's message when it cannot run or fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}-", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        cmd = command(tmp)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildFailed(f"cannot run {cmd[0]!r}: {exc}") from None
        if proc.returncode != 0:
            raise BuildFailed(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


# ------------------------------------------------------------------------------ Python extensions

#: the flags of a CPython extension module (the interpreter's headers are added)
EXT_CFLAGS = ("-O2", "-shared", "-fPIC")


def python_include() -> str:
    return sysconfig.get_paths()["include"]


def extension_path(stem: str, source: bytes) -> Path:
    """Where the extension built from C `source` lives: hashed with the flags, the headers'
    directory and the interpreter's extension suffix (each Python version builds its own)."""
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return cached_path(stem, [source, " ".join(EXT_CFLAGS).encode(), python_include().encode(), suffix.encode()],
                       suffix)


def can_build_extensions() -> bool:
    """Whether this machine has what `build_extension` needs: the compiler on PATH and the
    Python headers (the native paths are then expected to load unless HICACHE_NATIVE=0)."""
    return shutil.which(compiler()) is not None and (Path(python_include()) / "Python.h").exists()


def build_extension(path: Path, source: Path) -> None:
    """Compile the C file `source` into the extension `path` (BuildFailed without headers)."""
    if not (Path(python_include()) / "Python.h").exists():
        raise BuildFailed(f"no Python headers at {python_include()} (the python3-dev package)")
    build(path, lambda tmp: [compiler(), *EXT_CFLAGS, f"-I{python_include()}", "-o", tmp, str(source)])


def load_extension(name: str, path: Path) -> ModuleType:
    """The extension module `name` (its C init function is PyInit_<name>) from `path`."""
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, str(path), loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


class Extension:
    """One C extension module built on first use from `source` (a .c file whose module is
    `name` and whose `abi()` returns `abi`), decided once per process: `module()` is the loaded
    module, or None when it cannot serve (`HICACHE_NATIVE=0`, no compiler, no Python headers, a
    library that will not load), `unavailable_reason()` says why. With `warning` set, the first
    `module()` that finds it unavailable warns once (RuntimeWarning: the warning's text, then
    the reason); without, the Python twin serves silently (where another extension of the same
    build already warns)."""

    def __init__(self, stem: str, name: str, source: Path, abi: int, warning: str | None = None):
        self.stem, self.name, self.source, self.abi, self.warning = stem, name, source, abi, warning
        self._lock = threading.Lock()
        self._decided = False                 # (module() has looked once: _mod is the answer)
        self._mod: ModuleType | None = None
        self._reason = ""

    def library_path(self) -> Path:
        return extension_path(self.stem, self.source.read_bytes())

    def _open(self, path: Path) -> ModuleType:
        # (an extension module's init function is named after the module: the file's own
        # name, which carries the hash, is only where the loader reads it from)
        mod = load_extension(self.name, path)
        if mod.abi() != self.abi:
            raise ImportError(f"{path}: ABI {mod.abi()} but this module speaks {self.abi}")
        return mod

    def load(self) -> ModuleType:
        """The extension from the cache, built first when absent (or when the cached file
        will not load); BuildFailed or ImportError when it cannot be had."""
        path = self.library_path()
        if path.exists():
            try:
                return self._open(path)
            except (ImportError, OSError, AttributeError):
                pass        # damaged or foreign: rebuilt below (the rename replaces it atomically)
        build_extension(path, self.source)
        return self._open(path)

    def module(self) -> ModuleType | None:
        """The extension, or None (disabled, or unavailable). Decided once."""
        with self._lock:
            if not self._decided:
                if disabled():
                    self._reason = f"{ENV_DISABLE}=0"
                else:
                    try:
                        self._mod = self.load()
                    except (BuildFailed, ImportError, OSError) as exc:
                        self._reason = str(exc)
                        if self.warning is not None:
                            warnings.warn(f"{self.warning} ({exc})", RuntimeWarning, stacklevel=2)
                self._decided = True
            return self._mod

    def unavailable_reason(self) -> str:
        """Why `module()` returned None ("" when it did not, or has not been asked)."""
        return self._reason
