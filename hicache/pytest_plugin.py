"""pytest plugin: `--hicache-verify=off|sample|strict` runs the tests in verified mode.

Registered as the `hicache` pytest11 entry point. Importing it costs nothing: the monitors
are imported only when the option (or HICACHE_VERIFY) asks for a mode other than off.
"""
from __future__ import annotations

import os

MODES = ("off", "sample", "strict")


def pytest_addoption(parser) -> None:
    group = parser.getgroup("hicache")
    group.addoption("--hicache-verify", choices=MODES, default=None,
                    help="check every cache created by the tests against the specs "
                         "(default: HICACHE_VERIFY, else off)")


def pytest_configure(config) -> None:
    mode = config.getoption("--hicache-verify", default=None) or os.environ.get("HICACHE_VERIFY", "off")
    mode = mode.strip().lower() or "off"
    if mode not in MODES:
        raise ValueError(f"--hicache-verify/HICACHE_VERIFY: {mode!r} is not one of {', '.join(MODES)}")
    if mode != "off":
        from hicache import verified
        verified.enable(mode)
        config._hicache_verify = mode


def pytest_report_header(config) -> str | None:
    mode = getattr(config, "_hicache_verify", None)
    return f"hicache verified mode: {mode}" if mode else None


def pytest_unconfigure(config) -> None:
    if getattr(config, "_hicache_verify", None):
        from hicache import verified
        verified.disable()
