"""Verified mode's one hook in the runtime: whether a cache or draft set being built gets
its monitor (`HiCache.__init__` and `DependentSet.__init__` call it last; their `close`
runs the final cache check when it attached one).

The choice made in code (`hicache.verified.enable`/`disable`, the pytest option, a replay's
--verify: the registry's `chosen()`) wins; while none was made, HICACHE_VERIFY decides.
Off costs one dictionary lookup and, with no choice made, one environment read per object.

The runtime's classes are never patched to attach monitors. Rewriting a class attribute
(as wrapping `HiCache.__init__` and `close` at each enable and disable did) invalidates
CPython's specialized attribute and method caches at every site that touches an instance
of the class; each then misses until it is specialized again, which cost the monitors
bench's next kv_bytes replay ~1.5M instructions (~1 % of it), in whichever mode came next,
off included.
"""
from __future__ import annotations

import os
import sys

_REGISTRY = "hicache.monitors.attach"


def attach_verified(obj) -> bool:
    """Attach `obj`'s monitor when verified mode is on for it; whether one was attached
    (then its `close` runs the final cache check)."""
    registry = sys.modules.get(_REGISTRY)     # (not imported: nothing was chosen in code)
    cfg = registry.chosen() if registry is not None else None
    if cfg is None:
        if os.environ.get("HICACHE_VERIFY", "off").strip().lower() in ("", "off"):
            return False
        from hicache.monitors import attach as registry
        from hicache.monitors.runtime import VerifyConfig
        cfg = VerifyConfig.from_env()
    # (attach refuses an off configuration itself: `disable()` chose off)
    return registry.attach(obj, cfg) is not None
