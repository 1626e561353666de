"""Replay evaluation: the brief's two comparisons, on any Mooncake-format trace.

1. CP sharding at equal memory: `cp` ranks with `device_tokens` of device memory each and
   one host budget of `host_tokens` per engine; baseline = every rank replicates pages
   (logical device capacity = one rank's), sharded = each page on its owner rank only
   (logical capacity = cp x one rank's, filled per owner class). Reported: device hit rate,
   device+host hit rate, host-served tokens and their reduction.
2. Storage tier: the same setup without and with storage (file, Mooncake or in-memory),
   against the trace's infinite-cache ceiling.
Every number comes from the real runtime (tree, allocators, host slot states, storage
protocol) in metadata-only mode; `sync` makes the runs deterministic.
"""
from __future__ import annotations

import dataclasses
import time

from hicache.replay.costmodel import CostModel
from hicache.replay.driver import ReplayConfig, Served, StorageKind, TraceStream, replay
from hicache.replay.trace import (BLOCK_TOKENS, INT64_MAX, LoadedTrace, check_limit,
                                  check_page_size, iter_requests)


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class EvalConfig:
    page_size: int = 64
    cp: int = 4
    device_tokens: int = 2_000_000       # device memory per rank, in tokens
    host_tokens: int = 32_000_000        # host budget per engine, in tokens (both setups)
    storage: StorageKind = StorageKind.NONE   # NONE: skip the storage comparison
    storage_on_shard: bool = True        # the storage comparison runs on the sharded setup
    write_policy: str = "write_through"
    prefetch_policy: str = "wait_complete"
    limit: int | None = None
    sync: bool = True
    cost_model: CostModel | None = None
    sweep: tuple[float, ...] = ()        # device-memory factors for the capacity curves

    def __post_init__(self) -> None:
        check_page_size(self.page_size)
        check_limit(self.limit)
        if not isinstance(self.cp, int) or self.cp < 2:
            raise ValueError(f"cp: the sharding comparison needs cp >= 2, got {self.cp!r}")
        if self.host_tokens < self.page_size:
            raise ValueError(f"host_tokens: the comparison needs a host tier, got {self.host_tokens}")
        object.__setattr__(self, "storage", StorageKind(self.storage))
        # every setup the evaluation will replay, built (so validated) now: a bad capacity
        # must fail before the first replay runs, not after two of them
        self.replay_config(shard=False)
        self.replay_config(shard=True, storage=self.storage)
        for f in self.sweep:
            if not 0 < f < float("inf"):      # (NaN fails both)
                raise ValueError(f"sweep: factors must be positive and finite, got {f!r}")
            if self.device_tokens * f > INT64_MAX:
                raise ValueError(f"sweep: factor {f!r} gives {self.device_tokens * f:.3g} device tokens "
                                 f"per rank, more than int64 holds")
        for dev in self.sweep_capacities():
            self.replay_config(shard=True, device_tokens=dev)

    def sweep_capacities(self) -> list[int]:
        """Device tokens per rank of each sweep point (whole pages, at least one)."""
        ps = self.page_size
        return [max(int(self.device_tokens * f) // ps * ps, ps) for f in self.sweep]

    def replay_config(self, *, shard: bool, storage: StorageKind = StorageKind.NONE,
                      device_tokens: int | None = None) -> ReplayConfig:
        return ReplayConfig(page_size=self.page_size, cp=self.cp, shard=shard,
                            device_tokens=self.device_tokens if device_tokens is None else device_tokens,
                            host_tokens=self.host_tokens, storage=storage,
                            write_policy=self.write_policy, prefetch_policy=self.prefetch_policy,
                            limit=self.limit, sync=self.sync)


def ceiling(source: str | LoadedTrace, page_size: int, limit: int | None = None) -> dict:
    """Infinite-cache token hits over whole pages, from the block ids alone: a page hits
    when the same page (same block-id prefix, same offset) was in an earlier request and
    so were all pages before it. Independent of the runtime."""
    per_block = BLOCK_TOKENS // page_size
    prefix_id: dict[tuple[int, int], int] = {}
    seen: set[tuple[int, int]] = set()
    hit = total = 0
    for r in iter_requests(source, limit):
        pid = 0
        pids = []
        for b in r.hash_ids:
            pid = prefix_id.setdefault((pid, b), len(prefix_id) + 1)
            pids.append(pid)
        n = r.input_length // page_size
        k = 0
        while k < n and (pids[k // per_block], k % per_block) in seen:
            k += 1
        seen.update((pids[p // per_block], p % per_block) for p in range(k, n))
        hit += k * page_size
        total += r.input_length
    return {"hit_tokens": hit, "input_tokens": total, "hit_rate": hit / total if total else 0.0}


def _summary(out: dict, seconds: float) -> dict:
    t = out["tiers"]
    return {
        "requests": out["requests"],
        "input_tokens": out["input_tokens"],
        "logical_device_tokens": out["cp"]["logical_device_tokens"],
        "device_hit_rate": t["device"]["hit_rate"],
        "device_host_hit_rate": t["device"]["hit_rate"] + t["host"]["hit_rate"],
        "hit_rate": out["hit_rate"],
        "device_tokens_served": t["device"]["hit_tokens"],
        "host_served_tokens": t["host"]["hit_tokens"],
        "storage_served_tokens": t["storage"]["hit_tokens"],
        "device_evicted_tokens": out["metrics"]["device_evicted_tokens"],
        "uncached_requests": out["uncached_requests"],
        "seconds": out["seconds"],
        "wall_seconds": seconds,
    }


def _run(trace: LoadedTrace, rc: ReplayConfig, cost: CostModel | None) -> dict:
    served = Served() if cost is not None else None
    stream = TraceStream(trace, rc.page_size, rc.limit)
    t0 = time.perf_counter()
    out = replay(trace.path, rc, served=served, stream=stream)
    s = _summary(out, time.perf_counter() - t0)
    if out.get("monitors") is not None:     # verified mode: what the monitors checked
        s["monitors"] = out["monitors"]
    if cost is not None:
        s["cost"] = cost.simulate(stream.timestamps, served, rc.cp, rc.sharded)
    return s


def _pair(a: float, b: float, names=("baseline", "sharded")) -> dict:
    return {names[0]: a, names[1]: b, "ratio": b / a if a else None}


def _points(a: float, b: float, names=("baseline", "sharded")) -> dict:
    out = _pair(a, b, names)
    out["delta_points"] = 100.0 * (b - a)
    return out


def evaluate(path: str, cfg: EvalConfig) -> dict:
    t0 = time.perf_counter()
    # parsed once, replayed by every pass: a pipe (/dev/stdin) cannot be read twice, and
    # re-reading a file that changed would compare different traces
    trace = LoadedTrace(path, cfg.limit)
    parse_seconds = time.perf_counter() - t0
    cost = cfg.cost_model
    base = _run(trace, cfg.replay_config(shard=False), cost)
    shard = _run(trace, cfg.replay_config(shard=True), cost)
    host = _pair(base["host_served_tokens"], shard["host_served_tokens"])
    host["reduction"] = (1.0 - host["ratio"]) if host["ratio"] is not None else None
    cmp = {
        "device_hit_rate": _points(base["device_hit_rate"], shard["device_hit_rate"]),
        "device_host_hit_rate": _points(base["device_host_hit_rate"], shard["device_host_hit_rate"]),
        "host_served_tokens": host,
        "input_tokens": _pair(base["input_tokens"], shard["input_tokens"]),
    }
    if cost is not None:
        for k in ("mean_prefill_s", "mean_queue_s"):
            cmp[k] = _pair(base["cost"][k], shard["cost"][k])
            cmp[k]["reduction"] = 1.0 - cmp[k]["ratio"] if cmp[k]["ratio"] is not None else None
    ceil = ceiling(trace, cfg.page_size)
    result = {
        "trace": path,
        "config": {"page_size": cfg.page_size, "cp": cfg.cp,
                   "device_tokens_per_rank": cfg.device_tokens,
                   "host_tokens_per_engine": cfg.host_tokens, "storage": cfg.storage.value,
                   "write_policy": cfg.write_policy, "prefetch_policy": cfg.prefetch_policy,
                   "limit": cfg.limit, "sync": cfg.sync},
        "setups": {"baseline": base, "sharded": shard},
        "comparisons": cmp,
        "ceiling": ceil,
        "storage": None,
    }
    if cfg.storage is not StorageKind.NONE:
        without = shard if cfg.storage_on_shard else base
        with_ = _run(trace, cfg.replay_config(shard=cfg.storage_on_shard, storage=cfg.storage), cost)
        gain = _points(without["hit_rate"], with_["hit_rate"], ("without", "with"))
        gain["ceiling"] = ceil["hit_rate"]
        gain["share_of_ceiling"] = with_["hit_rate"] / ceil["hit_rate"] if ceil["hit_rate"] else None
        result["storage"] = {"setup": "sharded" if cfg.storage_on_shard else "baseline",
                             "backend": cfg.storage.value, "with": with_}
        cmp["storage_hit_rate"] = gain
    if cost is not None:
        result["cost_model"] = cost.as_dict()
    if cfg.sweep:
        result["sweep"] = sweep(trace, cfg)
    result["parse_seconds"] = parse_seconds
    result["seconds"] = time.perf_counter() - t0
    return result


def sweep(source: str | LoadedTrace, cfg: EvalConfig) -> list[dict]:
    """Hit rate per tier against device memory per rank, for both setups (no storage)."""
    trace = source if isinstance(source, LoadedTrace) else LoadedTrace(source, cfg.limit)
    rows = []
    for dev in cfg.sweep_capacities():
        row = {"device_tokens_per_rank": dev}
        for name, shard in (("baseline", False), ("sharded", True)):
            s = _run(trace, cfg.replay_config(shard=shard, device_tokens=dev), None)
            row[name] = {k: s[k] for k in ("device_hit_rate", "device_host_hit_rate",
                                           "host_served_tokens", "seconds")}
        rows.append(row)
    return rows


def render(result: dict) -> str:
    """The comparison as a text table."""
    c = result["comparisons"]
    cfg = result["config"]
    b, s = result["setups"]["baseline"], result["setups"]["sharded"]
    lines = [
        f"{result['trace']}: {b['requests']} requests, {b['input_tokens']:,} input tokens; "
        f"CP{cfg['cp']}, {cfg['device_tokens_per_rank']:,} device tokens per rank, "
        f"{cfg['host_tokens_per_engine']:,} host tokens per engine, page {cfg['page_size']}",
        f"{'':28}{'baseline':>16}{'sharded':>16}{'change':>16}",
        f"{'device hit rate':28}{b['device_hit_rate']:>16.2%}{s['device_hit_rate']:>16.2%}"
        f"{c['device_hit_rate']['delta_points']:>+15.2f}pt",
        f"{'device+host hit rate':28}{b['device_host_hit_rate']:>16.2%}{s['device_host_hit_rate']:>16.2%}"
        f"{c['device_host_hit_rate']['delta_points']:>+15.2f}pt",
        f"{'host-served tokens':28}{b['host_served_tokens']:>16,}{s['host_served_tokens']:>16,}"
        + (f"{-c['host_served_tokens']['reduction']:>+16.1%}" if c['host_served_tokens']['reduction']
           is not None else f"{'n/a':>16}"),
    ]
    for k, label in (("mean_prefill_s", "est. mean prefill s"), ("mean_queue_s", "est. mean queue s")):
        if k in c:
            lines.append(f"{label:28}{c[k]['baseline']:>16.3f}{c[k]['sharded']:>16.3f}"
                         + (f"{-c[k]['reduction']:>+16.1%}" if c[k]['reduction'] is not None else ""))
    if "storage_hit_rate" in c:
        g = c["storage_hit_rate"]
        lines.append(f"storage tier ({result['storage']['backend']}, {result['storage']['setup']} setup): "
                     f"hit rate {g['without']:.2%} -> {g['with']:.2%} ({g['delta_points']:+.2f}pt); "
                     f"ceiling {g['ceiling']:.2%}")
    else:
        lines.append(f"infinite-cache ceiling: {result['ceiling']['hit_rate']:.2%}")
    uncached = {name: run["uncached_requests"] for name, run in
                (("baseline", b), ("sharded", s), ("with storage", (result["storage"] or {}).get("with")))
                if run and run.get("uncached_requests")}
    if uncached:   # their tokens were computed, not cached: the hit rates above undercount
        lines.append("requests served uncached (every device page locked): "
                     + ", ".join(f"{k} {v:,}" for k, v in uncached.items()))
    lines.append(f"replay seconds: baseline {b['seconds']:.2f}, sharded {s['seconds']:.2f}; "
                 f"total {result['seconds']:.2f}")
    return "\n".join(lines)
