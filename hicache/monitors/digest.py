"""Cross-rank agreement of monitored state, carried by the collectives that already run.

At each cache check a rank appends two pairs to the MIN-reduced vector its collective
already carries (hicache.protocol.digest): the step code (which collective-bearing call
this is: its name and index) and the digest of its monitored state. After the reduction
each rank sees min x and -max x, so "every rank contributed the same x" is one comparison,
with no extra round trip. A mismatch in the step code means ranks are at different calls
(a rank skipped or added a collective: bugs 1 and 3); a mismatch in the state digest means
the ranks' monitored states diverged (bugs 2 and 4).

`LocalCollective` stands in for torch.distributed in one process: ranks contribute in turn,
and the k-th contributions of every rank are reduced together, the way a collective pairs
the k-th calls of each rank. Each contribution may carry a local payload (never sent: the
wire carries the four ints) so that, once a reduction disagrees, the ranks can say what
they contributed: `divergence` names the ranks, digest fields and elements (e.g. pages)
that differ, and `write_divergence_trace` writes the merged recent history of every rank as
an ITF trace that `hicache explain` reads (one lane per rank, the exchange as the violating
step).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from hicache.monitors.rt import Failure
from hicache.monitors.runtime import _jsonable
from hicache.protocol.digest import digest_of, pair, pair_agrees, step_code
from hicache.tla.values import Fcn, fmt

LOCATION = "hicache/monitors/digest.py"

#: the name of the violating step of a cross-rank trace (the reduction that disagreed)
EXCHANGE = "DigestExchange"


def state_digest(state: dict) -> int:
    """Digest of a (mapped) state: entries in name order, values in TLA+ notation."""
    return digest_of((k, fmt(v)) for k, v in sorted(state.items()))


#: bytes of a page id (`page_ids`): as wide as the state digest it feeds
PAGE_ID_BYTES = 8


def page_ids(tree) -> tuple[str, ...]:
    """A rank-independent identity of every page of `tree`, in `tree.nodes()` order (the
    DFS preorder the HostTier maps number pages in): BLAKE2b of the page's own token bytes,
    in hex. With the tree's shape (each page's parent page), equal ids on two ranks mean
    the same token sequence on every path.

    Hashes the page's own tokens, not the runtime's chained `Node.hashes`: those are filled
    lazily by the runtime, and a monitor that computed them would write to the nodes it
    observes; the shape already supplies the chaining. Never Python's hash(), which is
    salted per process."""
    pb = tree.pb
    out: list[str] = []
    for x in tree.nodes():
        key = memoryview(x.key)
        for i in range(x.n):
            out.append(hashlib.blake2b(key[i * pb:(i + 1) * pb], digest_size=PAGE_ID_BYTES).hexdigest())
    return tuple(out)


def contribution(name: str, index: int, state: dict) -> list[int]:
    """The four ints a rank appends to its MIN-reduced vector at a cache check."""
    return [*pair(step_code(name, index)), *pair(state_digest(state))]


def verdict(reduced: list[int]) -> Failure | None:
    """Decode the MIN-reduced contributions: None if all ranks agreed."""
    if not pair_agrees(reduced[0], reduced[1]):
        return Failure("SameCollectiveSequence", 1,
                       "every rank is at the same collective-bearing call (name, index)", LOCATION)
    if not pair_agrees(reduced[2], reduced[3]):
        return Failure("RankStateDigestsEqual", 1,
                       "every rank's monitored state has the same digest at a cache check", LOCATION)
    return None


@dataclass(frozen=True, slots=True)
class Contribution:
    """What one rank contributed to one exchange (kept locally; the wire carries `vector`)."""
    rank: int
    call: str          # the collective-bearing call (name)
    index: int         # how many such calls this rank made, this one included
    view: dict         # the rank-independent view of its monitored state that was digested

    @property
    def digest(self) -> int:
        return state_digest(self.view)

    @property
    def vector(self) -> list[int]:
        return contribution(self.call, self.index, self.view)

    @property
    def label(self) -> str:
        return f"{self.call}#{self.index}"


class LocalCollective:
    """Pairs the k-th contributions of `ranks` ranks and MIN-reduces them."""

    def __init__(self, ranks: int) -> None:
        if ranks < 1:
            raise ValueError("ranks: must be >= 1")
        self.ranks = ranks
        self.pending: list[list[tuple[list[int], object]]] = [[] for _ in range(self.ranks)]
        self.rounds = 0
        self.paired: list = []     # the payloads of the last reduction, by rank

    def contribute(self, rank: int, vec: list[int], payload: object = None) -> list[int] | None:
        """Add rank's next contribution; the reduced vector once every rank has one."""
        self.pending[rank].append((vec, payload))
        if all(self.pending):
            got = [p.pop(0) for p in self.pending]
            self.rounds += 1
            self.paired = [pl for _, pl in got]
            return [min(col) for col in zip(*(v for v, _ in got))]
        return None


def divergence(contribs: list[Contribution]) -> dict:
    """Which ranks disagree, on what: the largest group of ranks that contributed the same
    (call, digest) is the reference (ties: the group of the lowest rank); every other rank
    diverges. `fields` are the digest-view entries where some rank differs from the
    reference rank; `elements` (field -> positions, the first `_MAX_ELEMENTS`) where they
    differ, for the sequences and page-indexed functions (a page in the per-page fields;
    a position past the shorter sequence when the lengths differ); `calls` each rank's
    collective-bearing call."""
    groups: dict[tuple, list[int]] = {}
    for c in contribs:
        groups.setdefault((c.label, c.digest), []).append(c.rank)
    ref = max(groups.values(), key=lambda rs: (len(rs), -min(rs)))
    by_rank = {c.rank: c for c in contribs}
    ref_view = by_rank[min(ref)].view
    fields = sorted({k for c in contribs for k in set(c.view) | set(ref_view)
                     if c.rank not in ref and c.view.get(k) != ref_view.get(k)})
    elements: dict[str, list[int]] = {}
    for k in fields:
        at: set[int] = set()
        for c in contribs:
            if c.rank not in ref:
                at |= _positions(ref_view.get(k), c.view.get(k))
        if at:
            elements[k] = sorted(at)[:_MAX_ELEMENTS]
    return {"reference_rank": min(ref),
            "diverging_ranks": sorted(r for r in by_rank if r not in ref),
            "calls": {str(c.rank): c.label for c in contribs},
            "digests": {str(c.rank): f"{c.digest:016x}" for c in contribs},
            "fields": fields, "elements": elements}


#: positions listed per field in `divergence` (the first ones: a diverged subtree can
#: differ at every page of it, and the report should stay readable)
_MAX_ELEMENTS = 16


def _positions(a, b) -> set[int]:
    """Where two values of one digest-view field differ: the indices of sequences (past
    the shorter one when the lengths differ, the first such index only), the integer keys
    of functions (the page-indexed ones); nothing for scalars. (Integers only: the record
    goes into the trace's JSON as it is.)"""
    if isinstance(a, Fcn) and isinstance(b, Fcn):
        return {i for i in set(a.d) | set(b.d) if type(i) is int and a.d.get(i) != b.d.get(i)}
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        at = {i for i, (x, y) in enumerate(zip(a, b)) if x != y}
        if len(a) != len(b):
            at.add(min(len(a), len(b)))
        return at
    return set()


@dataclass(slots=True)
class RankEvent:
    """One event of one rank in the merged history of a group (`state`: the rank's mapped
    state after it, None when not mapped; `contribution`: set for an exchange call)."""
    rank: int
    action: str
    args: dict
    state: dict | None = None
    contribution: Contribution | None = None
    seq: int = 0               # position in the merged history (group-wide order)


def _by_rank(values: dict):
    """rank -> value as a TLA+ function (ITF #map with integer keys)."""
    return Fcn({r: v for r, v in sorted(values.items())})


def divergence_trace(variables: list[str], events: list[RankEvent], contribs: list[Contribution],
                     failure: Failure, div: dict) -> dict:
    """The ITF document of a cross-rank violation.

    Each state is the group after one event of one rank (`#meta.rank`, the action and its
    arguments): every variable is a function rank -> that rank's latest value, plus
    `collective` (rank -> the last collective-bearing call it made) and `view` (rank -> the
    digest view it contributed last). A rank's values before its first recorded event are
    those after it (the history is bounded). The last state is the exchange that
    disagreed (no rank: it is every rank's), whose arguments name the ranks; the states of
    the contributions paired in it carry `#meta.exchange`."""
    from hicache.tla.itf import encode
    ranks = sorted({e.rank for e in events} | {c.rank for c in contribs})
    cur: dict[int, dict] = {}
    for e in events:                      # each rank's earliest recorded state
        if e.state is not None and e.rank not in cur:
            cur[e.rank] = e.state
    calls = {r: "-" for r in ranks}
    views: dict[int, dict] = {}

    def record(meta: dict) -> dict:
        rec = {"#meta": meta}
        for v in variables:
            vals = {r: s[v] for r, s in cur.items() if v in s}
            if vals:
                rec[v] = encode(_by_rank(vals))
        rec["collective"] = encode(_by_rank(calls))
        if views:
            rec["view"] = encode(_by_rank({r: Fcn(dict(vw)) for r, vw in views.items()}))
        return rec
    states = []
    for e in events:
        if e.state is not None:
            cur[e.rank] = e.state
        if e.contribution is not None:
            calls[e.rank] = e.contribution.label
            views[e.rank] = _plain(e.contribution.view)
        meta = {"index": len(states), "step": e.seq, "rank": e.rank, "action": e.action,
                "args": {k: _jsonable(x) for k, x in e.args.items()}}
        if e.contribution is not None and any(e.contribution is c for c in contribs):
            meta["exchange"] = True          # a contribution to the exchange that disagreed
        states.append(record(meta))
    for c in contribs:                    # the exchange: every rank's paired contribution
        calls[c.rank] = c.label
        views[c.rank] = _plain(c.view)
    args = {"ranks": ranks, "diverging_ranks": div["diverging_ranks"]}
    states.append(record({"index": len(states), "step": (events[-1].seq + 1) if events else 0,
                          "action": EXCHANGE, "args": args}))
    return {"#meta": {"format": "ITF", "source": None, "module": "cross-rank", "ranks": ranks,
                      "violation": {"kind": "digest", "property": failure.property, "index": failure.index,
                                    "conjunct": failure.text, "location": failure.location,
                                    "error": failure.error, "action": EXCHANGE, "args": args,
                                    "divergence": div}},
            "vars": [*variables, "collective", "view"], "states": states}


def write_divergence_trace(vdir: str, doc: dict, step: int) -> tuple[str | None, str | None]:
    """Write `doc` under `vdir` as cross-rank-step<N>-<i>.itf.json: (path, None), or (None,
    why it could not be written)."""
    from hicache.monitors.runtime import write_trace_file
    return write_trace_file(vdir, f"cross-rank-step{step}", doc)


def _plain(view: dict) -> dict:
    """A digest view as TLA+ values (lists -> tuples)."""
    return {k: tuple(v) if isinstance(v, list) else v for k, v in view.items()}
