"""Is a recorded trace a behavior of the spec?

Each state must be a successor of the one before through some action of the spec, or equal
to it (stuttering); a step that is not one spec step is searched as up to `compound` spec
steps (a coarse runtime event, e.g. a multi-page move of the HostTier map). The first state
of a checker trace must be an initial state; a monitor's trace starts after the oldest event
it kept, so its first state is not checked.
"""
from __future__ import annotations

import enum
import itertools
import math
import time
from dataclasses import dataclass, field

from hicache.explain.options import Options
from hicache.explain.trace import Trace
from hicache.tla.checker import Checkable
from hicache.tla.compiler import UNSET


class StepStatus(enum.StrEnum):
    INITIAL = "initial"              # an initial state of the spec
    SPEC_STEP = "spec_step"          # one step of some spec action
    STUTTER = "stutter"              # no variable changed
    COMPOUND = "compound"            # several spec steps (a coarse runtime event)
    NOT_INITIAL = "not_initial"      # the first state is no initial state
    NOT_ALLOWED = "not_allowed"      # no spec action (sequence) leads here
    UNCHECKED = "unchecked"          # not checked (see the note)


@dataclass(slots=True)
class StepCheck:
    index: int
    status: StepStatus
    actions: list[str] = field(default_factory=list)   # the spec actions that explain the step
    note: str = ""


class _Steps:
    """Successors through the spec's actions, with the names of the actions producing them."""

    def __init__(self, ck: Checkable):
        self.ck = ck
        self.n = len(ck.model.variables)

    def successors(self, s: tuple) -> dict[tuple, list[str]]:
        out: dict[tuple, list[str]] = {}
        blank = [UNSET] * self.n
        for act in self.ck.actions:
            for pr in act.fn(s, blank, ()):
                if UNSET in pr:
                    continue
                names = out.setdefault(tuple(pr), [])
                if act.name not in names:
                    names.append(act.name)
        return out

    def explaining(self, s: tuple, t: tuple, first: bool = False) -> list[str]:
        """The actions that take s to t in one step: each evaluated with its primed
        variables bound to t's values, where `x' = e` is a test (as TLC checks a trace's
        step), so no successor is built. Enumerating them instead built every successor of
        s: DraftState's TransferLaunch alone has NIdx^2 per idle transfer (131,072 for a
        monitor's trace's constants, 32 s a state). `first`: the first such action only
        (the later ones are not evaluated)."""
        names = []
        for act in self.ck.actions:
            if act.name not in names and any(True for _ in act.fn(s, list(t), ())):
                names.append(act.name)
                if first:
                    break
        return names

    def initial(self, s: tuple, limit: int = 200_000) -> bool:
        blank = [UNSET] * self.n
        return any(tuple(pr) == s for pr in itertools.islice(self.ck.init(None, blank, ()), limit))

    def path(self, s: tuple, t: tuple, depth: int, budget: int, deadline: float = math.inf):
        """Actions of a shortest spec path s -> t of at most `depth` steps, within `budget`
        states; None when there is none; TIMED_OUT when the clock passed `deadline` first (a
        model with large constants can take seconds per expansion)."""
        frontier = {s: []}
        seen = {s}
        for _ in range(depth):
            nxt = {}
            for u, acts in frontier.items():
                if time.perf_counter() > deadline:
                    return TIMED_OUT
                for v, names in self.successors(u).items():
                    if v == t:
                        return acts + [names[0]]
                    if v not in seen and len(seen) < budget:
                        seen.add(v)
                        nxt[v] = acts + [names[0]]
            frontier = nxt
            if not frontier:
                break
        return None


#: `_Steps.path` ran out of time (neither a match nor a proof there is none)
TIMED_OUT = "timed out"


def near_init(ck: Checkable, t: tuple, deadline: float, limit: int = 1000) -> list[str] | None:
    """A shortest spec path's actions from an initial state to t when it is at most one
    step long ([]: t is initial; [A]: some initial state's step A leads to t), tested on
    each initial state with t's values bound (`_Steps.explaining`), until the clock passes
    `deadline`; None when neither is found, or when the spec has more than `limit` initial
    states (t could be one of those not looked at: then [A] would not be shortest). A
    breadth-first search builds every successor of the initial state instead: DraftState's
    131,072 launches, ~25 s, to find a state one step in."""
    steps = _Steps(ck)
    blank = [UNSET] * steps.n
    inits = [tuple(pr) for pr in itertools.islice(ck.init(None, blank, ()), limit + 1)]
    if t in inits:
        return []
    if len(inits) > limit:
        return None
    for s in inits:
        if time.perf_counter() > deadline:
            break
        names = steps.explaining(s, t, first=True)
        if names:
            return names
    return None


def check_behavior(trace: Trace, ck: Checkable, tuples: list, opts: Options, notes: list[str]):
    steps = _Steps(ck)
    # the compound matches share the search's wall-clock budget
    deadline = time.perf_counter() + opts.max_seconds
    # a monitor's action violation ends its trace at the event whose spec step its action
    # check rejected: no compound match of that step is searched (other steps leading to
    # the same state say nothing of the one the implementation took, and enumerating the
    # successors of successors took a minute for DraftState's traces)
    rejected = len(tuples) - 1 if trace.writer == "monitor" and trace.violation.kind == "action" else None
    checks: list[StepCheck] = []
    divergence = None
    for i, s in enumerate(tuples):
        if s is None:
            checks.append(StepCheck(i, StepStatus.UNCHECKED, note="the state does not record every variable"))
            continue
        if i == 0 or tuples[i - 1] is None:
            if i == 0 and trace.writer == "monitor":
                rs = trace.steps[0].runtime_step
                checks.append(StepCheck(i, StepStatus.UNCHECKED,
                                        note=f"first recorded state (after runtime event {rs}); earlier "
                                             f"events are not in the trace"))
            elif i == 0 and not steps.initial(s):
                checks.append(StepCheck(i, StepStatus.NOT_INITIAL, note="not an initial state of the spec"))
                divergence = divergence or {"step": 0, "action": None,
                                            "reason": "the first state is not an initial state of the spec"}
            else:
                checks.append(StepCheck(i, StepStatus.INITIAL if i == 0 else StepStatus.UNCHECKED))
            continue
        prev = tuples[i - 1]
        if s == prev:
            checks.append(StepCheck(i, StepStatus.STUTTER))
            continue
        try:
            names = steps.explaining(prev, s)
            if names:
                checks.append(StepCheck(i, StepStatus.SPEC_STEP, names))
                continue
            via = steps.path(prev, s, opts.compound, opts.compound_states, deadline) \
                if opts.compound > 1 and i != rejected else None
        except Exception as exc:  # noqa: BLE001 - a state outside the spec's domains (after a bad step)
            checks.append(StepCheck(i, StepStatus.UNCHECKED,
                                    note=f"the spec's actions cannot be evaluated on step {i - 1}: "
                                         f"{str(exc).splitlines()[0]}"))
            continue
        if via is TIMED_OUT:
            checks.append(StepCheck(i, StepStatus.UNCHECKED,
                                    note=f"not one spec step; no match of up to {opts.compound} steps found "
                                         f"within the time budget ({opts.max_seconds:g}s)"))
            continue
        if via is not None:
            checks.append(StepCheck(i, StepStatus.COMPOUND, via, note=f"{len(via)} spec steps"))
            continue
        act = trace.steps[i].action
        checks.append(StepCheck(i, StepStatus.NOT_ALLOWED,
                                note="no spec action leads here (the monitor's action check rejected it)"
                                if i == rejected else f"no spec action (nor up to {opts.compound} spec steps) "
                                                      f"leads here"))
        if divergence is None:
            divergence = {"step": i, "action": act,
                          "reason": f"the implementation took a step the spec does not allow at step {i} "
                                    f"(action {act})"}
    bad = [c for c in checks if c.status in (StepStatus.NOT_ALLOWED, StepStatus.NOT_INITIAL)]
    checked = [c for c in checks if c.status is not StepStatus.UNCHECKED]
    if bad:
        verdict = False
    elif checked and len(checked) >= len(checks) - 1:
        verdict = True
    else:
        verdict = None
        notes.append("too few states of the trace record every spec variable to check it against the spec")
    return checks, verdict, divergence
