"""Frozen, validated configuration of one engine's cache (pure: no torch import).

Every field is checked once at construction; a bad value raises ValueError naming the
field. Policies are enums; string spellings are accepted and converted here only.
"""
from __future__ import annotations

import dataclasses
import enum


class WritePolicy(enum.StrEnum):
    WRITE_THROUGH = "write_through"                      # back up to host on the first hit
    WRITE_THROUGH_SELECTIVE = "write_through_selective"  # ... on the second hit
    WRITE_BACK = "write_back"                            # back up only when evicting from device


class PrefetchPolicy(enum.StrEnum):
    BEST_EFFORT = "best_effort"        # take what has arrived, terminate at once
    WAIT_COMPLETE = "wait_complete"    # never stop early
    TIMEOUT = "timeout"                # wait up to base + pages*(ps/1024)*per_ki_token seconds


class HostLayout(enum.StrEnum):
    LAYER_FIRST = "layer_first"              # (2, L, slots, H, D)
    PAGE_FIRST = "page_first"                # (2, slots, L, H, D)
    PAGE_FIRST_DIRECT = "page_first_direct"  # (2, pages, L, ps, H, D)


class KVKind(enum.StrEnum):
    MHA = "mha"   # separate K and V: kv = 2
    MLA = "mla"   # one latent per token: kv = 1


#: dtype names the pools accept (fp8 is stored and moved as bytes).
DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "uint8", "int8")


def _enum(cls: type[enum.StrEnum], field: str, value: object) -> enum.StrEnum:
    try:
        return cls(value)
    except ValueError:
        raise ValueError(f"{field}: unknown value {value!r}; expected one of "
                         f"{[m.value for m in cls]}") from None


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class CacheConfig:
    page_size: int = 64
    device_pages: int = 64
    host_pages: int = 0                 # 0: no host tier
    layers: int = 2
    heads: int = 2                      # KV heads (1 for MLA)
    head_dim: int = 8                   # per-head dim (MLA: latent + rope dim)
    kv_kind: KVKind = KVKind.MHA
    dtype: str = "float16"
    host_layout: HostLayout = HostLayout.LAYER_FIRST
    write_policy: WritePolicy = WritePolicy.WRITE_THROUGH
    prefetch_policy: PrefetchPolicy = PrefetchPolicy.BEST_EFFORT
    prefetch_timeout_base_s: float = 1.0
    prefetch_timeout_per_ki_token_s: float = 0.25
    prefetch_min_pages: int = 1         # shorter storage hits are not worth a prefetch
    prefetch_host_fraction: float = 0.8  # in-flight prefetches hold at most this share of host
    storage_backup_host_fraction: float = 0.25  # storage backups in flight hold at most
                                                # this share of host (the rest stays evictable)
    storage_batch_pages: int = 64       # pages per batch_exists / batch_get call
    metadata_only: bool = False         # skip KV bytes (replay at trace scale)
    model: str = "hicache-test"
    salt: str = ""

    def __post_init__(self) -> None:
        for name in ("page_size", "device_pages", "layers", "heads", "head_dim",
                     "storage_batch_pages", "prefetch_min_pages"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{name}: must be a positive int, got {v!r}")
        if not isinstance(self.host_pages, int) or self.host_pages < 0:
            raise ValueError(f"host_pages: must be a non-negative int, got {self.host_pages!r}")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  (frozen)
        set_("kv_kind", _enum(KVKind, "kv_kind", self.kv_kind))
        set_("host_layout", _enum(HostLayout, "host_layout", self.host_layout))
        set_("write_policy", _enum(WritePolicy, "write_policy", self.write_policy))
        set_("prefetch_policy", _enum(PrefetchPolicy, "prefetch_policy", self.prefetch_policy))
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype: unknown dtype {self.dtype!r}; expected one of {DTYPES}")
        if self.kv_kind is KVKind.MLA and self.heads != 1:
            raise ValueError(f"heads: MLA stores one latent head, got {self.heads}")
        if self.write_policy is WritePolicy.WRITE_BACK and self.host_pages < self.device_pages:
            raise ValueError(f"host_pages: write_back needs host_pages >= device_pages "
                             f"({self.host_pages} < {self.device_pages})")
        if not 0.0 < self.storage_backup_host_fraction <= 1.0:
            raise ValueError(f"storage_backup_host_fraction: must be in (0, 1], "
                             f"got {self.storage_backup_host_fraction}")
        if not 0.0 < self.prefetch_host_fraction <= 1.0:
            raise ValueError(f"prefetch_host_fraction: must be in (0, 1], got {self.prefetch_host_fraction}")
        if self.prefetch_timeout_base_s < 0 or self.prefetch_timeout_per_ki_token_s < 0:
            raise ValueError("prefetch_timeout_base_s/prefetch_timeout_per_ki_token_s: must be >= 0")

    @property
    def kv(self) -> int:
        """Number of KV planes: 2 (K, V) for MHA, 1 latent for MLA."""
        return 2 if self.kv_kind is KVKind.MHA else 1

    def page_format(self) -> str:
        """What a stored page's bytes are, beyond its tokens (part of the key namespace): the
        KV kind, dtype, geometry and the host layout the page is copied from (a stored page
        is a host row's bytes in its element order)."""
        return (f"{self.kv_kind.value}/{self.dtype}/layers={self.layers}/heads={self.heads}/"
                f"head_dim={self.head_dim}/{self.host_layout.value}"
                # a metadata-only cache stores a one-byte marker per page, never KV bytes: its
                # keys name no real page (in a store shared with a real engine the marker sat
                # under the real page's key, whose write was then skipped as already there)
                + ("/metadata-only-marker" if self.metadata_only else ""))

    def prefetch_timeout(self, pages: int) -> float:
        """REFERENCE.md: base + pages * (ps / 1024) * per_ki_token seconds."""
        return (self.prefetch_timeout_base_s
                + pages * (self.page_size / 1024) * self.prefetch_timeout_per_ki_token_s)
