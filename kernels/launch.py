"""Launch settings for the copy kernels: one small deterministic function, autotuning opt-in.

A page copy is bound by memory bandwidth. Each program moves one (component, layer, page)
chunk in tiles of ``block`` words; 16 KiB tiles keep enough bytes in flight per program while
staying inside the register budget of 4-8 warps. The same inputs always give the same
settings, so a run is reproducible and a test exercises the configuration production uses.

``HICACHE_KERNEL_AUTOTUNE=1`` (read per call) lets :func:`tuned` time a few candidates once
per (kernel, chunk, word) key on a GPU and keep the fastest; it is off by default.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable

#: bytes one program moves per loop iteration, at most.
TILE_BYTES = 16 * 1024


@dataclass(frozen=True, slots=True)
class LaunchConfig:
    block: int       # words per tile; a power of two (tl.arange needs one)
    num_warps: int


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def copy_config(chunk_words: int, word_bytes: int) -> LaunchConfig:
    """Tile size and warps for copying chunks of ``chunk_words`` words of ``word_bytes`` each."""
    block = min(next_pow2(chunk_words), max(1, TILE_BYTES // word_bytes))
    tile = block * word_bytes
    num_warps = 8 if tile >= 8192 else 4 if tile >= 2048 else 2 if tile >= 512 else 1
    return LaunchConfig(block=block, num_warps=num_warps)


def autotune_enabled() -> bool:
    return os.environ.get("HICACHE_KERNEL_AUTOTUNE", "0") not in ("", "0")


_tuned: dict[tuple, LaunchConfig] = {}


def tuned(key: tuple, default: LaunchConfig, launch: Callable[[LaunchConfig], None], device_type: str) -> LaunchConfig:
    """``default``, or with autotuning on a GPU, the fastest of a few candidates (timed once per key).

    ``launch`` runs the kernel with a candidate. Re-running a copy is harmless: the plans refuse
    copies that read what they write, so every candidate writes the same bytes.
    """
    if not autotune_enabled() or device_type != "cuda":
        return default
    from triton.testing import do_bench

    def time_config(cfg: LaunchConfig) -> float:
        return do_bench(lambda: launch(cfg), warmup=5, rep=20)

    if key not in _tuned:
        candidates = {default}
        for block in (default.block // 2, default.block * 2):
            for warps in (4, 8):
                if block >= 1:
                    candidates.add(LaunchConfig(block=block, num_warps=warps))
        _tuned[key] = min(sorted(candidates, key=lambda c: (c.block, c.num_warps)), key=time_config)
    return _tuned[key]
