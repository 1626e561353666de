"""Which spec action, with which arguments, a recorded step is.

A trace from `hicache check` names each step's action but not its arguments; a monitor's
names the runtime event and its fields, not the spec's parameters. The binding is found by
trying the atoms of the two states (integers, strings, model values) as parameter values:
the action evaluated as a predicate over the pair (primed variables read the second state)
must hold. A parameter ranging over sets or functions is not recovered.
"""
from __future__ import annotations

import itertools

from hicache.explain.conjunct import conjunct_count_true
from hicache.explain.trace import Trace, lane_of
from hicache.tla.checker import Checkable
from hicache.tla.compiler import Compiler, OpDef
from hicache.tla.values import Fcn, ModelValue, fmt


def _atoms(v, out: set) -> None:
    """Ints, strings and model values inside a value (candidate action parameters)."""
    if type(v) in (int, str, ModelValue):
        out.add(v)
    elif isinstance(v, Fcn):
        for k, x in v.d.items():
            _atoms(k, out)
            _atoms(x, out)
    elif isinstance(v, (tuple, frozenset)):
        for x in v:
            _atoms(x, out)


def action_def(ck: Checkable, name: str | None) -> OpDef | None:
    if not name:
        return None
    d = ck.model.root_scope.entries.get(name)
    if isinstance(d, OpDef) and not d.is_instance and not d.is_fn:
        return d
    return None


def _bindings(d: OpDef, s: tuple, t: tuple, limit: int = 50_000):
    """Candidate parameter bindings for `d` on the step s -> t (atoms of both states)."""
    atoms: set = set()
    _atoms(s, atoms)
    _atoms(t, atoms)
    cands = sorted(atoms, key=lambda a: (type(a).__name__, str(a)))
    return itertools.islice(itertools.product(cands, repeat=len(d.params)), limit)


def recover_args(comp: Compiler, d: OpDef, s: tuple, t: tuple) -> tuple | None:
    """The first binding of `d`'s parameters under which `d` is exactly the step s -> t."""
    if not d.params:
        return ()
    code = comp.def_code(d, "value", "state", False, d.node)[0]
    for args in _bindings(d, s, t):
        try:
            if code(s, t, args) is True:
                return args
        except Exception:  # noqa: BLE001 - a binding outside a function's domain is not it
            continue
    return None


def recover_all_args(trace: Trace, ck: Checkable, comp: Compiler, tuples: list, limit: int = 500) -> None:
    """Arguments of each step of a trace that records action names only (`hicache check`),
    and its timeline lane from them."""
    for i in range(1, min(len(tuples), limit)):
        st = trace.steps[i]
        d = action_def(ck, st.action)
        if st.args or d is None or not d.params or tuples[i - 1] is None or tuples[i] is None:
            continue
        got = recover_args(comp, d, tuples[i - 1], tuples[i])
        if got is not None:
            st.args = {p: fmt(a) for (p, _), a in zip(d.params, got)}
            st.lane = st.lane or lane_of({p: a for (p, _), a in zip(d.params, got)})


def closest_binding(comp: Compiler, d: OpDef, s: tuple, t: tuple) -> tuple:
    """The binding passing the most leading conjuncts (its first false one is the reason)."""
    best, best_n = None, (-1, -1)
    for args in _bindings(d, s, t, limit=5_000):
        n = conjunct_count_true(comp, d, s, t, args)
        if n > best_n:
            best, best_n = args, n
    return best if best is not None else ()
