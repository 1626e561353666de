"""Triton, when it is installed, and the one place that decides how a kernel runs.

Kernel modules write ``@jit`` and ``tl.constexpr`` from here so that they import (and their
torch references run) on machines without Triton; launching a kernel there raises
:class:`TritonUnavailable`. Whether a kernel is compiled for the GPU or run by Triton's CPU
interpreter (``TRITON_INTERPRET=1``) is decided per launch from the tensors' device, not at
import time, so the order in which modules were imported cannot change the outcome.
"""
from __future__ import annotations

import os
from typing import Any

try:  # Triton is an optional dependency (`pip install hicache[triton]`).
    import triton
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    HAVE_TRITON = True
    IMPORT_ERROR = ""
except ImportError as exc:  # pragma: no cover - exercised only where triton is absent
    triton = None
    HAVE_TRITON = False
    IMPORT_ERROR = f"triton is not importable: {exc}"

    class _Constexpr:  # stands in for tl.constexpr in kernel signatures
        pass

    class _TL:
        constexpr = _Constexpr

    tl = _TL()
    InterpretedFunction = None


class TritonUnavailable(RuntimeError):
    """A Triton kernel was launched where Triton cannot run it."""


class _MissingKernel:
    """What ``@jit`` returns without Triton: importable, not launchable."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn

    def __getitem__(self, grid: Any) -> Any:
        raise TritonUnavailable(f"{self.fn.__name__}: {IMPORT_ERROR}")


def jit(fn: Any) -> Any:
    """``triton.jit`` where Triton is installed; an unlaunchable stand-in otherwise."""
    return triton.jit(fn) if HAVE_TRITON else _MissingKernel(fn)


def interpreting() -> bool:
    """True when Triton kernels run on CPU tensors through the interpreter."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


_interpreted: dict[int, Any] = {}


def runnable(kernel: Any, device_type: str) -> Any:
    """The form of ``kernel`` that runs on ``device_type`` ("cuda", or "cpu" when interpreting).

    ``triton.jit`` picks compiled or interpreted once, at decoration; a module imported before
    TRITON_INTERPRET was set would otherwise try to compile for a GPU that is not there.
    """
    if not HAVE_TRITON:
        raise TritonUnavailable(IMPORT_ERROR)
    if device_type == "cpu":
        if not interpreting():
            raise ValueError("Triton kernels run on CPU tensors only with TRITON_INTERPRET=1")
        if isinstance(kernel, InterpretedFunction):
            return kernel
        key = id(kernel)
        if key not in _interpreted:
            _interpreted[key] = InterpretedFunction(kernel.fn)
        return _interpreted[key]
    if device_type != "cuda":
        raise ValueError(f"Triton kernels need CUDA tensors, got device type {device_type!r}")
    if isinstance(kernel, InterpretedFunction):
        # Imported while interpreting but launched on a GPU: compile it after all.
        key = id(kernel)
        if key not in _interpreted:
            _interpreted[key] = triton.runtime.jit.JITFunction(kernel.fn)
        return _interpreted[key]
    return kernel
