"""Which cache carries which monitor: the one registry `hicache.verified` and the runtime share.

Kept apart from `hicache.verified` because importing that module turns verified mode on
(it wraps `HiCache`); the runtime only needs to attach a monitor to itself when
HICACHE_VERIFY asks for one (HiCache.__init__), without that side effect.
"""
from __future__ import annotations

import weakref

from hicache.monitors.runtime import Mode, Monitor, VerifyConfig

_monitors: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

# the verified-mode configuration set in code (hicache.verified.enable/disable, the pytest
# option), or None while nothing set one: then HICACHE_VERIFY decides (HiCache.__init__).
# Once code has chosen, the environment no longer attaches anything: `enable("sample")` or
# `--hicache-verify=off` under HICACHE_VERIFY=strict means sample, or off.
_chosen: list = [None]


def choose(cfg: VerifyConfig | None) -> None:
    _chosen[0] = cfg


def chosen() -> VerifyConfig | None:
    return _chosen[0]


def attach(cache, cfg: VerifyConfig) -> Monitor | None:
    """Attach a HostTier monitor (incremental map) and the background-worker watch
    (hicache.monitors.workers) to one cache, and on the CP replay's sharded cache its
    CPSharding monitor; idempotent; no-op when the mode is off or there is nothing to check
    (no host tier: nothing of HostTier; a sharded cache still has its page placement). Call
    before the cache serves."""
    if cfg.mode is Mode.OFF:
        return None
    mon = _monitors.get(cache)
    if mon is None:
        if cache.host is not None:
            mon = monitor_cache(cache, cfg)
        elif _sharded(cache):
            # (a --cp replay without a host tier attached nothing and reported "no violation")
            mon = _cp_monitor(cache, cfg)
        else:
            return None
        _monitors[cache] = mon
    return mon


def _sharded(cache) -> bool:
    from hicache.replay.cp import ShardedCache
    return isinstance(cache, ShardedCache)


def _cp_monitor(cache, cfg: VerifyConfig) -> Monitor:
    """The CP replay's page placement against CPSharding, on the cache's bus."""
    from hicache.monitors.maps.cp_replay import CPReplayMap
    cp = Monitor(CPReplayMap(cache), cfg)
    cache.bus.subscribe(cp)
    return cp


def monitor_cache(cache, cfg: VerifyConfig) -> Monitor:
    """A HostTier monitor (strict: the incremental map; sample: the from-scratch one), after
    it the background-worker watch (bug 14's properties: one key derivation, live workers)
    and, on the CP replay's sharded cache, a CPSharding monitor of its page placement
    (hicache.monitors.maps.cp_replay), all on the cache's bus; not registered (the bug zoo
    and its tests give each run its own)."""
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
    if _sharded(cache):
        # the CP replay's sharded cache: its page placement against CPSharding too, checked
        # after the HostTier monitor at each event and at each of its cache checks
        cp = _cp_monitor(cache, cfg)
        mon.cache_check_hooks.append(cp.cache_check)
        mon.companions.append(cp)
    return mon


def monitor_of(cache) -> Monitor | None:
    return _monitors.get(cache)


def monitor_report(cache) -> list[dict] | None:
    """What the monitors attached to `cache` checked: per monitor its spec, events seen and
    steps checked (None: none attached)."""
    mon = _monitors.get(cache)
    if mon is None:
        return None
    return [{"spec": m.spec.SPEC, "events": m.steps, "checked": m.checked} for m in (mon, *mon.companions)]


def cache_check(cache) -> None:
    """Every invariant of the cache's monitor on its current state (a cache check)."""
    mon = _monitors.get(cache)
    if mon is not None:
        mon.cache_check()
