"""What a generated fast path reads: a fused loop binds only the functions a running
conjunct applies (`codegen._gate_reads`, `rt.no_ap`). A cost only: the verdicts are the
exact forms' (test_monitor_differential.py checks them on every spec's reachable and
mutated states)."""
from __future__ import annotations

from pathlib import Path

import pytest

from hicache.monitors import rt
from hicache.monitors.generated import host_tier as gen
from hicache.tla.cfg import load_cfg
from hicache.tla.checker import build
from hicache.tla.compiler import UNSET

ROOT = Path(__file__).resolve().parents[2]

#: the request rows' functions, in the order the fused Reqs loop hoists them
ROWS = ("req", "reqLen", "pfSlot", "pfNode", "pfAbort")


@pytest.fixture(scope="module")
def world():
    """HostTier's CI model: its constants and its initial states (from the interpreter)."""
    spec = ROOT / "spec" / "HostTier.tla"
    cfg = load_cfg(spec.with_suffix(".cfg"))
    ck = build(spec, cfg)
    n = len(ck.model.variables)
    inits = [dict(zip(gen.VARIABLES, p)) for p in ck.init((), [UNSET] * n, ())]
    return gen.constants(dict(cfg.constants)), inits


def _recording(monkeypatch) -> list:
    """The variables' values the generated module hands to `fast_ap`, in call order."""
    applied = []

    def spy(f):
        applied.append(f)
        return rt.fast_ap(f)
    monkeypatch.setattr(gen, "fast_ap", spy)
    return applied


def _rows_applied(applied: list, s: dict) -> set:
    return {v for v in ROWS if any(f is s[v] for f in applied)}


def test_a_request_step_binds_only_the_rows_its_running_conjuncts_read(world, monkeypatch):
    """V = {req} (a request's phase changed): TypeOK's req conjunct and LockedNodesKept
    (req, reqLen, len) run; the pfSlot/pfNode/pfAbort conjuncts are skipped by their guards,
    and their functions are no longer bound. Every variable changed: all five are."""
    C, inits = world
    s = {**inits[0]}
    for v in ROWS:      # (distinct objects, so a bound function names its variable)
        s[v] = tuple(list(s[v]))
    D = {"Nodes": frozenset(), "HSlots": frozenset(), "Reqs": frozenset({1})}
    applied = _recording(monkeypatch)
    assert gen.inc_all(C, s, D, frozenset({"req"})) is True
    assert _rows_applied(applied, s) == {"req", "reqLen"}
    applied.clear()
    assert gen.inc_all(C, s, D, frozenset(ROWS)) is True
    assert _rows_applied(applied, s) == set(ROWS)
    applied.clear()
    assert gen.inc_all(C, s, D, None) is True        # (None: everything may have changed)
    assert _rows_applied(applied, s) == set(ROWS)


def test_an_unbound_function_is_never_what_a_running_conjunct_reads(world):
    """A row that is not a legal value passes when its conjuncts' guards skip it (as
    before: what did not change held at the last check) and fails the fast path as soon
    as a running conjunct reads it: the unbound function's None is read by nobody."""
    C, inits = world
    s = {**inits[0], "pfAbort": ("not a boolean",)}
    D = {"Nodes": frozenset(), "HSlots": frozenset(), "Reqs": frozenset({1})}
    assert gen.inc_all(C, s, D, frozenset({"req"})) is True
    assert gen.inc_all(C, s, D, frozenset({"req", "pfAbort"})) is False
    assert gen.inc_all(C, s, D, None) is False
    assert rt.no_ap(s["pfAbort"])(1) is None
