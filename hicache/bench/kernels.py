"""`hicache bench kernels`: page-copy bandwidth of the dispatch layer against a plain copy.

On the CPU the dispatch layer runs the native one-pass C copy (or, where it cannot be built or
``HICACHE_NATIVE=0``, the torch fallback; ``cpu_path`` in the result says which); each
operation's bytes/s is compared with a plain contiguous ``torch`` copy of the same number of
bytes, timed in the same run, interleaved (target ratio >= 0.7). Both sides run on one thread
(the native copy uses as many threads as torch).

On a GPU the Triton kernels are compared with the measured device-to-device copy (gather,
scatter) and with the pinned host<->device copy (transfers) (target >= 0.8), timed with CUDA
events around back-to-back calls (see :func:`_best_events`); the host's per-call time
(validation and launch) is reported beside each figure.

Pages are 16 KiB (page size 16) and 64 KiB (page size 64): fp16, 4 KV heads of dim 128, so one
page of one layer of K (or V) is ``page_size * 1 KiB``.

Bytes counted = bytes written to the destination (a copy of N bytes reads N and writes N, as
the baseline does). Page ids are random, unsorted and duplicate-free. Each figure is the best
of ``--runs`` rounds of a few repetitions.
"""
from __future__ import annotations

import argparse
import os
import platform
import time
from dataclasses import dataclass
from typing import Callable

#: target ratios of the issue: fallback vs contiguous copy on CPU, Triton vs hardware copy on GPU.
CPU_TARGET = 0.7
GPU_TARGET = 0.8

#: (page_size, heads, head_dim): fp16 pages of 16 KiB and 64 KiB per layer and component.
PAGE_SHAPES = [(16, 4, 128), (64, 4, 128)]
LAYERS = 4

#: bytes each operation moves, by device and --quick. On the CPU they exceed the last-level
#: cache (32 MiB on the machine of docs/benchmarks.md), so memory bandwidth is what is measured.
MOVED_BYTES = {"cpu": {False: 64 << 20, True: 16 << 20}, "cuda": {False: 256 << 20, True: 64 << 20}}


@dataclass(frozen=True, slots=True)
class Case:
    name: str
    baseline: str             # which reference copy it is compared with
    nbytes: int               # bytes the operation writes
    run: Callable[[], None]


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine(torch) -> dict:
    info = {"cpu": _cpu_name(), "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "python": platform.python_version()}
    try:
        import triton
        info["triton"] = triton.__version__
    except ImportError:
        info["triton"] = None
    if torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def _best_interleaved(fns: list[Callable[[], None]], runs: int, reps: int, sync: Callable[[], None]) -> list[float]:
    """Best seconds of each function, timing them in turn so that load changes hit all alike."""
    best = [float("inf")] * len(fns)
    for fn in fns:          # warm-up: first touch of pages, allocator, kernel compilation
        fn()
    sync()
    for _ in range(runs):
        for _ in range(reps):
            for i, fn in enumerate(fns):
                sync()
                t0 = time.perf_counter()
                fn()
                sync()
                best[i] = min(best[i], time.perf_counter() - t0)
    return best


def _best_events(torch, fns: list[Callable[[], None]], runs: int, reps: int) -> tuple[list[float], list[float]]:
    """GPU: (device seconds per call, host seconds per call) of each function, best of ``runs``.

    Each round enqueues ``reps`` calls back to back between two CUDA events, as a serving
    engine's host runs ahead of its stream: the device time is the kernel's, plus any gap the
    host's per-call work (validation, launch) leaves when it is slower than the copy itself.
    The host time is how long enqueuing one call took, reported beside it.
    """
    best = [float("inf")] * len(fns)
    host = [float("inf")] * len(fns)
    for fn in fns:
        fn()
    torch.cuda.synchronize()
    for _ in range(runs):
        for i, fn in enumerate(fns):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            host[i] = min(host[i], (time.perf_counter() - t0) / reps)
            end.record()
            end.synchronize()
            best[i] = min(best[i], start.elapsed_time(end) / 1e3 / reps)
    return best, host


def _cases(torch, k, dev, host_dev, ps: int, heads: int, dim: int, moved: int, pin: bool) -> list[Case]:
    """The measured operations for one page shape, with pools on ``dev`` / ``host_dev``."""
    gen = torch.Generator().manual_seed(0)
    page_bytes = ps * heads * dim * 2
    n = max(1, moved // (2 * LAYERS * page_bytes))          # pages per transfer (all layers, K+V)
    pages = 2 * n
    dtype = torch.float16

    def pool(shape, device, pinned=False):
        t = torch.empty(shape, dtype=dtype, device=device, pin_memory=pinned and device == "cpu")
        t.view(torch.int16).random_()      # every page touched, so no first-touch faults are timed
        return t

    device = pool((2, LAYERS, pages * ps, heads, dim), dev)
    ids = lambda: torch.randperm(pages, generator=gen)[:n].to(torch.int64)   # noqa: E731
    src_ids, dst_ids = ids(), ids()

    # Gather / scatter of one layer's K, moving as many bytes as an all-layer transfer.
    n_g = 2 * LAYERS * n
    layer_pool = pool((2 * n_g * ps, heads, dim), dev)
    g_ids = torch.randperm(2 * n_g, generator=gen)[:n_g].to(torch.int64)
    scratch = pool((n_g * ps, heads, dim), dev)
    cases = [
        Case("gather", "d2d", n_g * page_bytes, lambda: k.gather_pages(layer_pool, g_ids, scratch, page_size=ps)),
        Case("scatter", "d2d", n_g * page_bytes, lambda: k.scatter_pages(scratch, layer_pool, g_ids, page_size=ps)),
    ]
    shapes = {
        k.Layout.LAYER_FIRST: (2, LAYERS, pages * ps, heads, dim),
        k.Layout.PAGE_FIRST: (2, pages * ps, LAYERS, heads, dim),
        k.Layout.PAGE_FIRST_DIRECT: (2, pages, LAYERS, ps, heads, dim),
    }
    for layout, shape in shapes.items():
        host = pool(shape, host_dev, pinned=pin)
        total = 2 * LAYERS * n * page_bytes
        cases.append(Case(f"backup_all_layers[{layout.value}]", "d2h", total,
                          lambda h=host, lay=layout: k.transfer_pages(device, h, src_ids, dst_ids, page_size=ps,
                                                                      dst_layout=lay)))
        cases.append(Case(f"load_all_layers[{layout.value}]", "h2d", total,
                          lambda h=host, lay=layout: k.transfer_pages(h, device, dst_ids, src_ids, page_size=ps,
                                                                      src_layout=lay)))
        if layout is k.Layout.LAYER_FIRST:
            cases.append(Case(f"load_one_layer[{layout.value}]", "h2d", 2 * n * page_bytes,
                              lambda h=host: k.transfer_pages(h, device, dst_ids, src_ids, page_size=ps,
                                                              src_layout=k.Layout.LAYER_FIRST, layer=1)))
    return cases


def _baselines(torch, dev: str, nbytes: int, pin: bool) -> dict[str, Callable[[], None]]:
    """Plain copies of ``nbytes``: on the CPU one contiguous copy; on a GPU D2D, H2D and D2H."""
    a = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_()
    b = torch.empty_like(a)
    if dev == "cpu":
        copy = lambda: b.copy_(a)          # noqa: E731
        return {"d2d": copy, "d2h": copy, "h2d": copy}
    h = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin).random_()
    return {"d2d": lambda: b.copy_(a), "h2d": lambda: a.copy_(h, non_blocking=True),
            "d2h": lambda: h.copy_(a, non_blocking=True)}


def gpu_selfcheck(torch, k, device: str = "cuda") -> dict[str, bool]:
    """On a GPU: each Triton kernel against the torch reference on small odd shapes (bit-exact
    copies; attention within bf16 tolerance). Pinned host pools, as the runtime uses them.
    (``device="cpu"`` runs the same checks through Triton's interpreter, for the tests.)"""
    from hicache.kernels import attention, packed, page_gather, transfer

    gen = torch.Generator().manual_seed(7)
    ps, c, nl, h, d, pages = 16, 2, 3, 3, 5, 6

    cuda = device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def bits(shape, pinned=False):
        t = torch.randint(0, 256, (torch.Size(shape).numel() * 2,), dtype=torch.uint8, generator=gen)
        t = t.view(torch.bfloat16).reshape(shape)
        return (t.pin_memory() if cuda else t) if pinned else t.to(device)

    checks = {}
    ids_a, ids_b = torch.tensor([4, 0, 2]), torch.tensor([1, 5, 3])
    hosts = {k.Layout.LAYER_FIRST: (c, nl, pages * ps, h, d), k.Layout.PAGE_FIRST: (c, pages * ps, nl, h, d),
             k.Layout.PAGE_FIRST_DIRECT: (c, pages, nl, ps, h, d)}
    for layout, shape in hosts.items():
        for layer in (None, 1):
            dev = bits((c, nl, pages * ps, h, d))
            host_t, host_r = bits(shape, pinned=True), None
            host_r = host_t.clone()
            transfer.transfer_pages_triton(dev, host_t, ids_a, ids_b, page_size=ps, dst_layout=layout, layer=layer)
            transfer.transfer_pages_torch(dev, host_r, ids_a, ids_b, page_size=ps, dst_layout=layout, layer=layer)
            sync()
            ok = torch.equal(host_t.view(torch.int16), host_r.view(torch.int16))
            back_t, back_r = torch.zeros_like(dev), torch.zeros_like(dev)
            transfer.transfer_pages_triton(host_t, back_t, ids_b, ids_a, page_size=ps, src_layout=layout, layer=layer)
            transfer.transfer_pages_torch(host_r, back_r, ids_b, ids_a, page_size=ps, src_layout=layout, layer=layer)
            sync()
            checks[f"transfer[{layout.value},layer={layer}]"] = ok and torch.equal(back_t.view(torch.int16),
                                                                                 back_r.view(torch.int16))
    pool = bits((pages * ps, h, d))
    out_t, out_r = bits((3 * ps, h, d)), bits((3 * ps, h, d))
    page_gather.gather_pages_triton(pool, ids_a.to(device), out_t, page_size=ps)
    page_gather.gather_pages_torch(pool, ids_a.to(device), out_r, page_size=ps)
    checks["gather"] = torch.equal(out_t.view(torch.int16), out_r.view(torch.int16))
    pool_r = pool.clone()
    page_gather.scatter_pages_triton(out_t, pool, ids_b, page_size=ps)
    page_gather.scatter_pages_torch(out_t, pool_r, ids_b, page_size=ps)
    checks["scatter"] = torch.equal(pool.view(torch.int16), pool_r.view(torch.int16))
    tgt, dft = bits((c, nl, pages * ps, h, d)), bits((c, 1, pages * ps, h, d))
    host_t = bits((c, pages * ps, nl + 1, h, d), pinned=True)
    host_r = host_t.clone()
    packed.transfer_packed_triton(tgt, dft, host_t, ids_a, ids_b, direction="to_host", page_size=ps,
                                  host_layout="page_first")
    packed.transfer_packed_torch(tgt, dft, host_r, ids_a, ids_b, direction="to_host", page_size=ps,
                                 host_layout="page_first")
    sync()
    checks["packed"] = torch.equal(host_t.view(torch.int16), host_r.view(torch.int16))
    q = torch.randn(5, 6, 12, generator=gen).to(device, torch.bfloat16)
    kl, vl = (torch.randn(pages * ps, 2, 12, generator=gen).to(device, torch.bfloat16) for _ in range(2))
    table, seq_lens, q_lens = torch.tensor([[3, 1, 5], [0, 2, 4]]), torch.tensor([40, 17]), torch.tensor([1, 4])
    a = attention.paged_attention_triton(q, kl, vl, table, seq_lens, q_lens, page_size=ps)
    r = attention.paged_attention_torch(q, kl, vl, table, seq_lens, q_lens, page_size=ps)
    checks["paged_attention"] = bool(torch.allclose(a.float(), r.float(), atol=2e-2, rtol=2e-2))
    return checks


BASELINE_NAMES = {"cpu": {"d2d": "contiguous torch copy", "d2h": "contiguous torch copy",
                          "h2d": "contiguous torch copy"},
                  "cuda": {"d2d": "device-to-device copy", "d2h": "pinned device-to-host copy",
                           "h2d": "pinned host-to-device copy"}}


def run(args: argparse.Namespace) -> dict:
    import torch

    from hicache import kernels as k

    quick = bool(getattr(args, "quick", False))
    runs = max(1, int(getattr(args, "runs", 3) or 1))
    gpu = torch.cuda.is_available()
    dev = "cuda" if gpu else "cpu"
    moved = MOVED_BYTES[dev][quick]
    reps = 3 if quick else 5
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    target = GPU_TARGET if gpu else CPU_TARGET
    # On the CPU both sides run on one thread: on a small shared machine a second thread's
    # scheduling noise swamps the difference being measured.
    threads = torch.get_num_threads()
    if not gpu:
        torch.set_num_threads(1)
    comparisons = []
    try:
        for ps, heads, dim in PAGE_SHAPES:
            for case in _cases(torch, k, dev, "cpu" if gpu else dev, ps, heads, dim, moved, pin=gpu):
                base = _baselines(torch, dev, case.nbytes, pin=gpu)[case.baseline]
                host_s = None
                if gpu:
                    (t_op, t_base), (host_s, _) = _best_events(torch, [case.run, base], runs, 2 * reps)
                else:
                    t_op, t_base = _best_interleaved([case.run, base], runs, reps, sync)
                op_gbps, base_gbps = case.nbytes / t_op / 1e9, case.nbytes / t_base / 1e9
                ratio = op_gbps / base_gbps
                comparisons.append({
                    "name": case.name, "page_size": ps, "page_bytes": ps * heads * dim * 2, "bytes": case.nbytes,
                    "kernel_gbps": round(op_gbps, 3), "baseline": BASELINE_NAMES[dev][case.baseline],
                    "baseline_gbps": round(base_gbps, 3), "ratio": round(ratio, 3),
                    "meets_target": ratio >= target,
                    **({"host_us_per_call": round(host_s * 1e6, 1)} if host_s is not None else {}),
                })
        info = machine(torch)
    finally:
        torch.set_num_threads(threads)
    checks = gpu_selfcheck(torch, k) if gpu and k.backend(dev) is k.Backend.TRITON else None
    return {
        "bench": "kernels",
        "gpu_checks": checks,
        "backend": k.backend(dev).value,
        "cpu_path": k.backend("cpu").value,     # what CPU tensors get: native or torch
        "device": dev,
        "machine": info,
        "target_ratio": target,
        "quick": quick,
        "runs": runs,
        "comparisons": comparisons,
        "all_meet_target": all(c["meets_target"] for c in comparisons),
    }
