"""Optional cost model: served tokens per tier -> estimated prefill time and queueing delay.

Per request (tokens from `Served`): host-served tokens cross the host->device link, storage
tokens cross storage->host first; device-tier tokens of a sharded engine are all-gathered
per layer over the scale-up link; missed tokens are computed. Layer-wise loading overlaps
compute, so a request's prefill time is

    max(compute, host load, storage load) + gather
    compute = (2 * active_params * miss + 4 * layers * attn_dim * miss * (hit + miss / 2)) / flops
    host load = host_tokens * kv_bytes_per_token / (host_link_GBps * ranks loading in parallel)

With replicated pages every rank loads every page (ranks in parallel: 1); with sharded
pages each rank loads only its own (K in parallel, each moving 1/K). Requests arrive at the
trace's timestamps and queue FIFO for `engines` prefill engines; queueing delay is
start - arrival. Defaults describe a DeepSeek-V3-class MLA model (61 layers, 576-dim latent,
bf16: 70,272 bytes per token; 37 B active parameters) on four GPUs per engine; they are
documented estimates, not measurements: change them with `CostModel(...)`.
"""
from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CostModel:
    kv_bytes_per_token: int = 61 * 576 * 2      # layers x latent dim x bf16
    layers: int = 61
    attn_dim: int = 128 * 192                   # heads x qk head dim (attention FLOPs)
    active_params: float = 37e9
    engine_flops: float = 4 * 2.5e15 * 0.5      # 4 GPUs x dense bf16 x 50 % utilisation
    host_link_GBps: float = 50.0                # host -> device, per rank
    storage_link_GBps: float = 10.0             # storage -> host, per engine
    gather_link_GBps: float = 400.0             # all-gather per rank (scale-up link)
    engines: int = 4                            # prefill engines sharing the arrivals (the
                                                # conversation trace's rate saturates two)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not v > 0:
                raise ValueError(f"{f.name}: must be > 0, got {v!r}")
        if not isinstance(self.engines, int):
            raise ValueError(f"engines: must be an int, got {self.engines!r}")

    def prefill_seconds(self, n: int, device: int, host: int, storage: int,
                        cp: int, sharded: bool) -> float:
        hit = device + host + storage
        miss = max(n - hit, 0)
        compute = (2 * self.active_params * miss
                   + 4 * self.layers * self.attn_dim * miss * (hit + miss / 2)) / self.engine_flops
        b = self.kv_bytes_per_token
        par = cp if sharded else 1
        host_load = (host + storage) * b / (self.host_link_GBps * 1e9 * par)
        storage_load = storage * b / (self.storage_link_GBps * 1e9)
        # sharded: every rank gathers the (K-1)/K of the cached prefix it does not own
        gather = (hit * b * (cp - 1) / cp / (self.gather_link_GBps * 1e9)) if sharded else 0.0
        return max(compute, host_load, storage_load) + gather

    def simulate(self, timestamps_ms: Sequence[int], served, cp: int, sharded: bool) -> dict:
        """FIFO over `engines` servers at the trace's arrival times."""
        if len(timestamps_ms) != len(served):
            raise ValueError("timestamps: one per served request expected")
        free_at = [0.0] * self.engines    # min-heap of engine free times
        prefill = queue = 0.0
        queue_max = 0.0
        for i, ts in enumerate(timestamps_ms):
            t = ts / 1000.0
            s = self.prefill_seconds(served.input[i], served.device[i], served.host[i],
                                     served.storage[i], cp, sharded)
            start = max(t, free_at[0])
            heapq.heapreplace(free_at, start + s)
            prefill += s
            q = start - t
            queue += q
            queue_max = max(queue_max, q)
        n = max(len(served), 1)
        return {"mean_prefill_s": prefill / n, "mean_queue_s": queue / n, "max_queue_s": queue_max}

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)
