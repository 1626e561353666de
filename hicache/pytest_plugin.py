"""pytest plugin: `--hicache-verify=off|sample|strict` runs the tests in verified mode.

Registered as the `hicache` pytest11 entry point. Importing it costs nothing: the monitors
are imported only when the option (or HICACHE_VERIFY) asks for a mode other than off.

A test that injects a fault on purpose, or builds and judges monitors of its own, opts out
with `@pytest.mark.hicache_unmonitored`: the caches and draft runtimes it creates (in its
fixtures too, on the test's thread) get no monitor of the run's verified mode, which would
otherwise stop the fault it measures at its first step, or judge it before the monitor under
test does. Under off the marker changes nothing.
"""
from __future__ import annotations

import contextlib
import os
import sys

import pytest

MODES = ("off", "sample", "strict")
#: the marker of a test whose caches the run's verified mode leaves alone
UNMONITORED = "hicache_unmonitored"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("hicache")
    group.addoption("--hicache-verify", choices=MODES, default=None, type=lambda v: v.strip().lower(),
                    help="check every cache created by the tests against the specs "
                         "(default: HICACHE_VERIFY, else off)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", f"{UNMONITORED}: the caches this test creates get no monitor of the run's "
                                       f"verified mode (a test injecting a fault on purpose, or judging monitors of "
                                       f"its own)")
    option = config.getoption("--hicache-verify", default=None)
    mode = option or os.environ.get("HICACHE_VERIFY", "off").strip().lower() or "off"
    if mode not in MODES:
        # a usage error (pytest exits 4 with this line), not an internal error's traceback
        raise pytest.UsageError(f"HICACHE_VERIFY: {mode!r} is not one of {', '.join(MODES)}")
    if mode == "off" and option is None and "hicache.verified" not in sys.modules:
        # off from the environment, nothing imported the module: nothing to undo. (Importing
        # it turns strict mode on when HICACHE_VERIFY is unset: the session's first test ran
        # under it, the conftest fixture turning it off only after that test.)
        return
    try:
        # (imported without its own enable() from HICACHE_VERIFY: the mode is chosen here, so a
        # bad variable the option overrides blocks nothing; a bad HICACHE_VERIFY_RATE / _SEED
        # raises at enable, named in the message)
        from hicache.monitors.attach import verified_module
        verified = verified_module()
        if mode != "off":
            extra = {}
            if not os.environ.get("HICACHE_VIOLATION_DIR", "").strip():
                # (not ./hicache-violations: a run of the suite would leave its tests' traces,
                # the ones faults write on purpose included, in the working tree; removed at
                # the end when no trace went there, so a clean run leaves no directory behind)
                import tempfile
                extra["violation_dir"] = config._hicache_tmp_dir = tempfile.mkdtemp(prefix="hicache-violations-")
            verified.enable(mode, **extra)
            config._hicache_verify = mode
            # the whole configuration (rate, seed, trace directory): what a test that
            # enables its own is restored to (tests/conftest.py)
            config._hicache_verify_config = verified.current()
        else:
            # --hicache-verify=off is a choice: it holds over HICACHE_VERIFY in the environment
            verified.disable()
    except ValueError as e:
        _remove_tmp_dir(config)
        raise pytest.UsageError(str(e)) from None


def _phase(item):
    """A test phase (setup, call and teardown each: a fixture's cache is created in setup, on
    the test's thread, where the block's context variable is read), inside `unmonitored()`
    for a marked test under a verified mode."""
    block = contextlib.nullcontext()
    if getattr(item.config, "_hicache_verify", None) and item.get_closest_marker(UNMONITORED) is not None:
        from hicache.monitors.attach import unmonitored
        block = unmonitored()
    with block:
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _phase(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _phase(item))


def _remove_tmp_dir(config) -> None:
    """The session's temporary trace directory, removed when no trace was written to it."""
    path = getattr(config, "_hicache_tmp_dir", None)
    if path is not None:
        config._hicache_tmp_dir = None
        try:
            os.rmdir(path)        # (only an empty one: a violation's traces stay to explain)
        except OSError:
            pass


def pytest_report_header(config) -> str | None:
    mode = getattr(config, "_hicache_verify", None)
    if not mode:
        return None
    return f"hicache verified mode: {mode} (violation traces: {config._hicache_verify_config.violation_dir})"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """What the session's verified mode checked: per mode, the monitored caches and draft sets
    closed and their monitors' counts, and the monitored ones still open (a suite whose caches
    got no monitor, or were never closed, shows it here)."""
    mode = getattr(config, "_hicache_verify", None)
    if not mode:
        return
    from hicache.monitors.attach import closed_counts, open_count, summary_line
    counts = closed_counts()
    still_open = open_count()
    # the session's mode first (said even when none of its runtimes was closed), then any
    # other a test enabled itself; the open ones named once, on the first line
    modes = [mode, *sorted(m for m in counts if m != mode)]
    for i, m in enumerate(modes):
        terminalreporter.write_line(summary_line(m, counts.get(m), still_open if i == 0 else 0))


def pytest_unconfigure(config) -> None:
    if getattr(config, "_hicache_verify", None):
        from hicache import verified
        verified.disable()
    _remove_tmp_dir(config)
