"""Runtime properties beside the spec: the storage path of the background workers.

REFERENCE.md bug 14: `exists` used other keys than `get`/`set`, and the `None` that `get`
then returned killed the prefetch thread. Neither half is a safety invariant of a spec:

  OneKeyDerivation        every key `batch_get` is asked for was confirmed by a
                          `batch_exists` on the same thread (the runtime's protocol is
                          exists-then-get over one key list; a get of a key exists never
                          confirmed means the two calls derived keys differently);
  InFlightOpsHaveWorker   every operation in flight on a background worker has a live
                          thread to complete it. HostTier states the consequence only as
                          liveness (PrefetchFinish(q) is enabled while pfSlot[q] # NoSlot,
                          and nothing else frees the slot); this is the condition that
                          keeps that step possible.

`KeyAudit` wraps the cache's backend in monitored runs (the production path has no
wrapper) and records breaches on the worker threads; `WorkerWatch`, hooked into the
HostTier monitor, reports them after the next event that monitor checks (strict: every
one; sample: the sampled ones) and at cache checks, through the monitor's `fail` (its
trace and `ProtocolViolation`, kind "runtime"). Events emitted on worker threads
(LoadBackLayer) are no HostTier step, so the monitor runs no hook for them: reading the
ack queues there would race with the scheduler.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence

from hicache.monitors.maps.loops import watch_probe
from hicache.monitors.rt import Failure
from hicache.storage.base import StorageBackend

LOCATION = "hicache/monitors/workers.py"
WORKERS_ALIVE = "InFlightOpsHaveWorker"
ONE_KEY_DERIVATION = "OneKeyDerivation"
TEXTS = {
    ONE_KEY_DERIVATION: "every key batch_get is asked for was confirmed by a batch_exists on the same thread "
                        "(exists, get and set derive keys one way)",
    WORKERS_ALIVE: "every operation in flight on a background worker has a live thread to complete it "
                   "(so HostTier's PrefetchFinish(q) stays possible while pfSlot[q] # NoSlot)",
}

#: events emitted on worker threads (not the scheduler's)
class KeyAudit(StorageBackend):
    """A backend wrapper that checks each thread's fetches against its exists calls. The
    runtime fetches as one or more `batch_exists` calls then `batch_get` calls over keys
    the exists calls confirmed; so per thread, the keys confirmed since the first exists
    after a get (one fetch's confirmations) must include every key a get asks for. A get
    of another key is recorded as a breach (derived differently from what exists saw)."""

    _OWN = frozenset({"inner", "_local", "breaches"})

    def __init__(self, inner: StorageBackend) -> None:
        set_own = object.__setattr__
        set_own(self, "inner", inner)
        set_own(self, "_local", threading.local())
        set_own(self, "breaches", [])    # (thread name, first unconfirmed key)

    # Verified mode puts this wrapper in `cache.storage`, where the caller's code still
    # reaches for its own backend's attributes (a fault switch, a counter, a gate): every
    # attribute other than the audit's own reads and writes the wrapped backend, so turning
    # verification on changes no behaviour (a write landing on the wrapper would be lost).
    # The backend methods the audit defines (_METHODS) are read from the audit, and so are
    # written to it: a caller wrapping one in place (`s.batch_set = Faulty(s.batch_set)`)
    # wraps what it read, the audit's method, which calls the backend's. Written to the
    # backend, the wrapper would call the audit's method, which calls the backend's method,
    # now the wrapper: a loop until the wrapper raised or Python's recursion limit did (a
    # storage write that fails under verification and succeeds without it).
    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def __setattr__(self, name: str, value) -> None:
        if name in KeyAudit._OWN or name in _METHODS:
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    def _fetch(self) -> set:
        c = getattr(self._local, "confirmed", None)
        if c is None:
            c = self._local.confirmed = set()
            self._local.got = False
        return c

    def _check(self, keys: Sequence[str]) -> None:
        c = self._fetch()
        self._local.got = True
        for k in keys:
            if k not in c:
                self.breaches.append((threading.current_thread().name, k))
                return

    def batch_exists(self, keys: Sequence[str]) -> int:
        c = self._fetch()
        if self._local.got:              # a new fetch begins
            c.clear()
            self._local.got = False
        n = self.inner.batch_exists(keys)
        if type(n) is int:
            c.update(keys[:max(0, min(n, len(keys)))])
        return n

    def batch_get(self, keys: Sequence[str]):
        self._check(keys)
        return self.inner.batch_get(keys)

    def batch_get_into(self, keys, dst, rows):
        self._check(keys)
        return self.inner.batch_get_into(keys, dst, rows)

    def batch_get_sized(self, keys, nbytes):
        # (the wrapped backend's own sized read: it counts a page of another size corrupt,
        # never a hit, which the interface's default over batch_get cannot)
        self._check(keys)
        return self.inner.batch_get_sized(keys, nbytes)

    def batch_set(self, keys, values):
        return self.inner.batch_set(keys, values)

    def batch_set_from(self, keys, src, rows):
        return self.inner.batch_set_from(keys, src, rows)

    def register_buffer(self, buf) -> None:
        self.inner.register_buffer(buf)

    def stats(self) -> dict[str, int]:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()


#: the backend methods the audit defines: read from it, and written to it (see __setattr__)
_METHODS = frozenset(n for n, v in vars(KeyAudit).items() if callable(v) and not n.startswith("_"))


def stranded(cache) -> list[tuple[str, int]]:
    """(worker name, unfinished ops) of each worker whose thread has ended with work left."""
    out = []
    for w in (cache.loader, cache.writer, cache.prefetcher, cache.backuper):
        # (no op in its ack queue: nothing can be stranded, and the thread is not asked)
        if w is None or not w.acks or w._thread.is_alive():
            continue
        n = sum(1 for op in w.acks if not op.done.is_set())
        if n:
            out.append((w.name, n))
    return out


class WorkerWatch:
    """Checks OneKeyDerivation (when the cache's backend is a `KeyAudit`) and
    InFlightOpsHaveWorker as hooks of `monitor`, the HostTier monitor of the same cache,
    whose history and trace writer it reuses."""

    def __init__(self, cache, monitor) -> None:
        self.cache = cache
        self.monitor = monitor
        self._seen = 0          # breaches already reported

    def check(self, name: str, fields: dict) -> None:
        """Both properties now: after each event the monitor checks (strict: every one;
        sample: the sampled ones), and at each cache check."""
        c = self.cache
        audit = c.storage
        # (an exact type test: isinstance on the storage ABC costs more than the rest here)
        if type(audit) is KeyAudit and len(audit.breaches) > self._seen:
            thread, key = audit.breaches[self._seen]
            self._seen = len(audit.breaches)
            self._fail(ONE_KEY_DERIVATION, f"{thread} asked batch_get for {key[:16]}..., which no batch_exists "
                                           f"on that thread confirmed", name, fields)
        # (the common case inline: no worker with ops left in its ack queue has a dead thread;
        # `stranded` counts them only when one has. One expression over the four workers,
        # `stranded`'s, read at each call (a fault may replace one): no tuple of them built nor
        # iterated. The monitor's events reach this only with an ack queued or a new breach
        # (loops.watch_probe decides the rest), cache checks always: kept inline, not
        # `stranded`'s loop, which cost these calls ~0.35M instructions a kv_bytes replay more)
        if ((w := c.loader) is None or not w.acks or w._thread.is_alive()) \
                and ((w := c.writer) is None or not w.acks or w._thread.is_alive()) \
                and ((w := c.prefetcher) is None or not w.acks or w._thread.is_alive()) \
                and ((w := c.backuper) is None or not w.acks or w._thread.is_alive()):
            return
        bad = stranded(c)
        if bad:
            self._fail(WORKERS_ALIVE, "; ".join(f"the {w} worker's thread has ended with {n} operation(s) "
                                                f"unfinished" for w, n in bad), name, fields)

    def _fail(self, prop: str, what: str, name: str, fields: dict) -> None:
        # the monitor writes its trace (rebuilding the states an incremental map kept as
        # deltas) and raises; no states given: the property is not about a spec step
        self.monitor.fail("runtime", name, fields, Failure(prop, 1, f"{TEXTS[prop]} [{what}]", LOCATION),
                          None, None)


def watch(cache, monitor) -> WorkerWatch:
    """Audit the cache's storage calls and hook the watch into `monitor` (call before the
    cache serves anything)."""
    if cache.storage is not None and not isinstance(cache.storage, KeyAudit):
        cache.storage = KeyAudit(cache.storage)
    w = WorkerWatch(cache, monitor)
    # a hook of the monitor, not a listener of its own: it runs after the events the
    # monitor checks (events of no protocol step, such as LoadBackLayer, are not), at no
    # cost on the others; its common case, nothing to judge, decided by loops.watch_probe
    # (native where it builds), which calls the check otherwise
    monitor.watch_hooks.append(watch_probe(cache, w, KeyAudit, w.check))
    monitor.cache_check_hooks.append(lambda: w.check("cache_check", {}))
    return w
