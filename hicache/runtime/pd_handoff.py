"""Prefill-decode handoff of a cached prefix (spec/PDHandoff.tla), over any message channel.

Two endpoints exchange small int messages `(kind, page, clock)` and page payloads over a
`Channel` (FIFO per direction; `hicache.dist.pd_handoff` runs it on torch.distributed):

  prefill                                   decode
  HELLO(n) ----------------------------->
                                            DecodeAllocate(i); ALLOC(i)   (window of W pages)
  <------------------------------------------------------------- ALLOC(i)
  PrefillLoadBack(i) (storage->host->device, once, before the first send)
  PrefillSend(i): DATA(i) + page bytes ---->  DecodeReceive(i) (into the page it owns)
                                            DecodeRead(i) (only landed pages)
  <------------------------------------------------------------- DONE
  ACK ---------------------------------->  (both release everything)

Aborts. Decode aborting sends ABORT and keeps every page it asked for until prefill's ACK:
what prefill sent before reading the ABORT is still in flight and lands in a page decode still
owns (never freed under a copy: reference bug 12); DecodeAbort frees the rest. Prefill
aborting sends ABORT, keeps its prefix pinned until decode's ACK (every DATA it sent landed
before, the channel being FIFO), then releases. Either side answers the other's ABORT with
ACK and releases everything. Invariant: after `run()` returns, the endpoint holds no page
and no lock.

Each endpoint keeps an event log named by the spec's actions with Lamport clocks (messages
carry the clock), so the two logs merge into one causal order (`merge`); `check` evaluates
the spec's safety properties on the merged log (the seeded faults make them fail).
"""
from __future__ import annotations

import dataclasses
import enum
import random
from typing import Any, Protocol

from hicache.protocol.vocabulary import PDHandoff as P


class Msg(enum.IntEnum):
    HELLO = 1
    ALLOC = 2
    DATA = 3
    ABORT = 4
    ACK = 5
    DONE = 6
    CLOSED = 7     # decode, after its abort's ACK: every DATA landed (prefill may unpin)


class Channel(Protocol):
    """FIFO messages to the peer. `send`/`recv` carry (kind, page, clock); payloads follow
    their DATA header in the same order."""

    def send(self, kind: int, page: int, clock: int) -> None: ...

    def recv(self) -> tuple[int, int, int]: ...

    def send_payload(self, data) -> None: ...

    def recv_payload(self, out) -> None: ...


class Faults:
    """Seeded-bug switches (off by default; read on the path they affect only).
    `send_before_load_back`: prefill sends a page without waiting for its load-back (bug 11).
    `abort_frees_in_flight`: a decode abort frees pages whose copy may be in flight (bug 12)."""
    send_before_load_back = False
    abort_frees_in_flight = False


FAULTS = Faults()


@dataclasses.dataclass(slots=True, frozen=True)
class LogEvent:
    clock: int
    side: str          # "prefill" | "decode"
    action: str        # a PDHandoff action
    page: int | None   # spec page index (1-based), None for aborts
    info: dict


class Log:
    """An endpoint's events with its Lamport clock."""

    def __init__(self, side: str) -> None:
        self.side = side
        self.clock = 0
        self.events: list[LogEvent] = []

    def tick(self, seen: int = 0) -> int:
        self.clock = max(self.clock, seen) + 1
        return self.clock

    def add(self, action: P, page: int | None = None, **info: Any) -> None:
        self.events.append(LogEvent(self.tick(), self.side, action.value, page, info))


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """Random choices of one run (seeded). `abort_at`: the step at which the side aborts
    (None: never); `window`: decode's pages allocated ahead of the landed ones."""
    seed: int = 0
    prefill_abort_at: int | None = None
    decode_abort_at: int | None = None
    window: int = 2
    max_delay_s: float = 0.0

    @staticmethod
    def random(seed: int, n_pages: int) -> "Plan":
        rng = random.Random(seed)
        pick = lambda: rng.choice([None, None] + list(range(n_pages + 1)))  # noqa: E731
        return Plan(seed, pick(), pick(), rng.randint(1, 3), 0.002)


class PrefillEndpoint:
    """Prefill side. `source` provides the prefix: `tiers()` the tier of each page
    ("device"/"host"/"storage"), `load()` moves every page to device and returns the
    PrefillLoadBack steps done (page, tier reached) in order, `page_bytes(i)` reads device
    page i (0-based), `release(aborted)` drops the request's lock."""

    def __init__(self, chan: Channel, source, plan: Plan) -> None:
        self.chan, self.source, self.plan = chan, source, plan
        self.log = Log("prefill")
        self.rng = random.Random(plan.seed * 2 + 1)
        self.loaded = False
        self.sent: list[int] = []

    def _delay(self) -> None:
        if self.plan.max_delay_s:
            import time
            time.sleep(self.rng.uniform(0, self.plan.max_delay_s))   # perturbation, not sync

    def _recv(self) -> tuple[int, int]:
        kind, page, clock = self.chan.recv()
        self.log.tick(clock)
        return kind, page

    def _send(self, kind: Msg, page: int = -1) -> None:
        self.chan.send(int(kind), page, self.log.tick())

    def _ensure_loaded(self) -> None:
        if self.loaded:
            return
        self.loaded = True
        for page, tier in self.source.load():
            self.log.add(P.PrefillLoadBack, page + 1, tier=tier)

    def run(self) -> str:
        """Serve the handoff; returns "done" or "aborted" (and who aborted first)."""
        n = self.source.n_pages
        self._send(Msg.HELLO, n)
        step = 0
        outcome = "done"
        while True:
            kind, page = self._recv()
            self._delay()
            if kind == Msg.ALLOC:
                if self.plan.prefill_abort_at is not None and step >= self.plan.prefill_abort_at:
                    outcome = self._abort()
                    break
                step += 1
                late = FAULTS.send_before_load_back
                if not late:
                    self._ensure_loaded()      # happens-before: load-back, then send
                tier = self.source.tier_now(page)
                self.log.add(P.PrefillSend, page + 1, tier=tier)
                self._send(Msg.DATA, page)
                self.chan.send_payload(self.source.page_bytes(page))
                self.sent.append(page)
                if late and tier != "device":
                    self._ensure_loaded()
            elif kind == Msg.ABORT:      # decode aborted: stop sending, answer, release
                self.log.add(P.PrefillAbort, reason="decode")
                self._send(Msg.ACK)
                self._expect(Msg.CLOSED)     # our DATA in flight landed: unpin only now
                outcome = "aborted_by_decode"
                break
            elif kind == Msg.DONE:
                self._send(Msg.ACK)
                break
            else:
                raise RuntimeError(f"prefill: unexpected message {kind}")
        self.source.release(aborted=outcome != "done")
        self.log.events.append(LogEvent(self.log.tick(), "prefill", "Release", None, {"outcome": outcome}))
        return outcome

    def _abort(self) -> str:
        self.log.add(P.PrefillAbort, reason="prefill", sent=len(self.sent))
        self._send(Msg.ABORT)
        # keep the prefix pinned until decode acknowledges: every DATA sent lands before
        crossed = False
        while True:
            kind, _ = self._recv()
            if kind == Msg.ACK:
                if crossed:              # decode aborted too: it closes after our ACK
                    self._expect(Msg.CLOSED)
                return "aborted_by_prefill"
            if kind == Msg.ABORT:       # both aborted at once: answer, then wait for its ACK
                crossed = True
                self._send(Msg.ACK)
            # ALLOCs sent before decode saw our ABORT are dropped

    def _expect(self, want: Msg) -> None:
        kind, _ = self._recv()
        if kind != want:
            raise RuntimeError(f"prefill: expected {want.name}, got {kind}")


class DecodeEndpoint:
    """Decode side: a page allocator and a page store. `alloc()` one page or None,
    `free(page)`, `write(page, data)` lands a copy, `read(page)` returns its bytes,
    `buffer()` a receive buffer of one page."""

    def __init__(self, chan: Channel, pool, plan: Plan) -> None:
        self.chan, self.pool, self.plan = chan, pool, plan
        self.log = Log("decode")
        self.rng = random.Random(plan.seed * 2 + 2)
        self.owned: dict[int, int] = {}     # spec page (0-based) -> decode page
        self.pending: list[int] = []        # ALLOC sent, DATA not landed (may be in flight)
        self.reads: dict[int, Any] = {}     # spec page -> bytes read

    def _delay(self) -> None:
        if self.plan.max_delay_s:
            import time
            time.sleep(self.rng.uniform(0, self.plan.max_delay_s))

    def _recv(self) -> tuple[int, int]:
        kind, page, clock = self.chan.recv()
        self.log.tick(clock)
        return kind, page

    def _send(self, kind: Msg, page: int = -1) -> None:
        self.chan.send(int(kind), page, self.log.tick())

    def _land(self, page: int, aborted: bool) -> None:
        buf = self.pool.buffer()
        self.chan.recv_payload(buf)
        dst = self.owned.get(page)
        if dst is None:       # only reachable with the abort_frees_in_flight fault
            self.log.add(P.DecodeReceive, page + 1, owned=False)
            self.pending.remove(page)
            return
        self.pool.write(dst, buf)
        self.log.add(P.DecodeReceive, page + 1, owned=True)
        self.pending.remove(page)
        if aborted:
            self.pool.free(self.owned.pop(page))

    def run(self) -> str:
        kind, n = self._recv()
        if kind != Msg.HELLO:
            raise RuntimeError(f"decode: expected HELLO, got {kind}")
        nxt = 0        # next page to allocate
        step = 0
        while True:
            self._delay()
            if self.plan.decode_abort_at is not None and step >= self.plan.decode_abort_at:
                return self._abort()
            step += 1
            # allocate ahead, up to the window
            while nxt < n and len(self.pending) < self.plan.window:
                page = self.pool.alloc()
                if page is None:
                    return self._abort()
                self.owned[nxt] = page
                self.log.add(P.DecodeAllocate, nxt + 1)
                self.pending.append(nxt)
                self._send(Msg.ALLOC, nxt)
                nxt += 1
            if not self.pending:
                break
            kind, page = self._recv()
            if kind == Msg.DATA:
                self._land(page, aborted=False)
                self.log.add(P.DecodeRead, page + 1)
                self.reads[page] = self.pool.read(self.owned[page])
            elif kind == Msg.ABORT:     # prefill aborted: it sends nothing more
                return self._abort(peer=True)
            else:
                raise RuntimeError(f"decode: unexpected message {kind}")
        self._send(Msg.DONE)
        kind, _ = self._recv()
        if kind != Msg.ACK:
            raise RuntimeError(f"decode: expected ACK, got {kind}")
        for p in list(self.owned):      # the request runs; here its pages are then freed
            self.pool.free(self.owned.pop(p))
        return "done"

    def _abort(self, peer: bool = False) -> str:
        inflight = [] if peer else list(self.pending)   # prefill's ABORT follows all its DATA
        keep = set() if FAULTS.abort_frees_in_flight else set(inflight)
        for p in list(self.owned):
            if p not in keep:
                self.pool.free(self.owned.pop(p))
        self.log.add(P.DecodeAbort, None, kept=sorted(keep), reason="prefill" if peer else "decode")
        if peer:
            self._send(Msg.ACK)
            return "aborted_by_prefill"
        self._send(Msg.ABORT)
        while True:     # DATA sent before prefill read our ABORT still lands, then ACK
            kind, page = self._recv()
            if kind == Msg.DATA:
                self._land(page, aborted=True)
            elif kind == Msg.ACK:
                break
            elif kind == Msg.ABORT:     # both aborted at once
                self._send(Msg.ACK)
        # the ACK follows every DATA prefill sent: nothing is in flight any more
        for p in list(self.owned):
            self.pool.free(self.owned.pop(p))
        self._send(Msg.CLOSED)
        return "aborted_by_decode"


# ---------------------------------------------------------------------------- checking

def merge(*logs: list[LogEvent]) -> list[LogEvent]:
    """One causal order of the two endpoints' events (Lamport clock, prefill first on ties)."""
    out = [e for log in logs for e in log]
    return sorted(out, key=lambda e: (e.clock, e.side != "prefill"))


def check(events: list[LogEvent]) -> list[str]:
    """The spec safety properties violated by a merged log (empty: none). Evaluated from the
    events: SendAfterLoadBack (a page is sent only once its load-back reached device; the
    source stays pinned while in flight: the prefill releases only after the last landing),
    DecodeReadsTransferred, InFlightDestOwned (a landing copy finds its page owned)."""
    bad: list[str] = []
    on_device: set[int] = set()
    landed: set[int] = set()
    released = False

    def flag(name: str) -> None:
        if name not in bad:
            bad.append(name)
    for e in events:
        if e.action == P.PrefillLoadBack and e.info.get("tier") == "device":
            on_device.add(e.page)
        elif e.action == P.PrefillSend:
            if e.info.get("tier") != "device" and e.page not in on_device:
                flag("SendAfterLoadBack")
        elif e.action == P.DecodeReceive:
            if released:
                flag("SendAfterLoadBack")      # landed after the source was released
            if not e.info.get("owned", True):
                flag("InFlightDestOwned")
            landed.add(e.page)
        elif e.action == P.DecodeRead and e.page not in landed:
            flag("DecodeReadsTransferred")
        elif e.action == "Release" and e.side == "prefill":
            released = True
    return bad
