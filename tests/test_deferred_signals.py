"""deferred_signals: a signal arriving inside the section is raised at its end, by the
handler that was in place, after everything the section did."""
from __future__ import annotations

import signal
import threading

import pytest

from hicache.deferred_signals import deferred_signals


class Stop(BaseException):
    pass


@pytest.fixture
def raising_sigterm():
    def stop(signum, frame):
        raise Stop(signum)
    previous = signal.signal(signal.SIGTERM, stop)
    yield stop
    signal.signal(signal.SIGTERM, previous)


def test_a_sigterm_inside_is_raised_after_the_section_ran_to_its_end(raising_sigterm):
    done = []
    with pytest.raises(Stop):
        with deferred_signals():
            signal.raise_signal(signal.SIGTERM)
            done.append("after the signal")
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGTERM) is raising_sigterm


def test_without_a_signal_nothing_is_raised_and_the_handlers_are_back(raising_sigterm):
    before = signal.getsignal(signal.SIGINT)
    with deferred_signals():
        assert signal.getsignal(signal.SIGTERM) is not raising_sigterm
    assert signal.getsignal(signal.SIGTERM) is raising_sigterm
    assert signal.getsignal(signal.SIGINT) is before


def test_ctrl_c_inside_is_a_keyboard_interrupt_at_the_end():
    done = []
    with pytest.raises(KeyboardInterrupt):
        with deferred_signals():
            signal.raise_signal(signal.SIGINT)
            done.append("after the signal")
    assert done == ["after the signal"]


def test_nested_sections_hold_two_sigterms_to_the_end_of_the_outermost(raising_sigterm):
    done = []
    with pytest.raises(Stop):
        with deferred_signals():
            with deferred_signals():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)
            done.append("outer section went on")
    assert done == ["outer section went on"]


def test_outside_the_main_thread_it_holds_nothing_and_does_not_fail():
    seen = []

    def body():
        try:
            with deferred_signals():      # signal.signal would raise ValueError here
                seen.append("ran")
        except BaseException as exc:       # handed to the assertion below
            seen.append(exc)
    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert seen == ["ran"]
