"""Page transfers between a rank's device and host pools, run by copy threads.

A transfer is issued on every rank in the same order (the decision to issue is made on
replicated state), but only the owner rank of a page copies its bytes. Copy threads finish
transfers out of order (injected per-rank delays), each layer marking its own event, so the
leading-ready counts differ between ranks -- exactly what pp_sync agrees on.
"""
from __future__ import annotations

import enum
import queue
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.vocabulary import PPSync

from .errors import DistStepError, LocalTimeout


class TransferKind(enum.StrEnum):
    LOAD = "load"        # host -> device (load-back of a host hit, per layer)
    BACKUP = "backup"    # device -> host (write-through backup)


@dataclass(slots=True, frozen=True)
class PageCopy:
    """Copy every layer of src[:, src_page] to dst[:, dst_page] (pools are [L, pages, ...])."""
    src: torch.Tensor
    src_page: int
    dst: torch.Tensor
    dst_page: int


@dataclass(slots=True, eq=False)
class Transfer:
    """Invariant: done is set only after every layer event is set, and layer l's event only
    after all of this rank's copies of layer l finished."""
    tid: int
    kind: TransferKind
    num_layers: int
    copies: list[PageCopy]
    tag: object = None                          # what the engine applies at pop time
    layer_done: list[threading.Event] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    # set (with every event, so waiters wake) when the copy itself failed: the bytes are not
    # there, and whoever waits on the transfer raises instead of using them
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.layer_done = [threading.Event() for _ in range(self.num_layers)]

    def bytes_match(self) -> bool:
        """Destination equals source for every copy (checked when the transfer is applied)."""
        return all(torch.equal(c.dst[:, c.dst_page], c.src[:, c.src_page]) for c in self.copies)


class CopyEngine:
    """Worker threads that execute transfers with injected random delays."""

    def __init__(self, rank: int, seed: int, threads: int = 2, max_delay_s: float = 0.0,
                 listener: Listener = NULL_LISTENER) -> None:
        self.rank, self.listener = rank, listener
        self._work: queue.Queue[Transfer | None] = queue.Queue()
        self._rng = random.Random(seed * 1009 + rank)
        self._rng_lock = threading.Lock()
        self.max_delay_s = max_delay_s
        self.errors: list[str] = []
        # (transfer, exception) of each failure on a copy thread: the copy itself (then also
        # the transfer's `error`) or a listener after it completed (a monitor's violation);
        # the engine raises the first at its next cache check (`raise_failures`)
        self.failures: list[tuple[Transfer, BaseException]] = []
        self._threads = [threading.Thread(target=self._loop, name=f"copy-{rank}-{i}", daemon=True)
                         for i in range(threads)]
        for t in self._threads:
            t.start()

    def submit(self, t: Transfer) -> None:
        self._work.put(t)

    def _delay(self) -> float:
        with self._rng_lock:
            return self._rng.uniform(0, self.max_delay_s)

    def _loop(self) -> None:
        while (t := self._work.get()) is not None:
            try:
                # Fault injection: a per-rank random delay before and during the copy.
                time.sleep(self._delay())
                for layer in range(t.num_layers):
                    for c in t.copies:
                        c.dst[layer, c.dst_page].copy_(c.src[layer, c.src_page])
                    t.layer_done[layer].set()
                t.done.set()
                self.listener(PPSync.TransferComplete, {"rank": self.rank, "tid": t.tid, "kind": str(t.kind)})
            except Exception as exc:  # never let a copy thread die silently
                self.errors.append(f"transfer {t.tid}: {exc!r}")
                self.failures.append((t, exc))
                if not t.done.is_set():
                    t.error = exc
                    for ev in t.layer_done:
                        ev.set()
                    t.done.set()

    def raise_failures(self, step: str) -> None:
        """Raise the first failure a copy thread recorded: a monitor's violation as itself
        (an AssertionError: ProtocolViolation), anything else as a step error of this rank."""
        if not self.failures:
            return
        t, exc = self.failures[0]
        if isinstance(exc, AssertionError):
            raise exc
        raise DistStepError(step, self.rank, f"{t.kind} transfer {t.tid} failed on its copy thread: {exc!r}") from exc

    def close(self) -> None:
        for _ in self._threads:
            self._work.put(None)


class TransferQueue:
    """Issued transfers of one kind, in issue order. Only the main thread pushes and pops."""

    def __init__(self, kind: TransferKind) -> None:
        self.kind = kind
        self._q: deque[Transfer] = deque()

    def push(self, t: Transfer) -> None:
        self._q.append(t)

    def __len__(self) -> int:
        return len(self._q)

    def head(self) -> Transfer | None:
        return self._q[0] if self._q else None

    def leading_ready(self) -> int:
        n = 0
        for t in self._q:
            if not t.done.is_set():
                break
            n += 1
        return n

    def ids(self) -> list[int]:
        return [t.tid for t in self._q]

    def pop(self, count: int, step: str, rank: int, timeout_s: float, *, wait: bool = True) -> list[Transfer]:
        """Pop exactly `count`, waiting for each to finish here (StageApply).
        wait=False exists only to seed the bug 'apply before completion' in tests."""
        if count > len(self._q):
            raise RuntimeError(f"{step}: agreed to pop {count} {self.kind} transfers, only {len(self._q)} issued")
        out = []
        for _ in range(count):
            t = self._q[0]
            if wait and not t.done.wait(timeout_s):
                raise LocalTimeout(step, rank, f"{self.kind} transfer {t.tid} did not finish in {timeout_s}s")
            if t.error is not None:
                raise DistStepError(step, rank, f"{self.kind} transfer {t.tid} failed on its copy thread: "
                                                f"{t.error!r}") from t.error
            out.append(self._q.popleft())
        return out
