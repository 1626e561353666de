"""Verified mode: every cache and draft runtime created while it is on carries a runtime monitor.

    import hicache.verified            # mode from HICACHE_VERIFY (unset or empty: strict)
    hicache.verified.enable("sample")  # or explicitly
    pytest --hicache-verify=strict     # the pytest plugin (hicache.pytest_plugin)

off      nothing is attached: the runtime runs exactly its own code
sample   a seeded fraction of events is checked (HICACHE_VERIFY_RATE, HICACHE_VERIFY_SEED)
         while the monitor's checking time stays within HICACHE_VERIFY_BUDGET of the time
         that passed (default 0.01; `none`: every drawn sample; a quiet spell's credit kept
         for HICACHE_VERIFY_BUDGET_WINDOW seconds, default 1), plus every invariant at each
         cache check: `cache_check(cache)`, which a scheduler calls at its check points,
         and `close()`
strict   every event: the action and every invariant

A violation raises `hicache.monitors.runtime.ProtocolViolation` on the thread that emitted
the event (one a transfer thread emitted is raised again on the scheduler's thread when that
transfer's completion is applied) and writes the recent history as an ITF trace under HICACHE_VIOLATION_DIR
(default ./hicache-violations/), which `hicache explain` reads.

What carries a monitor: a `HiCache` with a host tier (HostTier, the background-worker
watch, and its device pages against CPSharding at CP = 1: strict at every event, sample at
its sampled steps and cache checks), the CP replay's sharded cache (CPSharding), and a speculative-decoding draft runtime,
`hicache.runtime.draft.DependentSet` (DraftState, whichever draft roles it configures).

A cache or set attaches its monitor when it is built (its `__init__` asks
`hicache.runtime.verify_hook`, last) and runs the final cache check at its first `close`;
enabling and disabling only choose the configuration that hook reads, never patching the
runtime's classes. Without this import, a cache or set created while HICACHE_VERIFY is
sample or strict attaches its own monitor (the hook reads the variable once per object);
once `enable`/`disable` (or the pytest option) has chosen, that choice wins over the variable.
"""
from __future__ import annotations

import os

from hicache.monitors import attach as _registry
from hicache.monitors.runtime import Mode, Monitor, ProtocolViolation, VerifyConfig

__all__ = ["Mode", "ProtocolViolation", "VerifyConfig", "attach", "cache_check", "disable", "enable", "enabled",
           "current", "monitor_of", "unmonitored"]

# on: whether code enabled a mode (not off) with `enable`
_state: dict = {"cfg": VerifyConfig(), "on": False}


def current() -> VerifyConfig:
    return _state["cfg"]


def attach(cache, cfg: VerifyConfig | None = None) -> Monitor | None:
    """Attach its monitor to one cache (HostTier) or draft runtime (DraftState); no-op when
    the mode is off; idempotent."""
    return _registry.attach(cache, cfg or current())


monitor_of = _registry.monitor_of
unmonitored = _registry.unmonitored
cache_check = _registry.cache_check


def enable(mode: str | Mode | None = None, **overrides) -> VerifyConfig:
    """Turn verified mode on for caches created from now on (mode None: HICACHE_VERIFY's,
    strict when it is unset, empty or blank). The mode and the fields given win over their
    variables, which are then not read: a bad HICACHE_VERIFY blocks only the call that uses it."""
    if mode is None and not os.environ.get("HICACHE_VERIFY", "").strip():
        mode = Mode.STRICT                 # (empty is unset: from_env would read it as off)
    given = dict(overrides)
    if mode is not None:
        given["mode"] = mode               # (VerifyConfig checks it, naming the field)
    cfg = VerifyConfig.from_env(**given)
    _state["cfg"] = cfg
    _state["on"] = cfg.mode is not Mode.OFF
    _registry.choose(cfg)
    return cfg


def enabled() -> bool:
    """Whether code enabled a mode (sample or strict) with `enable` and has not disabled it
    since (HICACHE_VERIFY alone, which `enable` was not called for, is not counted)."""
    return _state["on"]


def disable() -> None:
    """Back to off: new caches and draft runtimes get no monitor (whatever HICACHE_VERIFY
    says); monitors already attached keep checking their own objects (a cache built before
    still runs its final check at its close)."""
    _state["cfg"] = VerifyConfig()
    _state["on"] = False
    _registry.choose(_state["cfg"])


# `import hicache.verified` turns verification on (HICACHE_VERIFY=off keeps it off), unless
# the importer chooses the mode itself at once (`attach.verified_module`: the replay's
# --verify, the pytest option), whose choice a bad HICACHE_VERIFY must not block
if not _registry.importing_to_choose():
    enable()
