"""The verified mode the test run is in (--hicache-verify / HICACHE_VERIFY through the plugin,
or chosen in code): tests that measure the replay itself, or replay a whole trace, skip where
the monitors would measure or dominate instead."""
from __future__ import annotations


def verified_mode() -> str:
    """off, sample or strict."""
    from hicache.monitors.attach import chosen
    cfg = chosen()
    return "off" if cfg is None else cfg.mode.value
