"""Refinement map: the merged event log of the two handoff endpoints -> spec/PDHandoff.

The prefill and decode engines run in separate processes; each logs its steps
(`hicache.runtime.pd_handoff`) with a Lamport clock, the message the step consumed, the
messages it sent and a snapshot of its runtime state after the step. `merge` orders the two
logs causally (a receive after its send, FIFO per channel), so replaying the merged log is a
run of the spec in which each event is one engine's local step: the monitor checks the
action itself, with its page, and every invariant after it.

  ploc[i], plock, pstate    prefill's snapshot: the tier its cache reached for page i-1,
                            whether its request still holds the tree lock (the node's lock
                            counter), its endpoint state
  dalloc[i], dfree          decode's snapshot: page i-1 has a destination page that the pool
                            really owns; the pool allocator's free count
  dland, dread, dstate      decode's snapshot: pages landed, pages read, endpoint state
  p2d, d2p                  the messages sent and not yet consumed by a step, per direction,
                            in send order (a consuming step pops the head)
  sentUnloaded              ghost: pages whose PrefillSend event records a tier other than
                            device

Constants: NPages (the prefix's pages), NDecodeSlots (decode's pool capacity), bugs off.
`check_handoff` replays two logs through a `Monitor`; a violation raises ProtocolViolation
at the event whose step broke the spec.
"""
from __future__ import annotations

from hicache.monitors.generated import pd_handoff as spec
from hicache.monitors.runtime import Monitor, VerifyConfig
from hicache.protocol.vocabulary import PDHandoff as P
from hicache.runtime.pd_handoff import LogEvent, merge
from hicache.tla.values import mk_fcn

_ACTIONS = {a.value for a in P}
#: actions with a page parameter (the others take none)
_PAGED = {P.PrefillLoadBack, P.PrefillSend, P.DecodeAllocate, P.DecodeReceive, P.DecodeRead}


class PDHandoffMap:
    spec = spec

    def __init__(self, prefill_init: dict, decode_init: dict, n_pages: int, decode_slots: int,
                 actions: bool = True) -> None:
        self.n, self.slots = n_pages, decode_slots
        self.p, self.d = dict(prefill_init), dict(decode_init)
        self.p2d: list[tuple] = []
        self.d2p: list[tuple] = []
        self.sent_unloaded: set[int] = set()
        self.needs_prestate = actions      # False: the invariants only, after each step

    def constants(self) -> dict:
        return {"NPages": self.n, "NDecodeSlots": self.slots,
                "BugAbortFreesInFlight": False, "BugSendBeforeLoadBack": False}

    def bind(self, action: str, fields: dict):
        if action not in _ACTIONS:
            return None
        prefill = fields["side"] == "prefill"
        inbound, outbound = (self.d2p, self.p2d) if prefill else (self.p2d, self.d2p)
        if fields.get("recv") is not None and inbound:
            inbound.pop(0)      # the step consumed the head (its action checks which message)
        outbound.extend(tuple(m) for m in fields.get("sent", ()))
        if prefill:
            if action == P.PrefillSend and fields.get("tier") != "device":
                self.sent_unloaded.add(fields["page"])
            self.p = fields["snap"]
        else:
            self.d = fields["snap"]
        if not self.needs_prestate:
            return [(action, None)]
        return [(action, (fields["page"],) if action in _PAGED else ())]

    def state(self) -> dict:
        p, d = self.p, self.d
        pages = range(1, self.n + 1)
        owned, landed, read = set(d["owned"]), set(d["landed"]), set(d["read"])
        return {
            "ploc": mk_fcn({i: p["tiers"][i - 1] for i in pages}), "pstate": p["state"],
            "plock": bool(p["locked"]), "dstate": d["state"],
            "dalloc": mk_fcn({i: i - 1 in owned for i in pages}), "dfree": d["free"],
            "dland": mk_fcn({i: i - 1 in landed for i in pages}),
            "dread": mk_fcn({i: i - 1 in read for i in pages}),
            "p2d": tuple(self.p2d), "d2p": tuple(self.d2p),
            "sentUnloaded": frozenset(self.sent_unloaded),
        }


def check_handoff(prefill_init: dict, prefill_events: list[LogEvent], decode_init: dict,
                  decode_events: list[LogEvent], *, n_pages: int, decode_slots: int,
                  cfg: VerifyConfig | None = None, actions: bool = True) -> Monitor:
    """Replay the merged log of one handoff through the generated PDHandoff monitor (strict by
    default); returns the monitor, or raises ProtocolViolation at the faulty step."""
    rmap = PDHandoffMap(prefill_init, decode_init, n_pages, decode_slots, actions)
    mon = Monitor(rmap, cfg or VerifyConfig(mode="strict"))
    for e in merge(prefill_events, decode_events):
        mon(e.action, {"side": e.side, "page": e.page, "clock": e.clock, **e.info})
    return mon
