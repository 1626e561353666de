"""A section that SIGTERM and SIGINT do not cut in two.

The command line turns SIGTERM into an exception (and Python turns SIGINT into
KeyboardInterrupt) so that cleanup code runs: a started Mooncake master is stopped by its own
`stop`. Such an exception lands between any two bytecodes, though, and one that lands after a
child process has exec'd but before its cleanup is registered (inside `subprocess.Popen`, or
on the line after it) leaves the child running with nothing left to stop it.

    with deferred_signals():
        proc = subprocess.Popen(...)
        register_cleanup(proc)

holds both signals for the section, then hands each one that arrived to the handler that was
in place before, where it raises (or kills, under the default disposition) with the cleanup
armed. Signal handlers run in the main thread only, so the section holds nothing, and needs
to, in any other thread.
"""
from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def hold(signum: int, frame: object) -> None:
        arrived.append(signum)
    # a handler installed outside Python reads as None and cannot be put back: left alone
    previous = {s: h for s in HELD if (h := signal.getsignal(s)) is not None}
    for s in previous:
        signal.signal(s, hold)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        for s in dict.fromkeys(arrived):   # once each, in arrival order
            signal.raise_signal(s)          # runs the restored handler now, in this thread
