"""Prefill-decode handoff of a cached prefix (spec/PDHandoff.tla), over any message channel.

Two endpoints exchange small int messages `(kind, page, clock)` and page payloads over a
`Channel` (FIFO per direction; `hicache.dist.pd_handoff` runs it on torch.distributed). Every
step an endpoint takes is one action of the spec, local to that endpoint: it may consume the
message at the head of its inbound channel and append to its outbound one.

  prefill                                   decode
  HELLO(n) ----------------------------->   (setup: the prefix's page count)
                                            DecodeAllocate(i): ALLOC(i) (window of W pages)
  PrefillLoadBack(i) (storage->host->device, every page, before the first send)
  PrefillSend(i): takes ALLOC(i), sends DATA(i) + page bytes
                                            DecodeReceive(i) (into the page it owns)
                                            DecodeRead(i) (only landed pages)
                                            DecodeFinish: DONE
  PrefillRelease: takes DONE, unlocks

Aborts. PrefillAbort sends ABORT (after every DATA it sent: the channel is FIFO) and keeps the
prefix pinned; decode answers with DecodeClose (frees everything, sends CLOSED); prefill drops
what decode sent meanwhile (PrefillDrop) and unlocks on CLOSED (PrefillRelease). DecodeAbort
frees the landed pages, keeps those whose copy may be in flight (never freed under a copy:
reference bug 12) and sends ABORT; prefill answers with its own PrefillAbort (and drops
decode's ABORT); decode frees each kept page as its copy lands and the rest at DecodeClose.
Invariant: after `run()` returns, an aborted endpoint holds no page and no lock; a finished
decode holds its pages for the request that now runs (`finish_request` frees them).

Each step is logged with a Lamport clock (messages carry the clock), the message it consumed,
the messages it sent and a snapshot of the endpoint's runtime state after it; the two logs
merge into one causal order (`merge`) that the generated PDHandoff monitor checks step by
step (`hicache.monitors.maps.pd_handoff`).
"""
from __future__ import annotations

import dataclasses
import enum
import random
from typing import Any, Protocol

from hicache.protocol.vocabulary import PDHandoff as P
from hicache.validate import int_at_least, integer, number_in


class Msg(enum.IntEnum):
    HELLO = 1      # setup, before the protocol starts: the prefix's page count
    ALLOC = 2      # decode -> prefill: a destination page for page i is owned
    DATA = 3       # prefill -> decode: page i's header; its payload follows
    ABORT = 4      # either way: the sender gives up (prefill: sends nothing more)
    DONE = 5       # decode -> prefill: every page landed and was read
    CLOSED = 6     # decode -> prefill: answer to prefill's ABORT, nothing is in flight


NO_PAGE = -1


class Channel(Protocol):
    """FIFO messages to the peer. `send`/`recv` carry (kind, page, clock); payloads follow
    their DATA header in the same order."""

    def send(self, kind: int, page: int, clock: int) -> None: ...

    def recv(self) -> tuple[int, int, int]: ...

    def send_payload(self, data) -> None: ...

    def recv_payload(self, out) -> None: ...


class Faults:
    """Seeded-bug switches (off by default; each read only on the path it affects).
    `send_before_load_back`: prefill sends a page without waiting for its load-back (bug 11).
    `abort_frees_in_flight`: a decode abort frees pages whose copy may be in flight (bug 12).
    `decode_leaks_on_abort`: an aborting decode never frees the pages it kept for copies in
    flight. `prefill_leaks_on_abort`: an aborted prefill never unlocks its prefix."""
    send_before_load_back = False
    abort_frees_in_flight = False
    decode_leaks_on_abort = False
    prefill_leaks_on_abort = False


FAULTS = Faults()


@dataclasses.dataclass(slots=True, frozen=True)
class LogEvent:
    """One step. `page` is the spec's page (1-based) or None; `info` holds `recv` (the
    consumed message as (kind name, spec page) or None), `sent` (list of those), `snap` (the
    endpoint's state after the step) and the step's own details."""
    clock: int
    side: str          # "prefill" | "decode"
    action: str        # a PDHandoff action
    page: int | None
    info: dict


def spec_msg(kind: int, page: int) -> tuple[str, int]:
    """A runtime message as the spec's <<kind, page>> (page 1-based, 0 for control)."""
    return (Msg(kind).name, page + 1 if page >= 0 else 0)


class Log:
    """An endpoint's events with its Lamport clock; `init` is its state before any step."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.clock = 0
        self.events: list[LogEvent] = []
        self.init: dict | None = None

    def tick(self, seen: int = 0) -> int:
        self.clock = max(self.clock, seen) + 1
        return self.clock


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """Random choices of one run (seeded). `*_abort_at`: the side aborts once it has taken
    that many steps (prefill: pages served; decode: loop turns; None: never); `window`:
    decode's pages allocated ahead of the landed ones."""
    seed: int = 0
    prefill_abort_at: int | None = None
    decode_abort_at: int | None = None
    window: int = 2
    max_delay_s: float = 0.0

    def __post_init__(self) -> None:
        # (window 0 never allocates: both sides would wait for each other forever)
        integer("seed", self.seed)
        for name in ("prefill_abort_at", "decode_abort_at"):
            if getattr(self, name) is not None:
                int_at_least(name, getattr(self, name), 0)
        int_at_least("window", self.window, 1)
        number_in("max_delay_s", self.max_delay_s, 0.0)

    @staticmethod
    def random(seed: int, n_pages: int) -> "Plan":
        rng = random.Random(seed)
        pick = lambda: rng.choice([None, None] + list(range(n_pages + 1)))  # noqa: E731
        return Plan(seed, pick(), pick(), rng.randint(1, 3), 0.002)


class _Endpoint:
    side = ""

    def __init__(self, chan: Channel, plan: Plan, salt: int) -> None:
        self.chan, self.plan = chan, plan
        self.log = Log(self.side)
        self.rng = random.Random(plan.seed * 2 + salt)
        self.state = ""

    def _delay(self) -> None:
        if self.plan.max_delay_s:
            import time
            time.sleep(self.rng.uniform(0, self.plan.max_delay_s))   # perturbation, not sync

    def _recv(self) -> tuple[int, int]:
        kind, page, clock = self.chan.recv()
        self.log.tick(clock)
        return kind, page

    def snapshot(self) -> dict:
        raise NotImplementedError

    def _step(self, action: P, page: int | None = None, recv: tuple[int, int] | None = None,
              send: tuple[tuple[int, int], ...] = (), payload=None, **info: Any) -> None:
        """Log one spec step (its local effects are done), then send its messages with the
        step's clock (a DATA's payload right after its header)."""
        clock = self.log.tick()
        info.update(recv=None if recv is None else spec_msg(*recv),
                    sent=[spec_msg(k, p) for k, p in send], snap=self.snapshot())
        self.log.events.append(LogEvent(clock, self.side, action.value,
                                        None if page is None else page + 1, info))
        for kind, p in send:
            self.chan.send(int(kind), p, clock)
            if kind == Msg.DATA:
                self.chan.send_payload(payload)


class PrefillEndpoint(_Endpoint):
    """Prefill side. `source` provides the prefix: `n_pages`, `tiers` (the tier of each
    page: "device"/"host"/"storage"), `load(on_step)` moves every page to device, calling
    `on_step(page, tier)` after each one-tier move, `page_bytes(i)` reads device page i
    (0-based), `locked()` whether the request still holds its lock, `release(aborted)` drops
    it."""
    side = "prefill"

    def __init__(self, chan: Channel, source, plan: Plan) -> None:
        super().__init__(chan, plan, 1)
        self.source = source
        self.loaded = False
        self.served = 0
        self.aborted_by: str | None = None

    def snapshot(self) -> dict:
        return {"tiers": tuple(self.source.tiers), "locked": self.source.locked(), "state": self.state}

    def _ensure_loaded(self) -> None:
        if self.loaded:
            return
        self.loaded = True
        self.source.load(lambda page, tier: self._step(P.PrefillLoadBack, page, tier=tier))

    def _abort_due(self) -> bool:
        # only while pages remain to send: after the last DATA the abort changes nothing
        at = self.plan.prefill_abort_at
        return at is not None and at <= self.served < self.source.n_pages

    def _abort(self, reason: str) -> None:
        self.state = "aborting"
        self.aborted_by = self.aborted_by or reason
        self._step(P.PrefillAbort, send=((Msg.ABORT, NO_PAGE),), reason=reason, sent_pages=self.served)

    def run(self) -> str:
        """Serve the handoff; returns "done", "aborted_by_prefill" or "aborted_by_decode"."""
        n = self.source.n_pages
        self.state = "running"
        self.log.init = self.snapshot()
        self.chan.send(int(Msg.HELLO), n, self.log.tick())
        while True:
            if self.state == "running" and self._abort_due():
                self._abort("prefill")
            kind, page = self._recv()
            self._delay()
            if self.state == "aborting":
                if kind == Msg.CLOSED:      # every DATA we sent landed: unpin only now
                    if not FAULTS.prefill_leaks_on_abort:
                        self.source.release(aborted=True)
                    self.state = "aborted"
                    self._step(P.PrefillRelease, recv=(kind, page))
                    return f"aborted_by_{self.aborted_by}"
                if kind not in (Msg.ALLOC, Msg.ABORT, Msg.DONE):
                    raise RuntimeError(f"prefill: unexpected message {kind} while aborting")
                self._step(P.PrefillDrop, recv=(kind, page))
            elif kind == Msg.ALLOC:
                late = FAULTS.send_before_load_back
                if not late:
                    self._ensure_loaded()      # happens-before: load-back, then send
                tier = self.source.tiers[page]
                self._step(P.PrefillSend, page, recv=(kind, page), send=((Msg.DATA, page),),
                           payload=self.source.page_bytes(page), tier=tier)
                self.served += 1
                if late and tier != "device":     # the fault loads only after an unloaded send
                    self._ensure_loaded()
            elif kind == Msg.ABORT:          # decode aborted: answer with our ABORT, drop its own
                self._abort("decode")
                self._step(P.PrefillDrop, recv=(kind, page))
            elif kind == Msg.DONE:
                self.source.release(aborted=False)
                self.state = "done"
                self._step(P.PrefillRelease, recv=(kind, page))
                return "done"
            else:
                raise RuntimeError(f"prefill: unexpected message {kind}")


class DecodeEndpoint(_Endpoint):
    """Decode side: a page allocator and a page store. `alloc()` one page or None,
    `free(page)`, `owns(page)`, `free_count()`, `write(page, data)` lands a copy,
    `read(page)` returns its bytes, `buffer()` a receive buffer of one page."""
    side = "decode"

    def __init__(self, chan: Channel, pool, plan: Plan) -> None:
        super().__init__(chan, plan, 2)
        self.pool = pool
        self.owned: dict[int, int] = {}     # spec page (0-based) -> decode page
        self.pending: list[int] = []        # ALLOC sent, DATA not landed (may be in flight)
        self.landed: set[int] = set()
        self.reads: dict[int, Any] = {}     # spec page -> bytes read
        self.kept: set[int] = set()         # pages kept at DecodeAbort for copies in flight
        self.aborted_by: str | None = None

    def snapshot(self) -> dict:
        # a page counts as allocated while the pool really owns it (freed behind our back:
        # not owned), and the free count is the pool's own
        owned = tuple(sorted(p for p, d in self.owned.items() if self.pool.owns(d)))
        return {"owned": owned, "free": self.pool.free_count(), "landed": tuple(sorted(self.landed)),
                "read": tuple(sorted(self.reads)), "state": self.state}

    def _free(self, page: int) -> None:
        self.pool.free(self.owned.pop(page))

    def _land(self, page: int) -> None:
        """DecodeReceive(page): the payload lands in the page decode owns for it; an aborting
        decode then frees that page (unless the leak fault keeps it)."""
        buf = self.pool.buffer()
        self.chan.recv_payload(buf)
        dst = self.owned.get(page)
        owned = dst is not None and self.pool.owns(dst)
        if owned:
            self.pool.write(dst, buf)
        else:                  # only reachable with the abort_frees_in_flight fault
            self.owned.pop(page, None)
        self.pending.remove(page)
        self.landed.add(page)
        if self.state == "aborting" and owned and not self._leak(page):
            self._free(page)
        self._step(P.DecodeReceive, page, recv=(Msg.DATA, page), owned=owned)

    def run(self) -> str:
        kind, n = self._recv()
        if kind != Msg.HELLO:
            raise RuntimeError(f"decode: expected HELLO, got {kind}")
        self.state = "waiting"
        self.log.init = self.snapshot()
        nxt = 0        # next page to allocate
        turn = 0
        while True:
            self._delay()
            if self.plan.decode_abort_at is not None and turn >= self.plan.decode_abort_at:
                return self._abort("decode")
            turn += 1
            while nxt < n and len(self.pending) < self.plan.window:    # allocate ahead
                page = self.pool.alloc()
                if page is None:
                    return self._abort("decode")
                self.owned[nxt] = page
                self.pending.append(nxt)
                self._step(P.DecodeAllocate, nxt, send=((Msg.ALLOC, nxt),))
                nxt += 1
            if len(self.reads) == n:
                self.state = "done"
                self._step(P.DecodeFinish, send=((Msg.DONE, NO_PAGE),))
                return "done"
            kind, page = self._recv()
            if kind == Msg.DATA:
                self._land(page)
                self.reads[page] = self.pool.read(self.owned[page])
                self._step(P.DecodeRead, page)
            elif kind == Msg.ABORT:     # prefill aborted: it sends nothing more
                self.aborted_by = "prefill"
                return self._close(kind)
            else:
                raise RuntimeError(f"decode: unexpected message {kind}")

    def _abort(self, reason: str) -> str:
        """DecodeAbort: free the landed pages, keep those whose copy may be in flight (the
        fault frees them too), ABORT; then land what prefill sent before its own ABORT."""
        self.aborted_by = reason
        keep = set() if FAULTS.abort_frees_in_flight else set(self.pending)
        self.kept = keep
        for p in list(self.owned):
            if p not in keep:
                self._free(p)
        self.state = "aborting"
        self._step(P.DecodeAbort, send=((Msg.ABORT, NO_PAGE),), kept=sorted(keep), reason=reason)
        while True:
            kind, page = self._recv()
            if kind == Msg.DATA:
                self._land(page)
            elif kind == Msg.ABORT:
                return self._close(kind)
            else:
                raise RuntimeError(f"decode: unexpected message {kind} while aborting")

    def _close(self, kind: int) -> str:
        """DecodeClose: prefill's ABORT follows every DATA it sent, so nothing is in flight:
        free everything (the leak fault keeps the pages kept for in-flight copies), CLOSED."""
        for p in list(self.owned):
            if not self._leak(p):
                self._free(p)
        self.state = "aborted"
        self._step(P.DecodeClose, recv=(kind, NO_PAGE), send=((Msg.CLOSED, NO_PAGE),))
        return f"aborted_by_{self.aborted_by}"

    def _leak(self, page: int) -> bool:
        return FAULTS.decode_leaks_on_abort and page in self.kept

    def finish_request(self) -> None:
        """The request that ran on the handed-over pages ends: its pages return to the pool."""
        for p in list(self.owned):
            self._free(p)


# ---------------------------------------------------------------------------- merging

def merge(*logs: list[LogEvent]) -> list[LogEvent]:
    """One causal order of the two endpoints' events (Lamport clock, prefill first on ties:
    events with equal clocks on the two sides are concurrent)."""
    out = [e for log in logs for e in log]
    return sorted(out, key=lambda e: (e.clock, e.side != "prefill"))


# ---------------------------------------------------------------------------- in-process

class ChannelTimeout(TimeoutError):
    """Nothing came from the peer within the channel's bound (its endpoint failed or hangs)."""


class LocalChannel:
    """One end of an in-process channel pair (two engines on threads of one process):
    FIFO queues, payloads copied on send as a wire transfer would. A receive waits at most
    `timeout_s` (as a gloo receive does): an endpoint whose peer raised is not left waiting."""

    def __init__(self, inbox, outbox, timeout_s: float = 30.0) -> None:
        self.inbox, self.outbox = inbox, outbox
        self.timeout_s = number_in("timeout_s", timeout_s, 0.0, lo_open=True)

    def send(self, kind: int, page: int, clock: int) -> None:
        self.outbox.put((kind, page, clock))

    def _get(self):
        import queue
        try:
            return self.inbox.get(timeout=self.timeout_s)
        except queue.Empty:
            raise ChannelTimeout(f"no message from the peer for {self.timeout_s:g} s "
                                 f"(its endpoint failed or hangs)") from None

    def recv(self) -> tuple[int, int, int]:
        return self._get()

    def send_payload(self, data) -> None:
        self.outbox.put(data.clone())

    def recv_payload(self, out) -> None:
        out.copy_(self._get())


def local_pair(timeout_s: float = 30.0) -> tuple[LocalChannel, LocalChannel]:
    """(prefill's end, decode's end) of an in-process channel; each receive waits at most
    `timeout_s`."""
    import queue
    a, b = queue.Queue(), queue.Queue()
    return LocalChannel(a, b, timeout_s), LocalChannel(b, a, timeout_s)
