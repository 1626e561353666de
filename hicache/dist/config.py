"""Frozen configuration of one distributed run, validated once."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hicache.protocol.prefix_agreement import StopPolicy, TimeoutBudget
from hicache.runtime.config import HostLayout
from hicache.storage.faulty import MAX_DELAY_S
from hicache.validate import int_at_least, integer, number_in

from .model import ModelConfig


class Verify:
    """Verification levels (`--verify`): what the ranks check while they serve."""
    OFF = "off"          # protocol digests in pp_sync only
    SAMPLE = "sample"    # plus a world digest check every 4th cache check, logits of every 4th request
    STRICT = "strict"    # plus every cache check, every request, every gathered byte
    ALL = (OFF, SAMPLE, STRICT)


#: pool layouts the ranks can agree on (`layout`)
LAYOUTS = tuple(x.value for x in HostLayout)


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
            int_at_least(name, getattr(self, name), 1)
        int_at_least("requests", self.requests, 0)
        integer("seed", self.seed)
        try:
            object.__setattr__(self, "policy", StopPolicy(self.policy))
        except ValueError:
            raise ValueError(f"policy: {self.policy!r} is not one of {', '.join(p.value for p in StopPolicy)}") from None
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout: {self.layout!r} is not one of {', '.join(LAYOUTS)}")
        if self.model.layers % self.pp:
            raise ValueError(f"pp={self.pp} must divide model.layers={self.model.layers}")
        if self.verify not in Verify.ALL:
            raise ValueError(f"verify must be one of {Verify.ALL}, got {self.verify!r}")
        number_in("storage_fail_p", self.storage_fail_p, 0.0, 1.0)
        number_in("transfer_delay_s", self.transfer_delay_s, 0.0)
        # (the injected storage delay is FaultConfig's, bounded there: named here as ours)
        number_in("storage_delay_s", self.storage_delay_s, 0.0, MAX_DELAY_S)
        number_in("timeout_s", self.timeout_s, 0.0, lo_open=True)
        if not self.storage_dir:
            raise ValueError("storage_dir must name a directory shared by the ranks")

    @property
    def storage_timeout_s(self) -> float:
        """The bound of one storage call (a call past it is a miss / a failed write).
        Between two collectives a rank makes at most two storage calls (a cache check's
        write-through, an admission's exists) and a peer's prefetch sync waits for one read
        per batch: a quarter of the collective timeout each keeps a slow but healthy backend
        from reading as a dead peer."""
        return self.timeout_s / 4

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
                "max_batch": self.max_batch,
                # decides whether a cache check runs a world all-gather (verify_digest): ranks
                # that differ here would pass start-up and then wait in different collectives
                "verify": self.verify}
