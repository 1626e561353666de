"""Frozen configuration of one distributed run, validated once."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hicache.protocol.prefix_agreement import StopPolicy, TimeoutBudget

from .model import ModelConfig


class Verify:
    """Verification levels (`--verify`): what the ranks check while they serve."""
    OFF = "off"          # protocol digests in pp_sync only
    SAMPLE = "sample"    # plus a world digest check every 4th cache check, logits of every 4th request
    STRICT = "strict"    # plus every cache check, every request, every gathered byte
    ALL = (OFF, SAMPLE, STRICT)


@dataclass(frozen=True, slots=True, kw_only=True)
class RunConfig:
    cp: int = 2
    pp: int = 1
    page_size: int = 4
    device_pages_per_rank: int = 8
    host_pages_per_rank: int = 16
    prefetch_batch_pages: int = 2
    policy: StopPolicy = StopPolicy.WAIT_COMPLETE
    budget: TimeoutBudget = field(default_factory=TimeoutBudget)
    model: ModelConfig = field(default_factory=ModelConfig)
    requests: int = 12
    max_batch: int = 2
    overlap: bool = True
    verify: str = Verify.STRICT
    seed: int = 0
    transfer_delay_s: float = 0.004      # max injected per-rank delay of a copy
    storage_fail_p: float = 0.05         # per storage call: failure (raise or None), per rank
    storage_delay_s: float = 0.004
    timeout_s: float = 20.0              # every collective and local wait is bounded by this
    storage_dir: str = ""
    layout: str = "layer_first"          # pool layout; must agree across ranks

    def __post_init__(self) -> None:
        for name in ("cp", "pp", "page_size", "device_pages_per_rank", "host_pages_per_rank",
                     "prefetch_batch_pages", "max_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.requests < 0:
            raise ValueError(f"requests must be >= 0, got {self.requests}")
        if self.model.layers % self.pp:
            raise ValueError(f"pp={self.pp} must divide model.layers={self.model.layers}")
        if self.verify not in Verify.ALL:
            raise ValueError(f"verify must be one of {Verify.ALL}, got {self.verify!r}")
        if not 0.0 <= self.storage_fail_p <= 1.0:
            raise ValueError(f"storage_fail_p must lie in [0, 1], got {self.storage_fail_p}")
        for name in ("transfer_delay_s", "storage_delay_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if not self.storage_dir:
            raise ValueError("storage_dir must name a directory shared by the ranks")

    @property
    def world(self) -> int:
        return self.cp * self.pp

    def fingerprint(self) -> dict[str, object]:
        """Fields every rank must agree on (checked at start-up)."""
        return {"cp": self.cp, "pp": self.pp, "page_size": self.page_size, "layout": self.layout,
                "device_pages_per_rank": self.device_pages_per_rank,
                "host_pages_per_rank": self.host_pages_per_rank,
                "prefetch_batch_pages": self.prefetch_batch_pages, "policy": str(self.policy),
                "model": asdict(self.model), "requests": self.requests, "seed": self.seed,
                "max_batch": self.max_batch}
