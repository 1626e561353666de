"""Cache metrics: plain counters, exported to Prometheus when prometheus_client exists.

Counters are only ever incremented by the scheduler thread, except the `*_failures`
and storage byte counters, which transfer threads bump under `lock`.
"""
from __future__ import annotations

import dataclasses
import threading


@dataclasses.dataclass(slots=True)
class Metrics:
    requests: int = 0
    input_tokens: int = 0
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0
    storage_hit_tokens: int = 0
    load_tokens: int = 0          # host -> device
    load_bytes: int = 0
    load_seconds: float = 0.0
    load_failures: int = 0        # load-backs whose copy raised (their nodes' device copies dropped)
    load_failed_pages_kept: int = 0  # pages of such a node kept: inserted below before the drop
    backup_tokens: int = 0        # device -> host
    backup_bytes: int = 0
    backup_seconds: float = 0.0
    backup_skipped_tokens: int = 0  # no host room
    backup_failures: int = 0        # device -> host copies that raised (the node kept its device copy)
    backup_dropped: int = 0         # write-through copies that ended below a node whose own copy failed (released)
    storage_backup_tokens: int = 0
    storage_backup_bytes: int = 0
    storage_backup_failures: int = 0
    storage_backup_skipped_tokens: int = 0  # backlog over its host share
    device_evicted_tokens: int = 0
    host_evicted_tokens: int = 0
    prefetch_requests: int = 0
    prefetch_hit_tokens: int = 0          # pages fetched into host and inserted
    prefetch_unfulfilled_tokens: int = 0  # announced by exists but not delivered in time
    prefetch_rate_limited: int = 0        # prefetches declined for host occupancy
    prefetch_unbacked_anchor: int = 0     # declined: write-through anchor with no host copy yet
    storage_failures: int = 0             # backend raised / returned None / bad size
    close_abandoned: int = 0              # storage workers close() left behind (a backend that never answered)
    host_occupancy: float = 0.0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False,
                                             compare=False)

    @property
    def hit_tokens(self) -> int:
        return self.device_hit_tokens + self.host_hit_tokens + self.storage_hit_tokens

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.input_tokens if self.input_tokens else 0.0

    def as_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "lock"}
        out["hit_rate"] = self.hit_rate
        return out


def export_prometheus(metrics: Metrics, registry=None, prefix: str = "hicache"):
    """Publish the counters as Prometheus gauges; returns the registry.

    Raises ModuleNotFoundError when prometheus_client is not installed (it is optional).
    """
    import prometheus_client as pc

    registry = registry or pc.CollectorRegistry()
    for name, value in metrics.as_dict().items():
        g = pc.Gauge(f"{prefix}_{name}", name.replace("_", " "), registry=registry)
        g.set(float(value))
    return registry
