"""Model specs checked exhaustively; every count is derived independently.

For each model in tests/tla/models there is a hand-written Python state machine below
(the same transitions, one successor per way an action fires) explored by the reference
BFS in tla_bfs.py. The checker's distinct/generated/depth must equal the reference exactly,
and a violation's trace must be as long as the level at which the reference first meets
the bad state (BFS gives shortest counterexamples).
"""
from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from math import gcd
from pathlib import Path

import pytest

from tla_bfs import bfs
from tla_testlib import MODELS, check_model, check_text
from hicache.tla.errors import SemanticError
from hicache.tla.itf import decode, encode
from hicache.tla.values import Fcn, ModelValue, mk_fcn

MV = ModelValue


def _fn(keys, vals):
    return mk_fcn(dict(zip(keys, vals)))


# --------------------------------------------------------------- DieHard
# 6 actions, all always enabled: each explored state yields exactly 6 successors, so
# generated = 1 + 6 * distinct = 97 for the 16 reachable (small, big) pairs (TLC: 16/97/8).
def diehard_next(s):
    sm, bg = s
    nb = min(bg + sm, 5)
    ns = min(bg + sm, 3)
    return [(3, bg), (sm, 5), (0, bg), (sm, 0), (sm - (nb - bg), nb), (ns, bg - (ns - sm))]


def test_diehard_counts_match_tlc():
    ref = bfs([(0, 0)], diehard_next)
    assert (ref.distinct, ref.generated, ref.depth) == (16, 97, 8)
    res = check_model(MODELS / "DieHard.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == ("ok", 16, 97, 8)


def test_diehard_solution_is_a_shortest_trace():
    ref = bfs([(0, 0)], diehard_next, invariant=lambda s: s[1] != 4)
    res = check_model(MODELS / "DieHard.tla", MODELS / "DieHardSolve.cfg")
    assert res.result == "invariant" and res.violated == "NotSolved"
    assert len(res.trace) == ref.first_bad_level == 7
    assert res.trace[-1].state[1] == 4
    # consecutive trace states are real steps of the machine
    for a, b in zip(res.trace, res.trace[1:]):
        assert b.state in diehard_next(a.state)
        assert b.action is not None and b.action.name in {
            "FillSmall", "FillBig", "EmptySmall", "EmptyBig", "SmallToBig", "BigToSmall"}


# --------------------------------------------------------------- TokenRing
# One token moves around 4 nodes; each node passes it at most twice, then a reset. The
# only behavior is a cycle of 8 passes + 1 reset back to Init: 9 states, 1 successor
# each (10 generated), 9 levels.
def test_token_ring():
    n, rounds = 4, 2

    def nxt(s):
        tok, cnt = s
        out = []
        if cnt[tok] < rounds:
            c = list(cnt)
            c[tok] += 1
            out.append(((tok + 1) % n, tuple(c)))
        if all(c == rounds for c in cnt):
            out.append((tok, (0,) * n))
        return out

    ref = bfs([(0, (0,) * n)], nxt)
    assert (ref.distinct, ref.generated, ref.depth) == (9, 10, 9)
    res = check_model(MODELS / "TokenRing.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == ("ok", 9, 10, 9)


# --------------------------------------------------------------- Fifo + CONSTRAINT
# Queues over {a, b} of length <= 2 (1 + 2 + 4 = 7) times `last` in {NoMsg, a, b}: 21 states,
# all reachable. Each state generates 2 sends, plus 1 receive when q # <<>>: 3 * 2 + 18 * 3
# = 60, plus the initial state = 61. Sends from length-2 queues make length-3 queues:
# generated, outside the CONSTRAINT, neither added nor explored.
def test_fifo_constraint_counts_dropped_successors_as_generated():
    msgs = ("a", "b")
    nomsg = MV("NoMsg")

    def nxt(s):
        q, last = s
        out = [(q + (m,), last) for m in msgs]
        if q:
            out.append((q[1:], q[0]))
        return out

    ref = bfs([((), nomsg)], nxt, constraint=lambda s: len(s[0]) <= 2)
    res = check_model(MODELS / "Fifo.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)
    # the constraint really cut: more successors were generated than states kept
    assert ref.distinct == 21 and ref.generated == 61


# --------------------------------------------------------------- SymMutex + SYMMETRY
PROCS = (MV("p1"), MV("p2"), MV("p3"))
NOONE = MV("NoOne")


def symmutex_next(s):
    st, lock = s
    out = []
    for i, p in enumerate(PROCS):
        if st[i] == "idle":
            out.append((st[:i] + ("wait",) + st[i + 1:], lock))
        if st[i] == "wait" and lock == NOONE:
            out.append((st[:i] + ("cs",) + st[i + 1:], p))
        if st[i] == "cs":
            out.append((st[:i] + ("idle",) + st[i + 1:], NOONE))
    return out


def symmutex_canon(s):
    """The orbit of s under permutations of PROCS, as a hashable key."""
    st, lock = s
    forms = []
    for perm in itertools.permutations(range(3)):
        st2 = [None] * 3
        for i, j in enumerate(perm):
            st2[j] = st[i]
        lock2 = lock if lock == NOONE else PROCS[perm[PROCS.index(lock)]]
        forms.append((tuple(st2), lock2.name))
    return min(forms)


def test_symmetry_reduces_to_orbits():
    init = [(("idle",) * 3, NOONE)]
    full = bfs(init, symmutex_next)
    red = bfs(init, symmutex_next, key=symmutex_canon)
    res_full = check_model(MODELS / "SymMutex.tla", MODELS / "SymMutexNoSym.cfg")
    res_sym = check_model(MODELS / "SymMutex.tla")
    assert (res_full.result, res_full.distinct, res_full.generated, res_full.depth) == \
        ("ok", full.distinct, full.generated, full.depth)
    assert (res_sym.result, res_sym.distinct, res_sym.generated, res_sym.depth) == \
        ("ok", red.distinct, red.generated, red.depth)
    # without symmetry: 3 procs in idle/wait with none in cs (2^3) plus one in cs (3 * 2^2)
    assert full.distinct == 8 + 12
    # with it: orbits are (#wait with none in cs: 0..3) + (#wait besides the cs holder: 0..2)
    assert red.distinct == 4 + 3


# --------------------------------------------------------------- MinClock refinement
# 12 hours x 3 ticks = 36 states; 12 initial states and 1 successor per state: 48
# generated; every state is at most 2 ticks from an initial one: depth 3.
def _clock_next(s):
    h, m = s
    return [((h % 12) + 1, 0)] if m == 2 else [(h, m + 1)]


def test_instance_refinement_property_holds():
    hr = lambda s: s[0]
    ok = lambda s, t: hr(t) == hr(s) or hr(t) == (hr(s) % 12) + 1
    ref = bfs([(h, 0) for h in range(1, 13)], _clock_next, action_ok=ok)
    assert ref.first_bad_step_level is None
    res = check_model(MODELS / "MinClock.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == ("ok", 36, 48, 3)
    assert (ref.distinct, ref.generated, ref.depth) == (36, 48, 3)


def test_instance_refinement_violation_is_an_action_property_trace():
    hr = lambda s: ((s[0] + s[1] - 1) % 12) + 1
    ok = lambda s, t: hr(t) == hr(s) or hr(t) == (hr(s) % 12) + 1
    ref = bfs([(h, 0) for h in range(1, 13)], _clock_next, action_ok=ok)
    res = check_model(MODELS / "MinClock.tla", MODELS / "MinClockSkewed.cfg")
    assert res.result == "property" and res.violated == "RefinesSkewed"
    assert len(res.trace) == ref.first_bad_step_level == 4
    s, t = res.trace[-2].state, res.trace[-1].state
    assert not ok(s, t)


# --------------------------------------------------------------- Philosophers (deadlock)
def phil_next(s, n=3):
    out = []
    for p in range(n):
        l, r = p, (p + 1) % n
        if s[l] == -1 and s[r] != p:
            out.append(s[:l] + (p,) + s[l + 1:])
        if s[l] == p and s[r] == -1:
            out.append(s[:r] + (p,) + s[r + 1:])
        if s[l] == p and s[r] == p:
            t = list(s)
            t[l] = t[r] = -1
            out.append(tuple(t))
    return out


def test_deadlock_trace_is_shortest():
    ref = bfs([(-1, -1, -1)], phil_next)
    res = check_model(MODELS / "Philosophers.tla")
    assert res.result == "deadlock" and res.exit_code == 11
    # the only deadlock: every philosopher holds its left fork, 3 steps from Init
    assert ref.first_deadlock_level == 4
    assert len(res.trace) == 4
    assert res.trace[-1].state == (_fn((0, 1, 2), (0, 1, 2)),)
    assert phil_next((0, 1, 2)) == []


def test_deadlock_not_checked_when_disabled():
    ref = bfs([(-1, -1, -1)], phil_next)
    res = check_model(MODELS / "Philosophers.tla", MODELS / "PhilosophersNoDeadlock.cfg")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


# --------------------------------------------------------------- NaiveMutex (invariant)
def naive_next(s):
    pc, flag = s
    out = []
    for i in (0, 1):
        if pc[i] == "idle" and not flag[1 - i]:
            out.append((pc[:i] + ("set",) + pc[i + 1:], flag))
        if pc[i] == "set":
            out.append((pc[:i] + ("cs",) + pc[i + 1:], flag[:i] + (True,) + flag[i + 1:]))
        if pc[i] == "cs":
            out.append((pc[:i] + ("idle",) + pc[i + 1:], flag[:i] + (False,) + flag[i + 1:]))
    return out


def test_invariant_violation_trace_is_shortest():
    ref = bfs([(("idle", "idle"), (False, False))], naive_next,
              invariant=lambda s: s[0] != ("cs", "cs"))
    res = check_model(MODELS / "NaiveMutex.tla")
    assert res.result == "invariant" and res.violated == "MutualExclusion" and res.exit_code == 12
    # both check, then both set: 4 steps, 5 states
    assert len(res.trace) == ref.first_bad_level == 5
    last = res.trace[-1].state
    assert last[0] == _fn((0, 1), ("cs", "cs"))


# --------------------------------------------------------------- Counter (action property)
def test_action_property_violation():
    nxt = lambda x: ([x + 1] if x < 3 else []) + ([0] if x == 3 else [])
    ref = bfs([0], nxt, action_ok=lambda s, t: t >= s)
    res = check_model(MODELS / "Counter.tla")
    assert res.result == "property" and res.violated == "Monotone" and res.exit_code == 12
    assert len(res.trace) == ref.first_bad_step_level == 5
    assert [st.state for st in res.trace] == [(0,), (1,), (2,), (3,), (0,)]
    assert res.trace[-1].action.name == "CounterReset"


# --------------------------------------------------------------- Peterson
def peterson_next(s):
    pc, flag, turn = s
    out = []
    for i in (0, 1):
        o = 1 - i
        setpc = lambda v: pc[:i] + (v,) + pc[i + 1:]
        setfl = lambda v: flag[:i] + (v,) + flag[i + 1:]
        if pc[i] == "idle":
            out.append((setpc("turn"), setfl(True), turn))
        if pc[i] == "turn":
            out.append((setpc("wait"), flag, o))
        if pc[i] == "wait" and (not flag[o] or turn == i):
            out.append((setpc("cs"), flag, turn))
        if pc[i] == "cs":
            out.append((setpc("idle"), setfl(False), turn))
    return out


def test_peterson():
    init = [(("idle", "idle"), (False, False), t) for t in (0, 1)]
    ref = bfs(init, peterson_next, invariant=lambda s: s[0] != ("cs", "cs"))
    assert ref.first_bad_level is None
    res = check_model(MODELS / "Peterson.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


# --------------------------------------------------------------- TwoPhase
RMS = (MV("r1"), MV("r2"))


def twophase_next(s):
    rm, tm, prep, msgs = s
    out = []
    setrm = lambda i, v: rm[:i] + (v,) + rm[i + 1:]
    if tm == "init" and prep == frozenset(RMS):
        out.append((rm, "committed", prep, msgs | {("Commit",)}))
    if tm == "init":
        out.append((rm, "aborted", prep, msgs | {("Abort",)}))
    for i, r in enumerate(RMS):
        if tm == "init" and ("Prepared", r) in msgs:
            out.append((rm, tm, prep | {r}, msgs))
        if rm[i] == "working":
            out.append((setrm(i, "prepared"), tm, prep, msgs | {("Prepared", r)}))
            out.append((setrm(i, "aborted"), tm, prep, msgs))
        if ("Commit",) in msgs:
            out.append((setrm(i, "committed"), tm, prep, msgs))
        if ("Abort",) in msgs:
            out.append((setrm(i, "aborted"), tm, prep, msgs))
    return out


def test_two_phase_commit():
    init = [(("working",) * 2, "init", frozenset(), frozenset())]
    consistent = lambda s: not ("aborted" in s[0] and "committed" in s[0])
    ref = bfs(init, twophase_next, invariant=consistent)
    assert ref.first_bad_level is None
    res = check_model(MODELS / "TwoPhase.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


# --------------------------------------------------------------- Hanoi
def hanoi_next(s):
    out = []
    for f, t in itertools.permutations(range(3), 2):
        if s[f] and (not s[t] or s[f][0] < s[t][0]):
            u = list(s)
            u[f], u[t] = s[f][1:], (s[f][0],) + s[t]
            out.append(tuple(u))
    return out


def test_hanoi_counts_and_shortest_solution():
    init = [((1, 2, 3), (), ())]
    ref = bfs(init, hanoi_next, invariant=lambda s: len(s[2]) < 3)
    # 3^3 placements, all reachable; 3 moves from each except 2 from the 3 "all on one peg"
    assert (ref.distinct, ref.generated) == (27, 1 + 24 * 3 + 3 * 2)
    res = check_model(MODELS / "Hanoi.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)
    res = check_model(MODELS / "Hanoi.tla", MODELS / "HanoiSolve.cfg")
    assert res.result == "invariant" and len(res.trace) == ref.first_bad_level == 2 ** 3
    assert res.trace[-1].state == (((), (), (1, 2, 3)),)


# --------------------------------------------------------------- Euclid
def test_euclid_recursive_operator_in_init():
    mx = 6
    init = [(mx, y, gcd(mx, y)) for y in range(1, mx + 1)]

    def nxt(s):
        x, y, g = s
        return ([(x - y, y, g)] if x > y else []) + ([(x, y - x, g)] if y > x else [])

    ref = bfs(init, nxt, invariant=lambda s: gcd(s[0], s[1]) == s[2])
    res = check_model(MODELS / "Euclid.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


# --------------------------------------------------------------- Cycle + VIEW
def cycle_next(s, k=5):
    x, _ = s
    out = []
    if x < k - 1:
        out.append((x + 1, "inc"))
    if x == k - 1:
        out.append((0, "wrap"))
    if x + 2 < k:
        out.append((x + 2, "inc"))
    return out


def test_view_collapses_states():
    init = [(0, "none")]
    plain = bfs(init, cycle_next)
    viewed = bfs(init, cycle_next, key=lambda s: s[0])
    res = check_model(MODELS / "Cycle.tla", MODELS / "CycleNoView.cfg")
    assert (res.distinct, res.generated, res.depth) == (plain.distinct, plain.generated, plain.depth)
    res = check_model(MODELS / "Cycle.tla")
    assert (res.distinct, res.generated, res.depth) == (viewed.distinct, viewed.generated, viewed.depth)
    assert viewed.distinct == 5 < plain.distinct


# --------------------------------------------------------------- Grid: CONSTRAINT + ACTION_CONSTRAINT
def test_action_constraint_and_constraint():
    def nxt(s):
        a, b = s
        out = [(a + d, b) for d in (-1, 1) if 0 <= a + d <= 3]
        out += [(a, b + d) for d in (-1, 1) if 0 <= b + d <= 3]
        return out

    ref = bfs([(0, 0), (0, 1)], nxt, constraint=lambda s: s[0] + s[1] <= 4,
              action_constraint=lambda s, t: sum(t) >= sum(s))
    res = check_model(MODELS / "Grid.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)
    # pairs with a + b <= 4 in 0..3 x 0..3: 16 minus (2,3) (3,2) (3,3)
    assert ref.distinct == 13


# --------------------------------------------------------------- CfgKinds: every constant kind
def test_cfg_constant_kinds_and_override():
    nil, workers, colors = MV("Nil"), (MV("w1"), MV("w2")), ("red", "blue")
    limit = 1 + len(workers)      # Limit <- SmallLimit == Start + Cardinality(Workers)
    nxt = lambda s: [(s[0] + 1, w, c) for w in workers for c in colors] if s[0] < limit else []
    ref = bfs([(1, nil, c) for c in colors], nxt)
    res = check_model(MODELS / "CfgKinds.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth) == ("ok", 10, 26, 3)


# --------------------------------------------------------------- Bag: EXTENDS a user module
def test_extends_user_module():
    vals, cap = (1, 2, 3), 3

    def nxt(s):
        q, hi = s
        out = [(q + (v,), max(hi, v)) for v in vals if len(q) < cap]
        if q:
            out.append((q[:-1], 0 if len(q) == 1 else hi))
        return out

    ref = bfs([((), 0)], nxt, invariant=lambda s: all(x <= s[1] for x in s[0]))
    res = check_model(MODELS / "Bag.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


# --------------------------------------------------------------- River (puzzle)
LOADS = ((1, 0), (2, 0), (0, 1), (0, 2), (1, 1))


def river_next(s):
    """TLC enumerates an action's disjunctions branch by branch (Tool.getNextStates on \\/),
    so a successor is produced once per true disjunct of each of Safe's two disjunctions:
    the safe landings (0, 0) and (3, 3) satisfy both disjuncts of one of them and are
    generated twice. They are duplicates: distinct is unaffected, generated is."""
    m, c, boat = s
    sign = -1 if boat == "left" else 1
    out = []
    for lm, lc in LOADS:
        m2, c2 = m + sign * lm, c + sign * lc
        if not (0 <= m2 <= 3 and 0 <= c2 <= 3):
            continue
        left_ok = (m2 == 0) + (m2 >= c2)
        right_ok = (3 - m2 == 0) + (3 - m2 >= 3 - c2)
        out += [(m2, c2, "right" if boat == "left" else "left")] * (left_ok * right_ok)
    return out


def test_river_puzzle():
    init = [(3, 3, "left")]
    ref = bfs(init, river_next, invariant=lambda s: not (s[0] == 0 and s[1] == 0))
    res = check_model(MODELS / "River.tla", MODELS / "RiverAll.cfg")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)
    res = check_model(MODELS / "River.tla")
    # the classic answer: 11 crossings
    assert res.result == "invariant" and len(res.trace) == ref.first_bad_level == 12


# --------------------------------------------------------------- disjunctive guards
def test_disjunctive_guards_generate_one_successor_per_true_disjunct():
    """Guards.tla: B1's guard (x = 0 \\/ x = 0 \\/ y = 0) has 3 true disjuncts at (0, 0) and 1 at
    (1, 0); TLC branches on each, so B1 yields 3 + 1 successors. States (0,0) (1,0) (2,0)
    (2,1) (2,2) (3,3) (4,4): 7 distinct, 1 + (3 + 1) + (1 + 1) + 1 + 1 + 1 + 1 = 11 generated,
    one new state per level: depth 7."""
    def nxt(s):
        x, y = s
        out = []
        if x < 2:
            out += [(x + 1, y)] * ((x == 0) + (x == 0) + (y == 0))     # B1
            out += [(x + 1, y)]                                       # B2: x' \in {x, x+1} /\ x' > x
        if x == 2 and y < 2:
            out.append((x, y + 1))                                    # B3 (IF picks one branch)
        if x == 2 and y == 2:
            out.append((3, 3))                                        # B4 (CASE)
        if x == 3:
            out.append((4, 4))                                        # B5 (LET)
        return out

    ref = bfs([(0, 0)], nxt)
    assert (ref.distinct, ref.generated, ref.depth) == (7, 11, 7)
    res = check_model(MODELS / "Guards.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == ("ok", 7, 11, 7)


# --------------------------------------------------------------- TLCGet("level")
def test_tlcget_level_in_next_is_the_current_state_level():
    res = check_model(MODELS / "LevelProbe.tla")
    ref = bfs([(0, 0)], lambda s: [(s[0] + 1, None)] if s[0] < 3 else [])
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


def test_tlcget_level_in_invariant_is_the_checked_state_level():
    res = check_model(MODELS / "LevelProbe.tla", MODELS / "LevelProbeInv.cfg")
    assert res.result == "ok"


# --------------------------------------------------------------- ITF traces
@pytest.mark.parametrize("spec, cfg, result, variables", [
    ("NaiveMutex", "NaiveMutex", "invariant", ["pc", "flag"]),
    ("TwoPhase", "TwoPhaseCommits", "invariant", ["rmState", "tmState", "tmPrepared", "msgs"]),
    ("Hanoi", "HanoiSolve", "invariant", ["towers"]),
    ("Philosophers", "Philosophers", "deadlock", ["holder"]),
    ("MinClock", "MinClockSkewed", "property", ["h", "m"]),
])
def test_itf_trace_decodes_to_the_trace_states(tmp_path, spec, cfg, result, variables):
    """run.check_one writes the ITF file; decoding it gives back the trace states exactly."""
    from hicache.tla.run import check_one
    out = tmp_path / "trace.itf.json"
    res, payload, text = check_one(str(MODELS / f"{spec}.tla"), str(MODELS / f"{cfg}.cfg"), trace_out=str(out))
    assert res.result == payload["result"] == result
    assert Path(payload["trace"]) == out and str(out) in text
    doc = json.loads(out.read_text())
    assert doc["vars"] == variables
    decoded = [tuple(decode(st[v]) for v in doc["vars"]) for st in doc["states"]]
    assert decoded == [s.state for s in res.trace]
    assert [st["#meta"]["action"] for st in doc["states"]] == \
        [None] + [s.action.name for s in res.trace[1:]]
    assert [st["#meta"]["index"] for st in doc["states"]] == list(range(len(res.trace)))


def test_cli_writes_itf_of_a_real_shortest_behavior(tmp_path):
    out = tmp_path / "trace.itf.json"
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "check", str(MODELS / "NaiveMutex.tla"),
                           "--json", "--trace-out", str(out)],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 12, proc.stderr
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    assert payload["violated"] == "MutualExclusion" and Path(payload["trace"]) == out
    doc = json.loads(out.read_text())
    states = []
    for st in doc["states"]:
        pc, flag = decode(st["pc"]), decode(st["flag"])
        states.append(((pc.d[0], pc.d[1]), (flag.d[0], flag.d[1])))
    assert states[0] == (("idle", "idle"), (False, False))
    assert all(t in naive_next(s) for s, t in zip(states, states[1:]))
    assert states[-1][0] == ("cs", "cs") and len(states) == 5


def test_counterexample_does_not_depend_on_hash_seed(tmp_path):
    traces = []
    for seed in ("1", "2", "3"):
        out = tmp_path / f"t{seed}.json"
        subprocess.run([sys.executable, "-m", "hicache.cli", "check", str(MODELS / "TwoPhase.tla"),
                        "--config", str(MODELS / "TwoPhaseCommits.cfg"), "--json", "--trace-out", str(out)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60,
                       env={**os.environ, "PYTHONHASHSEED": seed})
        traces.append(json.loads(out.read_text())["states"])
    assert traces[0] == traces[1] == traces[2]


def test_two_phase_commit_shortest_commit():
    init = [(("working",) * 2, "init", frozenset(), frozenset())]
    ref = bfs(init, twophase_next, invariant=lambda s: s[1] != "committed")
    res = check_model(MODELS / "TwoPhase.tla", MODELS / "TwoPhaseCommits.cfg")
    # both RMs prepare, the TM receives both, then commits: 5 steps
    assert res.result == "invariant" and len(res.trace) == ref.first_bad_level == 6
    last = res.trace[-1].state
    assert last[1] == "committed" and last[3] >= {Fcn({"type": "Commit"})}


@pytest.mark.parametrize("value", [
    0, -7, 2 ** 70, True, "x", (), (1, "a"), frozenset({1, 2}), frozenset(),
    Fcn({"a": 1, "b": frozenset({(1,)})}), Fcn({0: "idle", 1: "cs"}), MV("p1"),
    Fcn({MV("p1"): (MV("p2"),)}),
])
def test_itf_roundtrip(value):
    assert decode(json.loads(json.dumps(encode(value)))) == value


# --------------------------------------------------------------- CLI --json
@pytest.mark.parametrize("spec, code, expect", [
    ("DieHard", 0, ("ok", 16, 97, 8)),
    ("Fifo", 0, ("ok", 21, 61, 5)),
    ("Philosophers", 11, ("deadlock",)),
    ("Counter", 12, ("property",)),
    ("NaiveMutex", 12, ("invariant",)),
])
def test_cli_json(tmp_path, spec, code, expect):
    cmd = [sys.executable, "-m", "hicache.cli", "check", str(MODELS / f"{spec}.tla"), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr
    payload = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(payload) >= {"result", "distinct", "generated", "depth", "seconds", "violated", "trace"}
    got = (payload["result"], payload["distinct"], payload["generated"], payload["depth"])
    assert got[:len(expect)] == expect
    # a violation names what was violated and writes its behavior (by default into the cwd)
    assert (payload["trace"] is None) == (code == 0)
    assert (payload["violated"] is None) == (payload["result"] in ("ok", "deadlock"))
    if payload["trace"]:
        assert (tmp_path / payload["trace"]).exists()


# --------------------------------------------------------------- Mixed action forms
MIX_PROCS = (MV("a"), MV("b"))


def mixed_next(s):
    x, y, sel, r = s
    out = []
    if x < 3:
        out.append((x + 1, x + 2, sel, r))                                   # MixGrow
    out += [(x, y, frozenset({p}), r) for p in MIX_PROCS]                   # MixPick: 1-subsets
    for i, p in enumerate(MIX_PROCS):
        if r[i] < 1:
            out.append((x, y, sel, r[:i] + (r[i] + 1,) + r[i + 1:]))       # MixBump(p)
    out.append(s)                                                            # MixStutter
    return out


def mixed_key(s):
    x, y, sel, r = s
    swapped = (x, y, frozenset(MIX_PROCS[1 - MIX_PROCS.index(p)] for p in sel), (r[1], r[0]))
    return min(repr(sorted(p.name for p in t[2])) + repr(t[3]) + repr(t[:2]) for t in (s, swapped))


def _mixed_state(res_state):
    x, y, sel, r = res_state
    return (x, y, sel, (r.d[MV("a")], r.d[MV("b")]))


def test_mixed_action_forms_and_properties():
    # Init's two disjuncts give the same state: 2 generated, 1 distinct. 3 x-values * 3
    # selections * 4 bump vectors = 36 states; per state 1 (Grow, if x < 3) + 2 (Pick) +
    # #unbumped (Bump) + 1 (Stutter) successors.
    init = [(1, 2, frozenset(), (0, 0))] * 2
    ref = bfs(init, mixed_next, action_ok=lambda s, t: t[0] >= s[0], invariant=lambda s: s[1] > s[0])
    assert (ref.distinct, ref.generated) == (36, 2 + 24 + 72 + 36 + 36)
    res = check_model(MODELS / "Mixed.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)
    sym = bfs(init, mixed_next, key=mixed_key)
    res = check_model(MODELS / "Mixed.tla", MODELS / "MixedSym.cfg")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", sym.distinct, sym.generated, sym.depth)


def test_liveness_is_reported_unchecked_and_safety_part_checked():
    # (only when asked: without the opt-out an unchecked part fails the run, see below)
    res = check_model(MODELS / "Mixed.tla", MODELS / "MixedLiveness.cfg", allow_unchecked_properties=True)
    assert res.result == "ok" and res.distinct == 36
    assert any("Eventually" in w and "not checked" in w and "Mixed.tla:31:15" in w for w in res.warnings)


def test_an_unchecked_liveness_property_is_a_located_error_not_a_pass():
    """`PROPERTY Eventually` (`<>(x = 3)` and `[]Inv`) printed a warning and passed (exit 0)."""
    with pytest.raises(SemanticError) as ei:
        check_model(MODELS / "Mixed.tla", MODELS / "MixedLiveness.cfg")
    e = ei.value
    assert (Path(e.loc.file).name, e.loc.line, e.loc.col) == ("Mixed.tla", 31, 15)    # the <>(x = 3)
    assert "PROPERTY Eventually" in e.message and "<>(x = 3)" in e.message and "not checked" in e.message
    assert "--allow-unchecked-properties" in e.message


# --------------------------------------------------------------- PROPERTY parts
# x[1] counts 0..3, x[2] stays 0: 4 states; x[1] = 2 (a violation of x[p] < 2) is at level 3.
QPROP = """---- MODULE {name} ----
EXTENDS Naturals
VARIABLES x
Init == x = [p \\in {{1, 2}} |-> 0]
Next == x' = [x EXCEPT ![1] = @ + 1] /\\ x[1] < 3
Fair == WF_x(Next)
Spec == Init /\\ [][Next]_x /\\ Fair
SafeFor(p) == [](x[p] < 2)
Grows(p) == [][x'[p] >= x[p]]_x
Bounded(p) == x[p] < 2
C == INSTANCE QPropIdx WITH v <- x
Prop == {prop}
====
"""
QPROP_IDX = """---- MODULE QPropIdx ----
EXTENDS Naturals
VARIABLE v
Idx == {1, 2}
SafeI(p) == [](v[p] < 2)
====
"""
QPROP_CFG = "SPECIFICATION Spec\nPROPERTY Prop\nCHECK_DEADLOCK FALSE\n"


def _qprop(tmp_path, prop, **kw):
    (tmp_path / "QPropIdx.tla").write_text(QPROP_IDX)
    return check_text(tmp_path, "QProp", QPROP.format(name="QProp", prop=prop), QPROP_CFG, **kw)


@pytest.mark.parametrize("prop", [
    "\\A p \\in {1, 2} : [](x[p] < 2)",                        # was: "not checked", exit 0
    "\\A p \\in C!Idx : [](x[p] < 2)",
    "\\A p \\in C!Idx : C!SafeI(p)",                              # through an instance
    "\\A p \\in {1, 2} : SafeFor(p)",                           # was: checked on the first state only
    "SafeFor(1)",                                              # was: checked on the first state only
    "\\A p \\in {1, 2} : [](x[p] < 2) /\\ Grows(p)",
    "\\A p \\in {1} : \\A q \\in {p, 2} : [](Bounded(q))",
    "x[2] = 0 /\\ \\A p \\in {2, 1} : SafeFor(p)",
])
def test_a_quantified_always_property_is_checked_as_always_of_the_quantifier(tmp_path, prop):
    # the same behavior as `[](\\A p \\in {1, 2} : x[p] < 2)` (which was checked already)
    res = _qprop(tmp_path, prop)
    assert res.result == "invariant" and res.violated == "Prop", (prop, res.result, res.warnings)
    assert [s.state[0] for s in res.trace] == [(0, 0), (1, 0), (2, 0)]
    assert not res.warnings


@pytest.mark.parametrize("prop, result", [
    ("\\A p \\in {1, 2} : [](x[p] < 4) /\\ Grows(p)", "ok"),
    ("\\A p \\in {2} : [][x'[p] = x[p]]_x", "ok"),
    ("\\A p \\in {1, 2} : [][x'[p] = x[p]]_x", "property"),
    ("\\A p \\in {1, 2} : x[p] = 1 /\\ [](x[p] < 9)", "property"),  # its part on the initial states
    ("\\A p \\in {1, 2} : x[p] = 0 /\\ SafeFor(p)", "invariant"),
])
def test_quantified_property_parts_keep_their_kind(tmp_path, prop, result):
    res = _qprop(tmp_path, prop)
    assert res.result == result, (prop, res.result, res.error)
    assert (res.distinct if result == "ok" else 4) == 4
    assert not res.warnings       # (these were "not checked")


@pytest.mark.parametrize("prop, col", [
    ("<>(x[1] = 3)", 9),
    ("(x[1] = 0) ~> (x[1] = 3)", 9),
    ("Spec", 9),                                                # its WF_x(Next): liveness
    ("x[1] = 0 => [](x[1] < 2)", 9),
    ("IF x[1] = 0 THEN [](x[1] < 2) ELSE TRUE", 9),
    ("LET B == [](x[1] < 2) IN B", 9),
    ("\\E p \\in {1, 2} : [](x[p] < 2)", 9),
    ("\\A p \\in {x[1]} : [](x[p] < 2)", 9),                        # a set that varies
    ("[](x[1] < 9) /\\ <>(x[1] = 3)", 25),
])
def test_a_property_part_that_is_not_checked_fails_unless_allowed(tmp_path, prop, col):
    with pytest.raises(SemanticError) as ei:
        _qprop(tmp_path, prop)
    e = ei.value
    line = 12 if prop != "Spec" else 6
    assert (Path(e.loc.file).name, e.loc.line, e.loc.col) == ("QProp.tla", line, col if prop != "Spec" else 9), e
    assert "PROPERTY Prop" in e.message and "not checked" in e.message
    res = _qprop(tmp_path, prop, allow_unchecked_properties=True)
    assert res.result == "ok" and res.distinct == 4
    assert len(res.warnings) == 1 and "not checked" in res.warnings[0] and "Prop" in res.warnings[0]
    # the fairness of SPECIFICATION Spec is not a property: without PROPERTY, no error, no warning
    res = check_text(tmp_path, "QProp", QPROP.format(name="QProp", prop=prop), "SPECIFICATION Spec\n"
                     "CHECK_DEADLOCK FALSE\n")
    assert (res.result, res.distinct, res.warnings) == ("ok", 4, [])


def test_init_part_of_property_violated():
    res = check_model(MODELS / "Mixed.tla", MODELS / "MixedInitProp.cfg")
    assert res.result == "property" and res.violated == "StartsAtTwo"
    assert len(res.trace) == 1 and _mixed_state(res.trace[0].state)[0] == 1


def test_named_instance_operators_in_init_and_next():
    nxt = lambda s: [((s[0] % 12) + 1, 0)] if s[1] == 1 else [(s[0], 1)]
    ok = lambda s, t: t[0] == s[0] or t[0] == (s[0] % 12) + 1
    ref = bfs([(h, 0) for h in range(1, 13)], nxt, action_ok=ok)
    assert ref.first_bad_step_level is None
    res = check_model(MODELS / "Minutes.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth) == ("ok", 24, 36, 2)


def test_unnamed_instance_definitions_as_init_and_next():
    ref = bfs(range(1, 13), lambda h: [(h % 12) + 1])
    res = check_model(MODELS / "Hours.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth) == ("ok", 12, 24, 1)


# --------------------------------------------------------------- cfg substitutions
def _override_ref(step):
    fs = [(a, b) for a in (0, 1) for b in (0, 1)]
    return bfs([(0, f) for f in fs], lambda s: [(s[0] * 2 + step, s[1])] if s[0] < 10 else [])


def test_operator_constant_substituted_by_definition():
    ref = _override_ref(1)       # x: 0 1 3 7 15, for each of the 4 functions f
    res = check_model(MODELS / "Override.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth) == ("ok", 20, 20, 5)


def test_definition_overridden_by_another_definition():
    ref = _override_ref(3)       # x: 0 3 9 21
    res = check_model(MODELS / "Override.tla", MODELS / "OverrideDef.cfg")
    assert (res.distinct, res.generated, res.depth) == (ref.distinct, ref.generated, ref.depth) == (16, 16, 4)


def test_definition_overridden_by_a_value():
    ref = _override_ref(3)
    res = check_model(MODELS / "Override.tla", MODELS / "OverrideValue.cfg")
    assert (res.distinct, res.generated, res.depth) == (ref.distinct, ref.generated, ref.depth)


def test_constraint_cut_is_not_a_deadlock():
    # x + y <= 3: 1 + 2 + 3 + 4 = 10 states; each explored state generates 2 successors
    ref = bfs([(0, 0)], lambda s: [(s[0] + 1, s[1]), (s[0], s[1] + 1)], constraint=lambda s: sum(s) <= 3)
    assert (ref.distinct, ref.generated, ref.depth) == (10, 1 + 2 * 10, 4)
    res = check_model(MODELS / "Unbounded.tla")
    assert (res.result, res.distinct, res.generated, res.depth) == \
        ("ok", ref.distinct, ref.generated, ref.depth)


# --------------------------------------------------------------- TLC-style summary text
def test_summary_text(tmp_path):
    from hicache.tla.run import check_one
    res, payload, text = check_one(str(MODELS / "DieHard.tla"), None)
    assert res.result == "ok"
    assert "Model checking completed. No error has been found." in text
    assert "97 states generated, 16 distinct states found, 0 states left on queue." in text
    assert "The depth of the complete state graph search is 8." in text
    res, payload, text = check_one(str(MODELS / "DieHard.tla"), str(MODELS / "DieHardSolve.cfg"),
                                   trace_out=str(tmp_path / "t.json"))
    assert "Error: Invariant NotSolved is violated." in text
    assert "Error: The behavior up to this point is:" in text
    assert "State 1: <Initial predicate>" in text and "State 7: <BigToSmall line " in text
    assert "/\\ big = 4" in text


def test_states_left_on_queue_at_violation():
    res = check_model(MODELS / "DieHard.tla", MODELS / "DieHardSolve.cfg")
    # the violating state itself was added and never explored
    assert res.queue_left >= 1


def test_a_let_definition_reading_a_primed_variable_sees_it_where_it_is_used(tmp_path):
    """`LET nx == x' IN x' = e /\\ y' = nx`: the LET means its body where it is used, after
    x' is assigned (TLC finds y = 2). Evaluated at the LET's entry instead, it was a false
    "x' is read before it is assigned"."""
    spec = ("---- MODULE LetPrime ----\nEXTENDS Naturals\nVARIABLE x, y\nInit == x = 0 /\\ y = 0\n"
            "Next == LET nx == x' IN x' = (x + 1) % 3 /\\ y' = nx\nInv == y # 2\n====\n")
    res = check_text(tmp_path, "LetPrime", spec, "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    assert res.result == "invariant" and res.violated == "Inv"
    assert [s.state for s in res.trace] == [(0, 0), (1, 1), (2, 2)]


def test_a_parameterized_instance_passes_its_arguments_to_nested_definitions(tmp_path):
    """`C(l) == INSTANCE Counter WITH c <- x, Lim <- l`: Counter's Foo calls Bar, which reads
    the substitution Lim <- l. The nested call dropped the instance's argument (an internal
    IndexError); Foo is (x + l) * 2 now for each l, and the invariant fails at x = 3."""
    (tmp_path / "Counter.tla").write_text("---- MODULE Counter ----\nEXTENDS Naturals\nCONSTANT Lim\n"
                                         "VARIABLE c\nBar == c + Lim\nFoo == Bar * 2\n====\n")
    spec = ("---- MODULE Inst ----\nEXTENDS Naturals\nVARIABLE x\n"
            "C(l) == INSTANCE Counter WITH c <- x, Lim <- l\nInit == x = 0\nNext == x < 3 /\\ x' = x + 1\n"
            "Inv == C(1)!Foo = (x + 1) * 2 /\\ C(2)!Foo = (x + 2) * 2 /\\ C(10)!Foo < 25\n====\n")
    res = check_text(tmp_path, "Inst", spec, "INIT Init\nNEXT Next\nINVARIANT Inv\nCHECK_DEADLOCK FALSE\n")
    assert res.result == "invariant" and res.violated == "Inv"
    assert [s.state for s in res.trace] == [(0,), (1,), (2,), (3,)]
