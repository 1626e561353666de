"""Storage prefetch with prefix agreement: a loader thread, a sync thread, an ordered ack queue.

- Loader (one per rank): loads, batch by batch, the pages of a prefetch that this rank owns
  into its host pool, and posts exactly one ack per batch: the leading pages of the batch
  that are loaded as far as this rank knows (pages of other owners count as loaded here; their
  owners account for them). A failure, a backend error or a termination still posts an ack
  (rank_acks in hicache.protocol.prefix_agreement decides the values).
- Sync (one per rank): takes the local acks in order and MIN-reduces each across *all* ranks
  on a dedicated group, then publishes the agreed ack to an ordered queue. Every rank posts
  the same number of acks in the same order, so these reductions line up.
- The engine pops published acks only at cache checks, exactly as many as pp_sync agreed
  (StageCacheCheck with the popped acks).
A STOP sentinel flows through both threads so that they end in lock-step on every rank.
"""
from __future__ import annotations

import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

import torch

from hicache.protocol.digest import digest_of
from hicache.protocol.events import NULL_LISTENER, Listener
from hicache.protocol.prefix_agreement import agree_ack, rank_acks
from hicache.protocol.vocabulary import PrefixAgreement
from hicache.storage.base import StorageBackend

from .comm import Comm
from .errors import LocalTimeout, PrefetchFailure


@dataclass(slots=True, eq=False)
class PrefetchJob:
    """One request's storage prefetch. host_rows[i] is this rank's local host page for page i
    when this rank owns it, else None. Invariant: len(keys) == len(host_rows) == sum(plan)."""
    rid: int
    plan: tuple[int, ...]
    keys: list[str]
    host_rows: list[int | None]
    terminate: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class PublishedAck:
    rid: int
    batch: int
    pages: int      # agreed (MIN across ranks) pages of this batch


_STOP = object()


class PrefetchWorker:
    def __init__(self, comm: Comm, store: StorageBackend, host_pool: torch.Tensor, *,
                 listener: Listener = NULL_LISTENER) -> None:
        self.comm, self.store, self.host_pool, self.listener = comm, store, host_pool, listener
        self._jobs: queue.Queue[PrefetchJob | object] = queue.Queue()
        self._acks: queue.Queue[tuple[int, int, int] | object] = queue.Queue()
        self._published: deque[PublishedAck] = deque()
        self._cond = threading.Condition()
        # set once, by the first of the two threads to die (then it stays set: a dead thread
        # posts or publishes no more acks, so this worker can never serve a prefetch again)
        self.error: BaseException | None = None
        self.error_thread = ""
        # (rid, batch, since) of the batch the loader is on, None when idle: a rank whose
        # loader hangs raises nothing itself; the fault report of its stage names this
        self._loading: tuple[int, int, float] | None = None
        self.loaded_pages = 0
        self.failed_batches = 0
        # rid -> batch plan of every submitted prefetch, in submit order (the order of the
        # ack stream on every rank); read by the PrefixAgreement monitor
        self.plans: dict[int, tuple[int, ...]] = {}
        rank = comm.rank
        self._loader = threading.Thread(target=self._guard(self._load_loop), name=f"prefetch-load-r{rank}", daemon=True)
        self._sync = threading.Thread(target=self._guard(self._sync_loop), name=f"prefetch-sync-r{rank}", daemon=True)
        self._loader.start()
        self._sync.start()

    # --- engine side ------------------------------------------------------------------
    def submit(self, job: PrefetchJob) -> None:
        with self._cond:
            self.plans[job.rid] = job.plan
        self._jobs.put(job)

    def ready_count(self, step: str = "ready_count") -> int:
        """Published acks not popped yet; PrefetchFailure once a thread of this worker died
        (its acks stop coming: a count without the error would look like a slow load)."""
        count, _ = self.snapshot()
        self.raise_if_failed(step)
        return count

    def snapshot(self) -> tuple[int, BaseException | None]:
        """(published acks not popped, what killed a thread or None), read together. The
        cache check puts both in its pp_sync vector and acts on this same reading after it:
        an error that comes later is shared at the next check, so every rank stops at the
        same one."""
        with self._cond:
            return len(self._published), self.error

    def wait_published(self, timeout_s: float) -> None:
        """Block until the sync thread publishes something (or the timeout passes)."""
        with self._cond:
            self._cond.wait(timeout_s)

    def pop(self, count: int, step: str, timeout_s: float) -> list[PublishedAck]:
        """Pop exactly `count` published acks (StageCacheCheck), waiting for the local sync
        thread if it is behind the agreed count; PrefetchFailure if it must wait and a thread
        of this worker died. Acks already published are popped even then (every rank agreed
        on them). The agreed count is a MIN over ranks, so this rank often never waits: its
        failure is raised by the cache check (`snapshot`), not here."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while len(self._published) < count:
                self.raise_if_failed(step)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise LocalTimeout(step, self.comm.rank, f"only {len(self._published)} of {count} "
                                       "agreed prefetch acks were published here")
                self._cond.wait(min(left, 0.5))
            out = [self._published.popleft() for _ in range(count)]
        if out:
            self.listener(PrefixAgreement.StageCacheCheck, {"rank": self.comm.rank, "step": step,
                                                           "acks": [(a.rid, a.batch, a.pages) for a in out]})
        return out

    def close(self, timeout_s: float) -> None:
        """Stop both threads (every rank calls this at the same point of its program)."""
        self._jobs.put(_STOP)
        self._loader.join(timeout_s)
        self._sync.join(timeout_s)
        self.raise_if_failed("prefetch_close")

    def loader_state(self) -> str:
        """Where this rank's loader is (an error detail: a hung loader shows here)."""
        at = self._loading
        if at is None:
            return "this rank's prefetch loader is idle"
        rid, batch, since = at
        return (f"this rank's prefetch loader has been on batch {batch} of request {rid} for "
                f"{time.monotonic() - since:.1f} s")

    def raise_if_failed(self, step: str) -> None:
        """Raise what killed a thread of this worker: a monitor's violation as itself (an
        AssertionError: ProtocolViolation, as the copy threads do), anything else as a
        PrefetchFailure naming the thread and the error (chained as the cause)."""
        exc = self.error
        if exc is None:
            return
        if isinstance(exc, AssertionError):
            raise exc
        raise PrefetchFailure(step, self.comm.rank, f"the storage prefetch thread {self.error_thread} "
                              f"failed: {type(exc).__name__}: {exc}") from exc

    def _guard(self, fn):
        def run() -> None:
            try:
                fn()
            except BaseException as exc:  # surfaced to the engine at its next cache check
                with self._cond:
                    if self.error is None:      # the first failure is the cause; keep it
                        self.error_thread = threading.current_thread().name
                        exc.add_note(f"(raised on the prefetch thread {self.error_thread})")
                        self.error = exc
                    self._cond.notify_all()
        return run

    # --- loader thread ----------------------------------------------------------------
    def _load_loop(self) -> None:
        while (job := self._jobs.get()) is not _STOP:
            loaded: list[int | None] = []
            start = 0
            for b, size in enumerate(job.plan):
                if job.terminate.is_set():
                    got = None
                else:
                    self._loading = (job.rid, b, time.monotonic())
                    got = self._load_batch(job, start, size)
                    self.listener(PrefixAgreement.RankLoadBatch, {"rank": self.comm.rank, "rid": job.rid,
                                                                 "batch": b, "loaded": got})
                    self._loading = None
                loaded.append(got)
                # The ack of batch b depends only on batches <= b: post it now.
                ack = rank_acks(job.plan[:b + 1], loaded)[-1]
                # announced before the sync thread can see it: a listener never sees an ack
                # published before it was posted
                self.listener(PrefixAgreement.RankPostAck, {"rank": self.comm.rank, "rid": job.rid,
                                                           "batch": b, "ack": ack})
                self._acks.put((job.rid, b, ack))
                start += size
        self._acks.put(_STOP)

    def _load_batch(self, job: PrefetchJob, start: int, size: int) -> int:
        """Leading pages of the batch loaded as far as this rank knows."""
        idx = [i for i in range(start, start + size) if job.host_rows[i] is not None]
        values: list[torch.Tensor | None]
        try:
            values = list(self.store.batch_get([job.keys[i] for i in idx])) if idx else []
            if len(values) != len(idx):
                values = [None] * len(idx)
        except Exception:  # a backend error is a failed batch, never a dead thread (bug 14)
            values = [None] * len(idx)
        ok = {}
        for i, val in zip(idx, values):
            row = self.host_pool[:, job.host_rows[i]]
            good = val is not None and val.numel() == row.numel() * row.element_size()
            if good:
                row.copy_(val.view(row.dtype).view(row.shape))
                self.loaded_pages += 1
            ok[i] = good
        n = 0
        for i in range(start, start + size):
            if not ok.get(i, True):
                self.failed_batches += 1
                break
            n += 1
        return n

    # --- sync thread ------------------------------------------------------------------
    def _sync_loop(self) -> None:
        while True:
            item = self._acks.get()
            stop = item is _STOP
            rid, batch, ack = (-1, -1, 0) if stop else item
            # The digest names the (request, batch) being agreed: ranks posting acks in a
            # different order are caught here.
            out = self.comm.checked_min("prefix_sync", self.comm.prefetch_group,
                                        digest_of(("stop",) if stop else (rid, batch)), [ack])
            if stop:
                return
            agreed = agree_ack([out.counts[0]])
            # announced before the engine can pop it (same reason as RankPostAck)
            self.listener(PrefixAgreement.SyncPublish, {"rank": self.comm.rank, "rid": rid, "batch": batch,
                                                       "pages": agreed})
            with self._cond:
                self._published.append(PublishedAck(rid, batch, agreed))
                self._cond.notify_all()
