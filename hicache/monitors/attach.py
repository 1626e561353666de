"""Which cache carries which monitor: the one registry `hicache.verified` and the runtime share.

Kept apart from `hicache.verified` because importing that module turns verified mode on
(it wraps `HiCache`); the runtime only needs to attach a monitor to itself when
HICACHE_VERIFY asks for one (HiCache.__init__), without that side effect.
"""
from __future__ import annotations

import weakref

from hicache.monitors.runtime import Mode, Monitor, VerifyConfig

_monitors: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def attach(cache, cfg: VerifyConfig) -> Monitor | None:
    """Attach a HostTier monitor (incremental map) and the background-worker watch
    (hicache.monitors.workers) to one cache; idempotent; no-op when the mode is off or the
    cache has no host tier (nothing of HostTier to check). Call before the cache serves."""
    if cfg.mode is Mode.OFF or cache.host is None:
        return None
    mon = _monitors.get(cache)
    if mon is None:
        mon = _monitors[cache] = monitor_cache(cache, cfg)
    return mon


def monitor_cache(cache, cfg: VerifyConfig) -> Monitor:
    """A HostTier monitor (strict: the incremental map; sample: the from-scratch one), and
    after it the background-worker watch
    (bug 14's properties: one key derivation, live workers), both subscribed to the cache's
    bus; not registered (the bug zoo and its tests give each run its own)."""
    from hicache.monitors.maps.host_tier import HostTierMap
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    from hicache.monitors.workers import watch
    # strict checks every event: the incremental map (its cost follows what an event
    # changed); sample mode checks a few: the from-scratch map, which costs nothing between
    # samples (the incremental one would journal every change to serve the next sample)
    rmap = IncrementalHostTierMap(cache) if cfg.mode is Mode.STRICT else HostTierMap(cache)
    mon = Monitor(rmap, cfg)
    cache.bus.subscribe(mon)
    watch(cache, mon)
    return mon


def monitor_of(cache) -> Monitor | None:
    return _monitors.get(cache)


def cache_check(cache) -> None:
    """Every invariant of the cache's monitor on its current state (a cache check)."""
    mon = _monitors.get(cache)
    if mon is not None:
        mon.cache_check()
