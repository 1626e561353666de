"""Which cache (or draft runtime) carries which monitor: the one registry `hicache.verified`
and the runtime share.

Kept apart from `hicache.verified` because importing that module turns verified mode on;
the runtime (`hicache.runtime.verify_hook`, which HiCache.__init__ and DependentSet.__init__
call) reads the choice made in code here, or HICACHE_VERIFY while none was, and attaches
through `attach` without that side effect.
"""
from __future__ import annotations

import collections
import contextlib
import contextvars
import sys
import threading
import weakref

from hicache.monitors.runtime import Mode, Monitor, VerifyConfig, checking_fields, link

# cache (or draft set) -> a weak reference to its monitor. Weak both ways: the monitor holds
# its cache (its map reads it), so a strong value would keep every monitored cache of the
# process alive for good, its tree, KV pools and the monitor's history of mapped states with
# it (a test suite or canary creating caches grew by ~100 MB a replay in sample mode). The
# cache holds its monitor instead: every monitor registered here is a listener on its
# object's bus (monitor_cache, monitor_draft, _cp_monitor on a sharded cache), so it lives
# exactly as long as the object, and the two are collected together.
_monitors: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _registered(obj) -> Monitor | None:
    ref = _monitors.get(obj)
    return None if ref is None else ref()


# the verified-mode configuration set in code (hicache.verified.enable/disable, the pytest
# option), or None while nothing set one: then HICACHE_VERIFY decides (verify_hook).
# Once code has chosen, the environment no longer attaches anything: `enable("sample")` or
# `--hicache-verify=off` under HICACHE_VERIFY=strict means sample, or off.
_chosen: list = [None]


def choose(cfg: VerifyConfig | None) -> None:
    _chosen[0] = cfg


def chosen() -> VerifyConfig | None:
    return _chosen[0]


# True while `verified_module()` imports hicache.verified for a caller that chooses the mode
# itself right after: the import then enables nothing from HICACHE_VERIFY
_importing_to_choose: list = [False]


def importing_to_choose() -> bool:
    return _importing_to_choose[0]


def verified_module():
    """hicache.verified, for a caller that calls its `enable`/`disable` at once (the replay's
    --verify, the pytest option): imported here, if not yet loaded, without the import's own
    `enable()` from HICACHE_VERIFY, so a bad value there (a variable the explicit choice does
    not use) does not fail the import and block the choice."""
    mod = sys.modules.get("hicache.verified")
    if mod is None:
        _importing_to_choose[0] = True
        try:
            import hicache.verified as mod
        finally:
            _importing_to_choose[0] = False
    return mod


# set inside `unmonitored()`: what is created there gets no monitor (per thread of control)
_unmonitored: contextvars.ContextVar[bool] = contextvars.ContextVar("hicache_unmonitored", default=False)


@contextlib.contextmanager
def unmonitored():
    """Caches and draft runtimes created inside the block get no monitor, whatever the mode:
    for a run that injects a fault on purpose to measure what it does (the bug-13 acceptance
    comparison), which verified mode would otherwise stop at the fault's first step. A
    context variable: what the block's own thread creates, not threads it starts nor
    distributed ranks (which take their verify configuration as an argument)."""
    token = _unmonitored.set(True)
    try:
        yield
    finally:
        _unmonitored.reset(token)


def attach(cache, cfg: VerifyConfig) -> Monitor | None:
    """Attach a HostTier monitor (incremental map) and the background-worker watch
    (hicache.monitors.workers) to one cache, and on the CP replay's sharded cache its
    CPSharding monitor; to a draft runtime (`hicache.runtime.draft.DependentSet`) its
    DraftState monitor. Idempotent; no-op when the mode is off or there is nothing to check
    (no host tier: nothing of HostTier; a sharded cache still has its page placement). Call
    before the cache (the set) serves."""
    if cfg.mode is Mode.OFF or _unmonitored.get():
        return None
    mon = _registered(cache)
    if mon is None:
        if _draft(cache):
            mon = monitor_draft(cache, cfg)
        elif cache.host is not None:
            mon = monitor_cache(cache, cfg)
        elif _sharded(cache):
            # (a --cp replay without a host tier attached nothing and reported "no violation")
            mon = _cp_monitor(cache, cfg)
        else:
            return None
        # (held by the cache's bus, which the registry's weak reference relies on: itself, a
        # bound method of it, or its gate, which holds it)
        assert any(getattr(x, "__self__", x) is mon or x is mon.listener for x in cache.bus.listeners), \
            "a registered monitor listens on its object's bus"
        _monitors[cache] = weakref.ref(mon)
        deps = getattr(cache, "deps", None)
        mine = _registered(deps) if deps is not None else None
        if mine is not None:
            link(mon, mine)      # a draft set's copies are steps of its cache's transfers
    return mon


def _draft(obj) -> bool:
    # (a DependentSet's module is loaded when one exists: no import, which would load torch)
    draft = sys.modules.get("hicache.runtime.draft")
    return draft is not None and isinstance(obj, draft.DependentSet)


def monitor_draft(deps, cfg: VerifyConfig) -> Monitor:
    """A DraftState monitor on a draft runtime's bus (hicache.monitors.maps.draft_state; any
    pool configuration: a draft role it lacks maps to a pool of no bytes). Strict: each
    event's action and every invariant. Sample: the invariants on a seeded fraction of the
    events and at each cache check; without action checks an unsampled event maps nothing
    (an action check would map the state before every sampled event too)."""
    from hicache.monitors.maps.draft_state import DraftStateMap
    mon = Monitor(DraftStateMap(deps, actions=cfg.mode is Mode.STRICT), cfg)
    deps.bus.subscribe(mon)
    return mon


def _sharded(cache) -> bool:
    from hicache.replay.cp import ShardedCache
    return isinstance(cache, ShardedCache)


def _cp_monitor(cache, cfg: VerifyConfig) -> Monitor:
    """The device pages against CPSharding, on the cache's bus: the CP replay's sharded
    placement (maps/cp_replay.py), or one engine's pool as CP = 1 (maps/device_pages.py:
    no page in two nodes, none freed while held, none lost). Strict: the incremental map,
    whose checks follow the chains an event changed; sample mode: the from-scratch one,
    which costs nothing between samples."""
    sharded = _sharded(cache)
    if sharded:
        from hicache.monitors.maps.cp_replay import CPReplayMap as scratch
        from hicache.monitors.maps.cp_replay_inc import IncrementalCPReplayMap as kept
    else:
        from hicache.monitors.maps.device_pages import DevicePagesMap as scratch
        from hicache.monitors.maps.device_pages import IncrementalDevicePagesMap as kept
    strict = cfg.mode is Mode.STRICT
    cp = Monitor((kept if strict else scratch)(cache), cfg)
    if strict or sharded:
        cp.detach = cache.bus.subscribe(cp.listener)     # (as monitor_cache's, see there)
    # (sample mode on one engine's pool: no events of its own; its invariants on the state
    # of each HostTier sampled step (monitor_cache) and at each cache check)
    return cp


def monitor_cache(cache, cfg: VerifyConfig) -> Monitor:
    """A HostTier monitor (strict: the incremental map; sample: the from-scratch one), after
    it the background-worker watch (bug 14's properties: one key derivation, live workers)
    and, on the CP replay's sharded cache, a CPSharding monitor of its page placement
    (hicache.monitors.maps.cp_replay), all on the cache's bus; not registered (the bug zoo
    and its tests give each run its own)."""
    from hicache.monitors.maps.host_tier import HostTierMap, Requests
    from hicache.monitors.maps.host_tier_inc import IncrementalHostTierMap
    from hicache.monitors.workers import watch
    # strict checks every event: the incremental map (its cost follows what an event
    # changed); sample mode checks a few: the from-scratch map, which costs nothing between
    # samples (the incremental one would journal every change to serve the next sample),
    # reading the requests off the runtime's table when it maps a state, so an event
    # between samples is only counted and recorded (following the requests through every
    # event was most of what one cost)
    rmap = IncrementalHostTierMap(cache) if cfg.mode is Mode.STRICT else HostTierMap(cache, Requests.RUNTIME)
    mon = Monitor(rmap, cfg)
    # (a bound method, not the monitor: called through vectorcall, where an instance is
    # called through its type's `__call__` slot, with an argument tuple built and the method
    # looked up on the type at every event, ~1k instructions an event more; in strict mode
    # the step itself, `Monitor.listener`, one frame an event)
    cache.bus.subscribe(mon.listener)
    watch(cache, mon)
    # the device pages against CPSharding too (the CP replay's sharded placement, or one
    # engine's pool as CP = 1), checked after the HostTier monitor at each event and at
    # each of its cache checks
    cp = _cp_monitor(cache, cfg)
    if cfg.mode is Mode.SAMPLE and not _sharded(cache):
        # checked with HostTier's sampled steps, on the same budget (the from-scratch map
        # costs nothing between them)
        mon.step_hooks.append(lambda name, fields: cp.check_sampled(name, fields, mon.steps))
        cp.sampled_by = mon
        # (numbered as HostTier's step, as its sampled checks are)
        mon.cache_check_hooks.append(lambda: cp.cache_check(mon.steps))
    else:
        mon.cache_check_hooks.append(cp.cache_check)
    mon.companions.append(cp)
    link(mon, cp)
    return mon


def monitor_of(cache) -> Monitor | None:
    return _registered(cache)


def monitor_report(cache) -> list[dict] | None:
    """What the monitors attached to `cache` checked: per monitor its spec, what of the
    runtime it maps (`what`), events seen, steps checked (`triggered`: of them, those its
    map's trigger asked for), drawn samples let go and cache checks run (None: none
    attached); in sample mode under a budget, also the seconds spent checking (`checking_s`:
    sampled steps and cache checks, a companion's inside its leader's) and the seconds since
    attaching (`alive_s`), on the leader alone."""
    mon = _registered(cache)
    if mon is None:
        return None
    return [{"spec": m.spec.SPEC, "what": getattr(m.rmap, "what", None), "events": m.steps, "checked": m.checked,
             "cache_checks": m.cache_checks, "budget_skipped": m.let_go(), "triggered": m.triggered,
             **checking_fields(m.checking())}
            for m in (mon, *mon.companions)]


def describe(m: dict) -> str:
    """One monitor of `monitor_report` in words: its spec, what it maps, what it checked."""
    what = f" ({m['what']})" if m.get("what") else ""
    if not m["events"]:
        # (a companion with no events of its own: checked at its leader's sampled steps)
        n, k = m["cache_checks"], m["checked"]
        at = f"{k} sampled step{'s' if k != 1 else ''} and " if k > 0 else ""
        return f"{m['spec']}{what}: at {at}{n} cache check{'s' if n != 1 else ''}"
    let_go = m.get("budget_skipped")
    budget = f" ({let_go} drawn sample{'s' if let_go != 1 else ''} let go by the budget)" if let_go else ""
    held = m.get("triggered")
    # (events its map's trigger asked to check, outside the draw: evictions of a held node)
    held = f", {held} of them at the map's trigger" if held else ""
    return f"{m['spec']}{what}: {m['checked']} of {m['events']} events checked{held}{budget}{_spent(m)}"


def _spent(m: dict) -> str:
    """A budgeted monitor's checking time beside its lifetime, in words ("" without them)."""
    spent, alive = m.get("checking_s"), m.get("alive_s")
    if spent is None or alive is None:
        return ""
    share = f" ({100 * spent / alive:.1f} %)" if alive > 0 else ""
    return f"; checking took {_ms(spent)} of its {_ms(alive)}{share}"


def _ms(seconds: float) -> str:
    """A duration for a report: ms below a second, else s."""
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def cache_check(cache) -> None:
    """Every invariant of the cache's monitor on its current state (a cache check)."""
    mon = _registered(cache)
    if mon is not None:
        mon.cache_check()


# what the monitors of the runtimes closed so far checked, summed per verify mode (the pytest
# plugin's summary line: what a suite's verified mode really checked): mode -> counts. Added
# at each runtime's final check, once (`final_check`), under a lock (runtimes may be closed
# from more than one thread)
_closed: dict[str, collections.Counter] = {}
_closed_lock = threading.Lock()

#: the counts kept per mode: the runtimes closed, then their leading monitor's
#: `monitor_report` counts, summed
TALLIED = ("runtimes", "events", "checked", "cache_checks", "budget_skipped", "checking_s")


def final_check(obj) -> None:
    """A cache's or a draft set's final cache check at its close, then its monitors' counts
    added to the closed runtimes' (`closed_counts`), whether or not the check found a
    violation (the violation is raised after). The runtimes call it once (their close is
    idempotent)."""
    mon = _registered(obj)
    if mon is None:
        return
    try:
        mon.cache_check()
    finally:
        # (the leader's counts: its companions see the same events, are checked at its
        # sampled steps and cache checks, and their budget is its own)
        leader = (monitor_report(obj) or [{}])[0]
        with _closed_lock:
            c = _closed.setdefault(str(mon.cfg.mode), collections.Counter())
            c["runtimes"] += 1
            for k in TALLIED[1:]:
                c[k] += leader.get(k) or 0


def closed_counts() -> dict[str, dict]:
    """What the monitors of the runtimes closed so far checked, per verify mode: the number
    of runtimes (caches, draft sets) and, summed over them, their leading monitor's events,
    steps checked, cache checks, drawn samples let go and seconds spent checking (sample mode
    under a budget). A copy; the runtimes still open, and those dropped without a close, are
    not in it."""
    with _closed_lock:
        return {mode: {k: c[k] for k in TALLIED} for mode, c in _closed.items()}


def open_count() -> int:
    """Runtimes that carry a monitor and are not closed yet (alive now)."""
    return sum(1 for obj in list(_monitors.keys()) if not getattr(obj, "_closed", False))


def summary_line(mode: str, counts: dict | None, still_open: int) -> str:
    """`closed_counts()[mode]` in words (the pytest plugin's terminal summary; None: no
    monitored runtime of that mode was closed), with the monitored runtimes still open."""
    opened = f"; {_count(still_open, 'monitored runtime')} still open" if still_open else ""
    if counts is None:
        return f"hicache verified mode {mode}: no monitored cache or draft set was closed{opened}"
    n = counts["runtimes"]
    line = (f"hicache verified mode {mode}: {_count(n, 'monitored cache')} or draft set{'s' if n != 1 else ''} "
            f"closed; their monitors saw {_count(counts['events'], 'event')}, checked "
            f"{_count(counts['checked'], 'step')} and ran {_count(counts['cache_checks'], 'cache check')}")
    if counts["budget_skipped"]:
        line += f" ({_count(counts['budget_skipped'], 'drawn sample')} let go by the budget)"
    if counts["checking_s"]:
        line += f"; checking under the budget took {_ms(counts['checking_s'])}"
    return line + opened


def _count(n: int, noun: str) -> str:
    """n and its noun, plural but for one ("1 event", "1,234 events")."""
    return f"{n:,} {noun}{'s' if n != 1 else ''}"
