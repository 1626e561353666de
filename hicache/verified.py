"""Verified mode: every cache created while it is on carries a runtime monitor.

    import hicache.verified            # mode from HICACHE_VERIFY (default: strict)
    hicache.verified.enable("sample")  # or explicitly
    pytest --hicache-verify=strict     # the pytest plugin (hicache.pytest_plugin)

off      nothing is attached or wrapped: the runtime runs exactly its own code
sample   a seeded fraction of events is checked (HICACHE_VERIFY_RATE, HICACHE_VERIFY_SEED),
         plus every invariant at each cache check: `cache_check(cache)`, which a scheduler
         calls at its check points, and `close()`
strict   every event: the action and every invariant

A violation raises `hicache.monitors.runtime.ProtocolViolation` on the thread that emitted
the event and writes the recent history as an ITF trace under HICACHE_VIOLATION_DIR
(default ./hicache-violations/), which `hicache explain` reads.

Enabling wraps `HiCache.__init__` (attach a monitor) and `HiCache.close` (a final cache
check); disabling restores both. Without this import, a cache created while HICACHE_VERIFY
is sample or strict attaches its own monitor (HiCache.__init__ reads the variable once);
once `enable`/`disable` (or the pytest option) has chosen, that choice wins over the
variable.
"""
from __future__ import annotations

import os

from hicache.monitors import attach as _registry
from hicache.monitors.runtime import Mode, Monitor, ProtocolViolation, VerifyConfig

__all__ = ["Mode", "ProtocolViolation", "VerifyConfig", "attach", "cache_check", "disable", "enable",
           "current", "monitor_of"]

_state: dict = {"cfg": VerifyConfig(), "orig": None}


def current() -> VerifyConfig:
    return _state["cfg"]


def attach(cache, cfg: VerifyConfig | None = None) -> Monitor | None:
    """Attach a HostTier monitor to one cache (no-op when the mode is off; idempotent)."""
    return _registry.attach(cache, cfg or current())


monitor_of = _registry.monitor_of
cache_check = _registry.cache_check


def enable(mode: str | Mode | None = None, **overrides) -> VerifyConfig:
    """Turn verified mode on for caches created from now on (mode None: from the env)."""
    cfg = VerifyConfig.from_env()
    if mode is None and os.environ.get("HICACHE_VERIFY") is None:
        mode = Mode.STRICT
    if mode is not None or overrides:
        fields = {f: getattr(cfg, f) for f in ("mode", "sample_rate", "seed", "history", "violation_dir")}
        if mode is not None:
            fields["mode"] = mode          # (VerifyConfig checks it, naming the field)
        fields.update(overrides)
        cfg = VerifyConfig(**fields)
    disable()
    _state["cfg"] = cfg
    _registry.choose(cfg)
    if cfg.mode is Mode.OFF:
        return cfg
    from hicache.runtime.cache import HiCache
    init, close = HiCache.__init__, HiCache.close

    def __init__(self, *a, **kw):
        init(self, *a, **kw)
        attach(self)

    def close_and_check(self):
        close(self)
        cache_check(self)

    HiCache.__init__ = __init__
    HiCache.close = close_and_check
    _state["orig"] = (init, close)
    return cfg


def disable() -> None:
    """Back to off: new caches get no monitor; the runtime's own methods are restored."""
    orig = _state["orig"]
    if orig is not None:
        from hicache.runtime.cache import HiCache
        HiCache.__init__, HiCache.close = orig
        _state["orig"] = None
    _state["cfg"] = VerifyConfig()
    _registry.choose(_state["cfg"])     # off, whatever HICACHE_VERIFY says


# `import hicache.verified` turns verification on (HICACHE_VERIFY=off keeps it off)
enable()
