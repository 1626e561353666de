"""Explain a violation trace against its spec: where, what, why, and whose bug.

Given a trace (`hicache.explain.trace`), the spec it names and a model config (the trace's
own, `--config`, or the spec's CI model `X.cfg`, in that order; constants the trace records
override the config's):

  1. the first violating step: the first state where the violated invariant is false (for
     an action violation, the first step the spec does not allow);
  2. its action and arguments (as recorded, or recovered: the parameter binding of the
     spec action that produces the step);
  3. the failing conjunct, quoted from the spec with file:line (`conjunct.failing_part`);
  4. the state diff of the last steps up to it;
  5. whether the trace is a behavior of the spec: each state a successor of the one before
     through some action (a runtime event may be several spec steps: up to `compound`
     steps are searched), the first state an initial state (monitor traces start after
     the oldest recorded event, so theirs is not checked);
  6. the spec's own shortest path from an initial state to a state violating the same
     invariant (breadth-first, so shortest; bounded by `max_states`/`max_seconds`), or,
     for an action violation, to the state before the disallowed step.
The verdict: a step the spec does not allow, or an invariant the spec never violates under
the same constants, is an implementation bug; a trace that is a spec behavior and violates
the invariant is a spec/design bug.
"""
from __future__ import annotations

import dataclasses
import enum
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from hicache.explain.actions import action_def, closest_binding, recover_all_args, recover_args
from hicache.explain.behavior import StepCheck, StepStatus, check_behavior, near_init
from hicache.explain.conjunct import Finding, Part, display_path, failing_part, quote_location
from hicache.explain.options import Options
from hicache.explain.search import SpecSearch, search, search_invariant
from hicache.explain.trace import Trace, TraceError, load_trace, resolve
from hicache.tla.cfg import Config, load_cfg
from hicache.tla.checker import Checkable, build
from hicache.tla.compiler import Compiler, Model, OpDef
from hicache.tla.errors import TlaError
from hicache.tla.loader import Loader
from hicache.tla.values import Fcn, changes, fmt

__all__ = ["Explanation", "Options", "SpecSearch", "StepCheck", "StepStatus", "Verdict", "explain"]


class Verdict(enum.StrEnum):
    IMPLEMENTATION = "implementation"
    SPEC = "spec"
    UNKNOWN = "unknown"


@dataclass
class Explanation:
    trace: Trace
    spec: str | None                 # displayed spec path
    config: str | None               # displayed config path
    constants_source: str            # "trace" | "config" | "none"
    violated: str | None
    kind: str | None
    first_violating_step: int | None
    action: str | None
    args: dict
    finding: Finding | None
    diff: list[dict]
    step_checks: list[StepCheck]
    trace_is_spec_behavior: bool | None
    divergence: dict | None
    spec_search: SpecSearch | None
    verdict: Verdict
    verdict_text: str
    states: list[dict[str, str]]     # per step: variable -> TLA+ text
    changed: list[list[str]]         # per step: variables changed from the step before
    notes: list[str] = field(default_factory=list)
    ranks: dict | None = None        # cross-rank: diverging ranks, their calls, differing fields
    search_constants: dict[str, str] | None = None   # the model the spec search used

    @property
    def trace_length(self) -> int:
        return len(self.trace.steps)


# ====================================================================== model
def _config(trace: Trace, opts: Options, spec: Path, notes: list[str]) -> tuple[Config | None, str | None]:
    if opts.config:
        return load_cfg(opts.config), opts.config
    if trace.config is not None:
        return load_cfg(trace.config), str(trace.config)
    default = spec.with_suffix(".cfg")
    if default.is_file():
        if trace.constants is None and load_cfg(default).constants:
            notes.append(f"the trace records no model constants: {display_path(str(default))} (the spec's CI "
                         f"model) is assumed; pass --config to choose another")
        return load_cfg(default), str(default)
    return None, None


def _state_tuple(model_vars: list[str], values: dict) -> tuple | None:
    if not all(v in values for v in model_vars):
        return None
    return tuple(values[v] for v in model_vars)


# ====================================================================== the explanation
def _fmt_states(trace: Trace) -> tuple[list[dict[str, str]], list[list[str]]]:
    states, changed = [], []
    prev = None
    for st in trace.steps:
        states.append({v: fmt(st.values[v]) for v in trace.variables if v in st.values})
        changed.append([] if prev is None else
                       [v for v in trace.variables if v in st.values and v in prev and st.values[v] != prev[v]])
        prev = st.values
    return states, changed


def _diff(trace: Trace, upto: int, n: int) -> list[dict]:
    out = []
    for j in range(max(1, upto - n + 1), upto + 1):
        a, b = trace.steps[j - 1].values, trace.steps[j].values
        ch: dict[str, list[str]] = {}
        for v in trace.variables:
            if v in a and v in b:
                ch.update(changes(v, a[v], b[v]))
        out.append({"step": j, "action": trace.steps[j].action, "changes": ch})
    return out


def explain(path: str | Path, opts: Options | None = None) -> Explanation:
    opts = opts or Options()
    trace = load_trace(path)
    notes: list[str] = []
    states, changed = _fmt_states(trace)
    v = trace.violation
    kind, violated = v.kind, v.property
    spec = Path(opts.spec) if opts.spec else trace.spec
    base = dict(trace=trace, spec=display_path(str(spec)) if spec else trace.spec_named, config=None,
                constants_source="none", violated=violated, kind=kind, action=v.action, args=dict(v.args),
                finding=None, step_checks=[], trace_is_spec_behavior=None, divergence=None,
                spec_search=None, states=states, changed=changed, notes=notes)
    last = len(trace.steps) - 1
    base["finding"] = _recorded_finding(trace)
    _verify_notes(trace, notes)
    if kind == "digest":
        return _finish(_explain_ranks(trace, base, last, opts), opts)
    if spec is None or not spec.is_file():
        notes.append(f"spec {trace.spec_named or '(not recorded)'} not found: pass --spec; the report uses "
                     f"only what the trace records")
        return _finish(Explanation(first_violating_step=last, diff=_diff(trace, last, opts.diff_steps),
                                   verdict=Verdict.UNKNOWN, verdict_text="", **base), opts)
    _check_spec_matches(trace, spec, "--spec" if opts.spec else "the spec the trace names (#meta.source)",
                        notes)
    cfg, cfg_path = _config(trace, opts, spec, notes)
    if cfg is None:
        notes.append("no model config (none recorded, no --config, no X.cfg beside the spec)")
        return _finish(Explanation(first_violating_step=last, diff=_diff(trace, last, opts.diff_steps),
                                   verdict=Verdict.UNKNOWN, verdict_text="", **base), opts)
    base["config"] = display_path(cfg_path)
    constants = dict(cfg.constants)
    if trace.constants is not None:
        constants.update(trace.constants)
        base["constants_source"] = "trace"
    else:
        base["constants_source"] = "config"
    model_constants = dict(cfg.constants)
    cfg = dataclasses.replace(cfg, constants=constants)
    # the spec search runs on the trace's parameters, bounded by the model's sizes
    search_notes: list[str] = []
    search_cfg = dataclasses.replace(cfg, constants=_search_constants(model_constants, trace.constants,
                                                                      search_notes))
    base["search_constants"] = {k: fmt(x) for k, x in sorted(search_cfg.constants.items())}
    try:
        ck = build(spec, cfg)
    except TlaError as exc:
        if base["constants_source"] == "trace":
            _blame_constants(trace, spec, cfg, model_constants, exc)
        raise
    _check_step_actions(trace, ck)
    base["finding"] = _recorded_finding(trace, ck)
    model, comp = ck.model, Compiler(ck.model)
    tuples = [_state_tuple(model.variables, st.values) for st in trace.steps]
    constants_fit = True
    if base["constants_source"] == "config" and trace.writer != "check":
        constants_fit = _constants_fit(ck, comp, tuples, notes)
    elif base["constants_source"] == "trace" and trace.writer == "monitor":
        constants_fit = _states_fit(ck, comp, tuples, notes)

    if trace.writer != "monitor" and constants_fit:
        recover_all_args(trace, ck, comp, tuples)

    # 1. the first violating step
    inv_def, first = None, None
    if kind not in ("action", "digest"):
        # with constants that do not fit the trace, evaluating on its states would mislead:
        # the definition is still looked up for the spec search
        inv_def, first = _first_invariant_violation(ck, comp, tuples if constants_fit else [], violated, cfg)
        if inv_def is not None:
            violated, kind = inv_def.name, kind or "invariant"
    # 5. behavior check (needs the right constants, and events that are spec steps)
    # a monitor whose map reports compound steps: an action violation is a guard it checked
    # in its own (tree) form, whose recorded finding is the explanation
    compound = trace.verify is not None and trace.verify.get("action_checks") is False
    if compound:
        checks = [StepCheck(i, StepStatus.UNCHECKED, note="compound runtime event") for i in range(len(tuples))]
        is_beh, divergence = None, None
        notes.append("the monitor's refinement map reports every runtime event as a compound step "
                     "(it checks the invariants after each event, and the actions' guards its map "
                     "has in tree form on the state before it), so the trace is not checked step by "
                     "step against the spec's actions")
    elif constants_fit:
        checks, is_beh, divergence = check_behavior(trace, ck, tuples, opts, notes)
    else:
        checks = [StepCheck(i, StepStatus.UNCHECKED, note="constants unknown") for i in range(len(tuples))]
        is_beh, divergence = None, None
    base.update(step_checks=checks, trace_is_spec_behavior=is_beh, divergence=divergence,
                violated=violated, kind=kind)
    if inv_def is not None and first is not None:
        k = first
    elif kind == "action" and divergence is not None and divergence["step"] > 0:
        k = divergence["step"]
    else:
        k = last
    base["action"] = trace.steps[k].action if k > 0 or trace.steps[k].action else None
    base["args"] = dict(trace.steps[k].args) if trace.steps[k].args else {}
    if k == last and v.args and not base["args"]:
        base["args"] = dict(v.args)

    # 2-3. arguments and the failing conjunct
    act_def = action_def(ck, base["action"])
    s_prev = tuples[k - 1] if k > 0 else None
    if act_def is not None and s_prev is not None and tuples[k] is not None and not base["args"]:
        got = recover_args(comp, act_def, s_prev, tuples[k])
        if got is not None:
            base["args"] = {p: fmt(a) for (p, _), a in zip(act_def.params, got)}
    if inv_def is not None and first is not None:
        f = failing_part(comp, inv_def, tuples[k])
        if f is not None:
            base["finding"] = f
    elif kind == "action" and act_def is not None and s_prev is not None and tuples[k] is not None \
            and constants_fit and not compound:
        f = failing_part(comp, act_def, s_prev, tuples[k], closest_binding(comp, act_def, s_prev, tuples[k]))
        if f is not None:
            base["finding"] = f

    # 6. the spec's own shortest path
    if inv_def is not None:
        found = search_invariant(spec, search_cfg, violated, opts)
        notes.extend(search_notes)
    elif compound and kind == "action":
        # a guard checked in tree form on a map's numbering: the chain the spec's search
        # would look for is not the shape of these states
        found = SpecSearch("-", "skipped", note="the monitor checked this action's guard in its tree form on a "
                                                "compound event (the recorded finding names the witness)")
    elif kind == "action" and constants_fit and s_prev is not None:
        # an exact state is searched for: without the config's VIEW and SYMMETRY, which merge
        # a state with one seen before it (its successors are the same up to the merge, but
        # the target test would run on the first one only: a symmetric twin visited first
        # hid the target, "none"). A view is also evaluated at every state (PPSync's ranks'
        # bag of completion sets: most of a search's time, for no merge at one rank).
        # The trace's own steps before k that the behavior check found to be spec steps
        # already lead to the pre-state: what is left to search for is the first state of
        # that run, shallower (a monitor's window starts deep in a run: PPSync's pre-state
        # 37 states in, past the budget, DraftState's behind 131,072 launches a state).
        sck = build(spec, dataclasses.replace(cfg, invariants=[], view=None, symmetry=None))
        j = _spec_run_start(checks, tuples, k - 1)
        target = tuples[j]
        sck.invariants = [("pre-state", lambda st, pr, env: st != target)]
        what = f"the state before step {k} (where {base['action']} was taken)"
        if j < k - 1:
            what = f"step {j}'s state, from which the trace's own spec steps {j + 1}..{k - 1} reach {what}"
        t0 = time.perf_counter()
        first = near_init(sck, target, t0 + opts.max_seconds)
        if first is not None:
            found = SpecSearch(what, "found", length=len(first) + 1, actions=first, seconds=time.perf_counter() - t0,
                               note="one step from an initial state" if first else "an initial state")
        else:       # (in what is left of the time budget)
            left = opts.max_seconds - (time.perf_counter() - t0)
            found = search(sck, what, dataclasses.replace(opts, max_seconds=left)) if left > 0 else \
                SpecSearch(what, "budget", seconds=time.perf_counter() - t0,
                           note=f"stopped at the budget ({opts.max_seconds:g}s, testing the initial states' steps)")
    elif kind == "deadlock":
        sck = build(spec, dataclasses.replace(cfg, invariants=[], check_deadlock=True))
        found = search(sck, "a deadlock", opts, want=("deadlock",))
    else:
        found = SpecSearch("-", "skipped", note="no invariant to search for (or constants unknown)")
    base["spec_search"] = found
    return _finish(Explanation(first_violating_step=k, diff=_diff(trace, k, opts.diff_steps),
                               verdict=Verdict.UNKNOWN, verdict_text="", **base), opts)


#: step checks whose step the spec takes (from the state before it to the one after)
_SPEC_TAKES = frozenset({StepStatus.SPEC_STEP, StepStatus.STUTTER, StepStatus.COMPOUND})


def _spec_run_start(checks: list[StepCheck], tuples: list, i: int) -> int:
    """The earliest state j <= i from which every step of the trace up to state i is one the
    spec takes (spec steps, stutters, compounds of spec steps): a spec path to state j is
    one to state i."""
    while i > 0 and checks[i].status in _SPEC_TAKES and tuples[i - 1] is not None:
        i -= 1
    return i


def _check_spec_matches(trace: Trace, spec: Path, how: str, notes: list[str]) -> None:
    """A trace paired with another spec would be evaluated on states of the wrong shape and
    quote locations that are not about it: the trace's module, variables, violated property
    (and a violated action) must be the spec's. TraceError naming both otherwise."""
    loader = Loader([spec.parent])
    root = loader.load_file(spec)
    model = Model(loader, root, {})     # symbolic: the names are known without constants
    shown = display_path(str(spec))
    recorded = trace.meta.get("module")
    if recorded is not None and recorded != root.name:
        raise TraceError(trace.path, "#meta.module", f"the trace is of module {recorded}, but {how} {shown} is "
                                                     f"module {root.name}; pass --spec with {recorded}'s spec")
    named = display_path(str(trace.spec)) if trace.spec is not None else trace.spec_named
    of = f" (the trace names {named})" if named and how == "--spec" else ""
    unknown = [v for v in trace.variables if v not in model.variables]
    if unknown:
        what = "is not a variable" if len(unknown) == 1 else "are not variables"
        raise TraceError(trace.path, "vars", f"{', '.join(unknown)} {what} of {how} {shown}{of} (module "
                                             f"{root.name}: VARIABLES {', '.join(model.variables)}); the trace "
                                             f"is of another spec: pass its own with --spec")
    v = trace.violation
    if v.property is not None and v.kind not in ("runtime", "digest"):
        where = "#meta.violation.property" if trace.writer == "monitor" else "#meta.violated"
        d = model.root_scope.entries.get(v.property)
        if v.kind == "action":
            if not isinstance(d, OpDef) or d.is_instance or d.is_fn:
                raise TraceError(trace.path, where, f"{v.property} is not an action of {how} {shown}{of} "
                                                    f"(module {root.name})")
        elif not isinstance(d, OpDef):
            raise TraceError(trace.path, where, f"{v.property} is not defined in {how} {shown}{of} "
                                                f"(module {root.name})")
    declared = {k for k, e in model.root_scope.entries.items() if isinstance(e, tuple) and e[0] == "const"}
    extra = sorted(k for k in trace.constants or {} if k not in declared)
    if extra:
        what = "is not a constant" if len(extra) == 1 else "are not constants"
        notes.append(f"#meta.constants: {', '.join(extra)} {what} of {shown} (module {root.name}); ignored")


def _blame_constants(trace: Trace, spec: Path, cfg: Config, model: dict, exc: TlaError) -> None:
    """The spec does not build with the trace's recorded constants: when it builds with the
    model's alone, the recorded constant that breaks it (an ASSUME, a type) is the cause,
    and the error names that trace field, not only the spec line that rejected it.
    Returns (the caller re-raises `exc`) when the model itself does not build."""
    def builds(constants: dict) -> TlaError | None:
        try:
            build(spec, dataclasses.replace(cfg, constants=constants))
        except TlaError as e:
            return e
        return None
    if builds(model) is not None:
        return
    for k, x in sorted((trace.constants or {}).items()):
        err = builds(dict(model, **{k: x}))
        if err is not None:
            raise TraceError(trace.path, f"#meta.constants.{k}", f"{fmt(x)} does not fit the spec "
                                                                 f"({str(err).splitlines()[0]})") from None
    raise TraceError(trace.path, "#meta.constants", f"the recorded constants together do not fit the spec "
                                                    f"({str(exc).splitlines()[0]})") from None


def _check_step_actions(trace: Trace, ck: Checkable) -> None:
    """`hicache check` names each step by a spec action: one the spec does not have means
    another spec (a monitor's steps may name runtime events, and are not checked)."""
    if trace.writer != "check":
        return
    known = {a.name for a in ck.actions} | {k for k, d in ck.model.root_scope.entries.items() if isinstance(d, OpDef)}
    for st in trace.steps:
        if st.action is not None and st.action not in known:
            raise TraceError(trace.path, f"states[{st.index}].#meta.action", f"{st.action} is not an action of "
                                                                           f"{display_path(str(ck.model.root.file))}")


#: how a monitor's map marks the witness of a conjunct it checks in its own (tree) form
TREE_FORM = "  [tree form: "


def _recorded_finding(trace: Trace, ck: Checkable | None = None) -> Finding | None:
    """The conjunct the trace's writer recorded (a monitor's generated check), if any; its
    text re-quoted from the spec at the recorded location (the writer may flatten it)."""
    v = trace.violation
    if not v.conjunct:
        return None
    text = v.conjunct
    # a map's own form of the conjunct (tree form) appends its witness: kept after the quote
    text, sep, witness = text.partition(TREE_FORM)
    m = re.fullmatch(r"(.+):(\d+):(\d+)", v.location or "")
    where = resolve(m.group(1), Path(trace.path).parent) if m and ck is not None else None
    if where is not None:
        for mod in ck.model.loader.modules.values():
            if Path(mod.file).resolve() == where.resolve():
                text = quote_location(mod.file, mod.ast, int(m.group(2)), int(m.group(3))) or text
                break
    if sep:
        text = f"{text}\n{TREE_FORM.strip()} {witness}"
    p = Part(text, v.location or "")
    return Finding(conjunct=p, top=p)


def _constants_fit(ck: Checkable, comp: Compiler, tuples: list, notes: list[str]) -> bool:
    """With assumed constants, the trace's states must at least be well typed (TypeOK)."""
    d = ck.model.root_scope.entries.get("TypeOK")
    if not isinstance(d, OpDef) or d.params:
        return True
    code = comp.def_code(d, "value", "state", False, d.node)[0]
    for i, s in enumerate(tuples):
        if s is None:
            continue
        try:
            ok = code(s, None, ()) is True
        except Exception:  # noqa: BLE001 - a value outside the assumed domains
            ok = False
        if not ok:
            notes.append(f"the trace's states do not fit the assumed constants (TypeOK is false at step {i}): "
                         f"the trace is not evaluated against the spec (the conjunct is the one the trace "
                         f"records) and the spec search uses the assumed model; record the constants in "
                         f"the trace or pass --config")
            return False
    return True


def _states_fit(ck: Checkable, comp: Compiler, tuples: list, notes: list[str]) -> bool:
    """With the trace's own constants: a monitor records the constants at the violation, and
    a map's constants may grow with the runtime (HostTier: NNodes follows the tree), so the
    states recorded under other constants (TypeOK false) are left out (set to None). False
    when the violating (last) state itself does not fit."""
    d = ck.model.root_scope.entries.get("TypeOK")
    if not isinstance(d, OpDef) or d.params:
        return True
    code = comp.def_code(d, "value", "state", False, d.node)[0]
    dropped = 0
    for i, s in enumerate(tuples):
        if s is None:
            continue
        try:
            ok = code(s, None, ()) is True
        except Exception:  # noqa: BLE001 - a value outside the recorded domains
            ok = False
        if not ok:
            tuples[i] = None
            dropped += 1
    if tuples and tuples[-1] is None:
        notes.append("the violating state does not fit the constants the trace records (TypeOK is false): "
                     "the conjunct is the one the trace records")
        return False
    if dropped:
        notes.append(f"{dropped} of {len(tuples)} states were recorded under other constants than the ones at "
                     f"the violation (the runtime's model grew) and are not evaluated against the spec")
    return True


def _search_constants(model: dict, recorded: dict | None, notes: list[str]) -> dict:
    """The constants of the spec search: the trace's where they lie within the model (an
    integer no larger, a subset of a set; any other value, e.g. a bug flag, as recorded),
    else the model's, so the search stays on the trace's parameters and within the model's
    bounds (a runtime's sizes, dozens of pages and slots, are far beyond a breadth-first
    search)."""
    if not recorded:
        return dict(model)
    out, clamped = dict(model), []
    for k, t in recorded.items():
        m = model.get(k)
        if m is None:
            out[k] = t
        elif type(t) is int and type(m) is int:
            out[k] = t if t <= m else m
            if t > m:
                clamped.append(f"{k} = {t} -> {m}")
        elif isinstance(t, frozenset) and isinstance(m, frozenset):
            out[k] = t if t <= m else m
            if not t <= m:
                clamped.append(f"{k} = {fmt(t)} -> {fmt(m)}")
        else:
            out[k] = t
    if clamped:
        notes.append("the spec search uses the trace's constants bounded by the model's: " + ", ".join(clamped))
    return out


def _verify_notes(trace: Trace, notes: list[str]) -> None:
    v = trace.verify
    if not v:
        return
    if v.get("mode") == "sample":
        notes.append(f"the monitor ran in sample mode (rate {v.get('sample_rate')}, seed {v.get('seed')}): the "
                     f"trace holds the sampled steps only, so the violation happened at or before its first "
                     f"violating state; rerun with HICACHE_VERIFY=strict and the same seed to stop at the step")


def _rank_divergence(trace: Trace) -> dict | None:
    """Which ranks diverged on what, recomputed from the exchange (the last state): its
    `collective` (rank -> call) and `view` (rank -> digest view); the writer's record when
    the state lacks them. The reference is the largest group of ranks that agree (ties: the
    group of the lowest rank)."""
    st = trace.steps[-1].values
    coll, view = st.get("collective"), st.get("view")
    rec = trace.violation.divergence
    if not isinstance(coll, Fcn) or not isinstance(view, Fcn):
        if rec is None:
            return None
        return {"ranks": sorted(int(r) for r in rec.get("calls", {})), "reference_rank": rec.get("reference_rank"),
                "diverging_ranks": rec.get("diverging_ranks", []), "calls": dict(rec.get("calls", {})),
                "fields": list(rec.get("fields", [])), "values": {}, "same_call": len(set(
                    rec.get("calls", {}).values())) <= 1}
    ranks = sorted(coll.d)
    groups: dict = {}
    for r in ranks:
        groups.setdefault((coll.d[r], view.d.get(r)), []).append(r)
    ref = max(groups.values(), key=lambda rs: (len(rs), -min(rs)))
    r0 = min(ref)
    rv = view.d.get(r0)
    fields: list[str] = []
    values: dict[str, dict[str, str]] = {}
    for r in ranks:
        if r in ref or not isinstance(view.d.get(r), Fcn) or not isinstance(rv, Fcn):
            continue
        for k in sorted(set(view.d[r].d) | set(rv.d)):
            a, b = rv.d.get(k), view.d[r].d.get(k)
            if a != b:
                if k not in values:
                    fields.append(k)
                    values[k] = {str(r0): _short(a)}
                values[k][str(r)] = _short(b)
    return {"ranks": ranks, "reference_rank": r0, "diverging_ranks": [r for r in ranks if r not in ref],
            "calls": {str(r): coll.d[r] for r in ranks}, "fields": fields, "values": values,
            "same_call": len({coll.d[r] for r in ranks}) == 1}


def _short(v, n: int = 160) -> str:
    t = "(absent)" if v is None else fmt(v)
    return t if len(t) <= n else t[:n - 3] + "..."


def _explain_ranks(trace: Trace, base: dict, last: int, opts: Options) -> Explanation:
    """A cross-rank violation: no spec (the property is the exchange's, hicache/monitors/
    digest.py); the violating step is the exchange, the last state."""
    st = trace.steps[last]
    base.update(action=st.action, args=dict(st.args) or dict(trace.violation.args),
                ranks=_rank_divergence(trace), spec=None)
    return Explanation(first_violating_step=last, diff=_diff(trace, last, opts.diff_steps),
                       verdict=Verdict.UNKNOWN, verdict_text="", **base)


def _first_invariant_violation(ck: Checkable, comp: Compiler, tuples: list, violated: str | None, cfg: Config):
    """(definition, first index where it is false) of the violated invariant; when the trace
    does not name one, the first of the config's invariants that some state violates."""
    names = [violated] if violated else list(cfg.invariants)
    best = (None, None)
    for name in names:
        d = ck.model.root_scope.entries.get(name)
        if not isinstance(d, OpDef) or d.params:
            continue
        code = comp.def_code(d, "value", "state", False, d.node)[0]
        for i, s in enumerate(tuples):
            if s is None:
                continue
            try:
                val = code(s, None, ())
            except Exception:  # noqa: BLE001 - unevaluable here: keep looking
                continue
            if val is False:
                if best[1] is None or i < best[1]:
                    best = (d, i)
                break
        if violated and best[0] is None:
            return d, None
    return best


def _finish(e: Explanation, opts: Options) -> Explanation:
    s = e.spec_search
    if e.kind == "digest" and e.ranks is not None:
        e.verdict = Verdict.IMPLEMENTATION
        e.verdict_text = _ranks_verdict(e.ranks)
    elif e.kind == "runtime":
        loc = e.finding.conjunct.location if e.finding else "the monitor"
        e.verdict = Verdict.IMPLEMENTATION
        e.verdict_text = (f"the runtime property {e.violated} ({loc}), which the monitor checks beside the "
                          f"spec's invariants, failed at step {e.first_violating_step}: the bug is in the "
                          f"implementation")
    elif e.trace_is_spec_behavior is False and e.divergence:
        e.verdict = Verdict.IMPLEMENTATION
        e.verdict_text = e.divergence["reason"] + ": the bug is in the implementation"
    elif e.trace_is_spec_behavior is True and e.kind in ("invariant", "property") and e.violated:
        e.verdict = Verdict.SPEC
        e.verdict_text = (f"the trace is a behavior of the spec and violates {e.violated}: the bug is in the "
                          f"spec/design")
    elif e.trace_is_spec_behavior is True and e.kind == "deadlock":
        e.verdict = Verdict.SPEC
        e.verdict_text = ("the trace is a behavior of the spec and ends in a deadlock (no action of the spec "
                          "is enabled): the bug is in the spec/design")
    elif e.kind in ("invariant", "property") and s is not None and s.status == "none":
        e.verdict = Verdict.IMPLEMENTATION
        model = ", ".join(f"{k} = {v}" for k, v in (e.search_constants or {}).items())
        where = f"the searched constants {model}" if model else "the model"
        e.verdict_text = (f"the spec never violates {e.violated} under {where} ({s.distinct} states, the whole "
                          f"state space): the implementation reached a state the spec cannot; the bug is in "
                          f"the implementation")
    elif e.kind == "action":
        e.verdict = Verdict.IMPLEMENTATION
        e.verdict_text = (f"the monitor's check of action {e.violated or e.action} rejected the step: the "
                          f"implementation took a step the spec does not allow")
    else:
        e.verdict = Verdict.UNKNOWN
        e.verdict_text = "not enough information to tell whether the bug is in the implementation or the spec"
    return e


def _ranks_verdict(r: dict) -> str:
    div = ", ".join(f"rank {x}" for x in r["diverging_ranks"]) or "no rank"
    ref = r["reference_rank"]
    if not r["same_call"]:
        calls = ", ".join(f"rank {k} at {c}" for k, c in sorted(r["calls"].items(), key=lambda kv: int(kv[0])))
        return (f"{div} reached this exchange at a different collective-bearing call than rank {ref} ({calls}): "
                f"a rank skipped or added a collective on a rank-local condition; the bug is in the "
                f"implementation")
    fields = ", ".join(r["fields"]) or "(the digests differ)"
    return (f"{div} contributed a different monitored state than rank {ref} at the same call; the digest "
            f"fields that differ: {fields}: a rank-local decision changed the rank's state; the bug is in "
            f"the implementation")
