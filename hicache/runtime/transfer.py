"""Background transfer threads with ordered ack queues.

A `Worker` owns one thread and one FIFO of operations; `submit` appends the op to the
ack queue in issue order, and `ready()` pops only from the front, only ops whose work is
done, so the scheduler applies completions in issue order whatever the thread timing.
An op that raises never kills its thread: the error is stored on the op (a miss).
"""
from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any, Iterator

#: how often a wait on a worker's op checks that the worker's thread still runs
LIVENESS_POLL_S = 0.05


class WorkerDied(RuntimeError):
    """A worker's thread ended with one of its ops unfinished: nothing will complete it, so
    a wait for it would never return."""


class Op:
    """One background operation. `run` executes on the worker thread.
    `pins_device`: the op reads or writes device pages, so they must not be freed."""

    pins_device = False

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.nodes: list[Any] = []    # tree nodes whose state this op holds (see radix._split)

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def finish(self) -> None:
        """Mark the op ended (run returned or raised): the worker's last word on it."""
        self.done.set()


class LoadOp(Op):
    """Host -> device, layer by layer. `layers_done` only grows; consumers wait per layer."""

    pins_device = True

    def __init__(self, layers: int, copy_layer, on_layer) -> None:
        super().__init__()
        self.layers = layers
        self.layers_done = 0
        self._cond = threading.Condition()
        self._copy_layer = copy_layer   # (layer) -> None, on the worker thread
        self._on_layer = on_layer       # (layer) -> None, emits LoadBackLayer
        self.slots: list[int] = []
        self.pages: list[int] = []
        # the scheduler's bookkeeping (its thread only): requests that hold this load in
        # their `loads` and have not ended, and whether its completion was applied
        self.holders = 0
        self.applied = False
        # its copy failed and the device copies it was to fill were dropped (the scheduler's
        # `_drop_failed_load`, once: at the first look after the failure, or at its apply)
        self.dropped = False
        self.hit: tuple | None = None   # (request, tier) whose hit counters it added to

    def run(self) -> None:
        for layer in range(self.layers):
            self._copy_layer(layer)
            with self._cond:
                self.layers_done = layer + 1
                self._cond.notify_all()
            self._on_layer(layer)

    def finish(self) -> None:
        # a per-layer waiter re-checks its condition only when notified: a load that ended
        # early (a copy failed) must wake it, or it waits for a layer that never comes
        with self._cond:
            self.done.set()
            self._cond.notify_all()

    def wait_layer(self, layer: int, timeout: float | None = None) -> bool:
        """Block until `layer` is on device (the forward pass calls this per layer): True
        once it is; False on timeout, and when the load ended (failed, `error`) before
        copying it: its pages hold no bytes of the prefix to compute on."""
        with self._cond:
            self._cond.wait_for(lambda: self.layers_done > layer or self.done.is_set(), timeout)
            return self.layers_done > layer


class FuncOp(Op):
    """An op whose work is one callable; its return value lands in `result`."""

    def __init__(self, fn, pins_device: bool = False, **fields: Any) -> None:
        super().__init__()
        self.pins_device = pins_device
        self._fn = fn
        self.result: Any = None
        self.__dict__.update(fields)

    def run(self) -> None:
        self.result = self._fn(self)


class Worker:
    """One background thread, a FIFO of ops, and their ack queue in issue order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._q: queue.Queue[Op | None] = queue.Queue()
        self.acks: collections.deque[Op] = collections.deque()
        self._thread = threading.Thread(target=self._loop, name=f"hicache-{name}", daemon=True)
        self._thread.start()

    def submit(self, op: Op) -> Op:
        self.acks.append(op)
        self._q.put(op)
        return op

    def ready(self) -> Iterator[Op]:
        """The finished ops at the front of the ack queue, in issue order, each popped only
        when it is taken: when applying one raises (a monitor's violation, a check failure),
        the ones after it stay queued for the next poll. (Popped all at once, they were lost:
        never applied, their slots held and their nodes in flight for good.)"""
        acks = self.acks
        while acks and acks[0].done.is_set():
            yield acks.popleft()

    def drain(self) -> list[Op]:
        """Wait for every submitted op and pop them all, in issue order."""
        out = []
        while self.acks:
            self.wait_for(self.acks[0])
            out.append(self.acks.popleft())
        return out

    def wait_for(self, op: Op, timeout: float | None = None) -> bool:
        """Wait for `op`, one of this worker's, at most `timeout` seconds (None: until it is
        done): True once done. Raises WorkerDied when the thread has ended with it
        unfinished (a dead worker's op never completes: the wait would hang). The wait is
        the op's event; the thread is looked at every LIVENESS_POLL_S while it waits."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = LIVENESS_POLL_S if deadline is None else min(LIVENESS_POLL_S, deadline - time.monotonic())
            if op.done.wait(max(left, 0.0)):
                return True
            if not self._thread.is_alive() and not op.done.is_set():
                raise WorkerDied(f"the {self.name} worker's thread has ended with an operation unfinished: "
                                 f"nothing will complete it")
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _loop(self) -> None:
        while True:
            op = self._q.get()
            if op is None:
                return
            try:
                op.run()
            except BaseException as exc:  # noqa: BLE001 - a failing op is a miss, never a dead thread
                op.error = exc
            finally:
                op.finish()

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop the thread after the ops queued before; True once it ended. With a bound,
        a thread stuck in an op (a backend that never answers) is left behind (a daemon):
        False."""
        self.stop()
        return self.join(timeout_s)

    def stop(self) -> None:
        """Ask the thread to end after the ops queued before it (without waiting)."""
        self._q.put(None)

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the thread to end, at most `timeout_s`: True once it has."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()
