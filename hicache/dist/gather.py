"""Per-layer gather of a CP-sharded cached prefix into two alternating scratch slots.

For layer l the ranks all-gather the prefix pages they own into slot l % 2. The gather of
layer l starts only after this rank restored layer l (its load-back event); the collective
completes only when every rank entered it, i.e. after every rank restored l. Attention on
layer l waits for the slot's ready event; the gather of l+2 reuses the slot only after
attention on l released it. With overlap on, a gather thread runs ahead (gather of l+1 while
layer l computes); with overlap off the main thread gathers right before attention.
Transitions are checked by hicache.protocol.layer_pipeline.LayerPipelineGuard.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist

from hicache.kernels import gather_pages
from hicache.protocol.cp_layout import CPLayout
from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.layer_pipeline import LayerPipelineGuard, slot_of
from hicache.protocol.vocabulary import LayerPipeline

from .comm import Comm
from .errors import LocalTimeout


class GatherStats:
    """Accumulated per-layer gather cost and the time attention spent waiting for it."""
    __slots__ = ("layers", "gather_s", "wait_s")

    def __init__(self) -> None:
        self.layers, self.gather_s, self.wait_s = 0, 0.0, 0.0

    def overlap_fraction(self) -> float:
        """Share of gather time hidden behind compute (0: none, 1: all)."""
        if self.gather_s <= 0:
            return 0.0
        return max(0.0, min(1.0, 1.0 - self.wait_s / self.gather_s))

    def as_dict(self) -> dict[str, float]:
        per = self.gather_s / self.layers if self.layers else 0.0
        return {"layers": self.layers, "gather_s": round(self.gather_s, 6), "wait_s": round(self.wait_s, 6),
                "per_layer_gather_ms": round(per * 1e3, 4), "overlap_fraction": round(self.overlap_fraction(), 4)}


class PrefixGather:
    """One forward pass's gathers. Use: start(); for l: buf = acquire(l) ... release(l); close()."""

    def __init__(self, comm: Comm, layout: CPLayout, device_pool: torch.Tensor, pages: Sequence[int],
                 restore_wait: Callable[[int], bool], *, overlap: bool, timeout_s: float, stats: GatherStats,
                 listener: Listener = NULL_LISTENER) -> None:
        self.comm, self.layout, self.pool, self.pages = comm, layout, device_pool, list(pages)
        self.restore_wait, self.overlap, self.timeout_s = restore_wait, overlap, timeout_s
        self.stats, self.listener = stats, listener
        self.num_layers = device_pool.shape[0]
        n = layout.cp_size
        self._owned = [[i for i, p in enumerate(self.pages) if layout.page_owner(p) == r] for r in range(n)]
        self._width = max((len(o) for o in self._owned), default=0)
        me = comm.topo.cp_rank
        # Rows of the kernels' page view: a page is page_size consecutive rows.
        self._row = (device_pool[0, 0].numel() // layout.page_size,)
        self._pack_ids = torch.tensor([layout.local_page(self.pages[i]) for i in self._owned[me]], dtype=torch.long)
        where = {i: r * self._width + j for r, owned in enumerate(self._owned) for j, i in enumerate(owned)}
        self._unpack_ids = torch.tensor([where[i] for i in range(len(self.pages))], dtype=torch.long)
        page_shape = device_pool.shape[2:]
        self._slots = [torch.zeros(len(self.pages), *page_shape, dtype=device_pool.dtype) for _ in range(2)]
        self._ready = [threading.Event() for _ in range(self.num_layers)]
        self._free = [threading.Event() for _ in range(2)]
        for ev in self._free:
            ev.set()
        self._guard = LayerPipelineGuard(self.num_layers)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    # --- main thread ------------------------------------------------------------------
    def start(self) -> None:
        if self.overlap:
            self._thread = threading.Thread(target=self._run_all, name=f"gather-r{self.comm.rank}", daemon=True)
            self._thread.start()

    def acquire(self, layer: int) -> torch.Tensor:
        """The gathered prefix of `layer` ([pages, 2, ps, H, D]); AttentionStart."""
        t0 = time.perf_counter()
        if self.overlap:
            if not self._ready[layer].wait(self.timeout_s):
                self._raise_if_failed()
                raise LocalTimeout(f"gather[{layer}]", self.comm.rank, "gathered layer never became ready")
            self._raise_if_failed()
        else:
            self._gather(layer)
        self.stats.wait_s += time.perf_counter() - t0
        with self._lock:
            self._guard.attention_start(layer)
        self.listener(LayerPipeline.AttentionStart, {"rank": self.comm.rank, "layer": layer})
        return self._slots[slot_of(layer)]

    def release(self, layer: int) -> None:
        with self._lock:
            self._guard.attention_finish(layer)
        self.listener(LayerPipeline.AttentionFinish, {"rank": self.comm.rank, "layer": layer})
        self._free[slot_of(layer)].set()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(self.timeout_s)
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            raise self._error

    # --- gather (thread or main) --------------------------------------------------------
    def _run_all(self) -> None:
        try:
            for layer in range(self.num_layers):
                if not self._free[slot_of(layer)].wait(self.timeout_s):
                    raise LocalTimeout(f"gather[{layer}]", self.comm.rank, "scratch slot never released")
                self._gather(layer)
        except BaseException as exc:
            self._error = exc
            for ev in self._ready:
                ev.set()

    def _gather(self, layer: int) -> None:
        if not self.restore_wait(layer):
            raise LocalTimeout(f"gather[{layer}]", self.comm.rank, f"restore of layer {layer} did not finish")
        self.listener(LayerPipeline.RankRestoreLayer, {"rank": self.comm.rank, "layer": layer})
        slot = slot_of(layer)
        with self._lock:
            self._guard.rank_restore_layer(layer)
            self._guard.gather_start(layer)
        self._free[slot].clear()
        self.listener(LayerPipeline.GatherStart, {"rank": self.comm.rank, "layer": layer, "slot": slot})
        t0 = time.perf_counter()
        ps = self.layout.page_size
        send = torch.zeros(self._width, *self.pool.shape[2:], dtype=self.pool.dtype)
        if self._pack_ids.numel():     # pack this rank's pages of the prefix (page-gather kernel)
            gather_pages(self.pool[layer].view(-1, *self._row), self._pack_ids,
                         send[:self._pack_ids.numel()].view(-1, *self._row), page_size=ps)
        parts = [torch.empty_like(send) for _ in range(self.layout.cp_size)]
        label = f"gather[{layer}]"
        self.comm.run_step(label, lambda: dist.all_gather(parts, send, group=self.comm.gather_group))
        out = self._slots[slot]
        if self._unpack_ids.numel():   # owner-major parts -> prefix order
            gather_pages(torch.cat(parts).view(-1, *self._row), self._unpack_ids, out.view(-1, *self._row),
                         page_size=ps)
        self.stats.gather_s += time.perf_counter() - t0
        self.stats.layers += 1
        with self._lock:
            self._guard.gather_finish(layer)
        self.listener(LayerPipeline.GatherFinish, {"rank": self.comm.rank, "layer": layer, "slot": slot})
        self._ready[layer].set()
