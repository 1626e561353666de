"""Launch one process per rank on torch.distributed (gloo) and collect their results.

Processes come from a fork server (a clean single-threaded process that imported torch and
the worker once; never a fork of a torch-laden, threaded parent), rendezvous over
tcp://127.0.0.1:<free port>, and report one result each through a queue. The launcher
never hangs: it stops the ranks once none of them has reported progress for `timeout_s`
(a rank reports through `report_progress()`, which its collectives call: a long healthy run
goes on, a stuck one is stopped), and on any failure it gives survivors a short grace
(their collectives time out on their own) and then terminates them.
"""
from __future__ import annotations

import multiprocessing as mp
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any


class LaunchError(RuntimeError):
    """One or more ranks failed; the message has one line per failing rank."""

    def __init__(self, failures: dict[int, str]) -> None:
        self.failures = failures
        lines = [f"rank {r}: {msg}" for r, msg in sorted(failures.items())]
        super().__init__("distributed run failed:\n" + "\n".join(lines))


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: in a rank process: posts this rank's progress to the launcher (None elsewhere)
_progress: Callable[[], None] | None = None
#: a rank posts progress at most this often (a queue message per collective would cost more
#: than some collectives)
PROGRESS_EVERY_S = 1.0
#: frames of a failing rank's traceback in its report (per chained exception)
TRACEBACK_FRAMES = 8


def report_progress() -> None:
    """This rank advanced (a collective finished): the launcher's no-progress deadline
    starts again. A no-op outside a launched rank."""
    if _progress is not None:
        _progress()


def _entry(fn: Callable[..., Any], rank: int, world: int, port: int, payload: Any, out: "mp.Queue") -> None:
    global _progress
    last = [float("-inf")]

    def progress() -> None:
        now = time.monotonic()
        if now - last[0] >= PROGRESS_EVERY_S:
            last[0] = now
            out.put((rank, None, None))
    _progress = progress
    try:
        result = fn(rank, world, port, payload)
        out.put((rank, True, result))
    except BaseException as exc:  # report everything, including SystemExit from a watchdog
        # the innermost frames (a negative limit): where the error was raised, not the entry
        # frames every report shares
        out.put((rank, False, f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-TRACEBACK_FRAMES)}"))


def launch(fn: Callable[[int, int, int, Any], Any], world: int, payload: Any, *, timeout_s: float = 60.0,
           grace_s: float = 10.0) -> list[Any]:
    """Run fn(rank, world, port, payload) on `world` fresh processes; results in rank order.

    fn must be importable (module-level). Raises LaunchError naming each failing rank. The
    ranks are stopped once none reported progress (`report_progress`) for `timeout_s`.
    """
    ctx = mp.get_context("forkserver")
    # The server imports these once; every rank forked from it starts with them loaded.
    ctx.set_forkserver_preload(["torch", "torch.distributed", getattr(fn, "__module__", "hicache.dist.worker")])
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_entry, args=(fn, r, world, port, payload, out), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    failures: dict[int, str] = {}
    deadline = time.monotonic() + timeout_s
    first_failure: float | None = None

    def take(msg) -> None:
        nonlocal deadline, first_failure
        rank, ok, value = msg
        if ok is None:                  # progress: the no-progress deadline starts again
            deadline = max(deadline, time.monotonic() + timeout_s)
        elif ok:
            results[rank] = value
        else:
            failures[rank] = value
            first_failure = first_failure or time.monotonic()
    try:
        while len(results) + len(failures) < world:
            now = time.monotonic()
            limit = deadline if first_failure is None else min(deadline, first_failure + grace_s)
            if now >= limit:
                break
            try:
                take(out.get(timeout=min(0.2, limit - now)))
            except queue.Empty:
                for r, p in enumerate(procs):    # a rank that died without reporting
                    if r not in results and r not in failures and p.exitcode is not None:
                        try:                     # its report may still be in the pipe
                            take(out.get(timeout=0.5))
                        except queue.Empty:
                            failures[r] = f"process exited with code {p.exitcode} without a result"
                            first_failure = first_failure or time.monotonic()
        for r in range(world):
            if r not in results and r not in failures:
                failures[r] = f"no result, and no rank made progress for {timeout_s:g} s (killed)"
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
    if failures:
        raise LaunchError(failures)
    return [results[r] for r in range(world)]
