"""Generated monitors agree with the interpreter on reachable and mutated states/transitions.

For each spec: a bounded BFS with the interpreter (hicache.tla) gives reachable states and
their successors per action. Then
  * every generated invariant returns the interpreter's verdict, on reachable states and on
    states with one variable replaced by that variable's value in another reachable state;
  * every real transition s -> t is accepted by next_<Action>, and a successor mutated in one
    variable is accepted exactly when the interpreter's action produces it from s;
  * act_<Action> (conjunct by conjunct) and d_<Action> (one expression) agree on bindings.
"""
from __future__ import annotations

import collections
import importlib
import itertools
import random
from pathlib import Path

import pytest

from hicache.cli.gen import SPECS
from hicache.monitors.codegen import module_name
from hicache.tla.cfg import load_cfg
from hicache.tla.checker import build
from hicache.tla.compiler import UNSET
from hicache.tla.errors import TlaError

ROOT = Path(__file__).resolve().parents[2]
MAX_STATES = 1500
MUTATIONS = 300


def _verdict(fn):
    try:
        v = fn()
    except (TlaError, KeyError, TypeError, IndexError, ValueError, AttributeError):
        return "error"
    return v


def _gen_verdict(failure):
    if failure is None:
        return True
    return "error" if failure.error else False


def _explore(ck):
    n = len(ck.model.variables)
    init = [tuple(p) for p in ck.init((), [UNSET] * n, ())]
    seen = {s: None for s in init}
    queue = list(init)
    edges = []   # (s, action name, t)
    i = 0
    while i < len(queue) and len(seen) < MAX_STATES:
        s = queue[i]
        i += 1
        for act in ck.actions:
            for p in act.fn(s, [UNSET] * n, ()):
                t = tuple(p)
                edges.append((s, act.name, t))
                if t not in seen:
                    seen[t] = None
                    queue.append(t)
    return list(seen), edges


@pytest.fixture(scope="module", params=SPECS)
def world(request):
    name = request.param
    spec = ROOT / "spec" / f"{name}.tla"
    cfg = load_cfg(spec.with_suffix(".cfg"))
    ck = build(spec, cfg)
    gen = importlib.import_module(f"hicache.monitors.generated.{module_name(name)}")
    C = gen.constants(dict(cfg.constants))
    states, edges = _explore(ck)
    return name, ck, gen, C, states, edges


def _d(gen, s):
    return dict(zip(gen.VARIABLES, s))


def _mutants(states, variables, rng, count):
    out = []
    for _ in range(count):
        s = list(rng.choice(states))
        other = rng.choice(states)
        i = rng.randrange(len(variables))
        s[i] = other[i]
        out.append(tuple(s))
    return out


def _gen_next(gen, C, act, sd, td):
    """The generated check for the interpreter's action `act`; the interpreter names a
    disjunct it does not split by name "Next", the generator splits it: then any action."""
    if act in gen.NEXT:
        return gen.NEXT[act](C, sd, td)
    return any(f(C, sd, td) for f in gen.NEXT.values())


def test_variables_match(world):
    _, ck, gen, _, _, _ = world
    assert list(gen.VARIABLES) == list(ck.model.variables)


def test_invariants_agree(world):
    name, ck, gen, C, states, _ = world
    rng = random.Random(1)
    interp = {n: ck.model.def_value(n) for n in gen.INVARIANTS}
    checked = 0
    for s in states + _mutants(states, gen.VARIABLES, rng, MUTATIONS):
        sd = _d(gen, s)
        for n, inv in gen.INVARIANTS.items():
            want = _verdict(lambda: interp[n](s, None, ()))
            got = _gen_verdict(inv(C, sd))
            assert got == want, f"{name}.{n} on {sd}: generated {got}, interpreter {want}"
            checked += 1
    assert checked > len(states)


def test_real_transitions_accepted(world):
    name, _, gen, C, _, edges = world
    assert edges, f"{name}: no transitions explored"
    for s, act, t in edges:
        assert _gen_next(gen, C, act, _d(gen, s), _d(gen, t)) is True, f"{name}.{act} rejects a real step"


def test_mutated_successors(world):
    name, ck, gen, C, states, edges = world
    rng = random.Random(2)
    n = len(ck.model.variables)
    by_name: dict[str, list] = {}
    for a in ck.actions:
        by_name.setdefault(a.name, []).append(a)
    sample = rng.sample(edges, min(len(edges), 150))
    accepted = rejected = 0
    for s, act, t in sample:
        succ = set()
        for a in (by_name[act] if act in gen.NEXT else ck.actions):
            succ.update(tuple(p) for p in a.fn(s, [UNSET] * n, ()))
        for u in _mutants([t], gen.VARIABLES, rng, 1) + [rng.choice(states)]:
            want = u in succ
            got = _verdict(lambda: _gen_next(gen, C, act, _d(gen, s), _d(gen, u)))
            assert got == want, f"{name}.{act}: generated {got}, interpreter {want} for {s} -> {u}"
            accepted += want
            rejected += not want
    assert rejected > 0


def test_act_agrees_with_expression(world):
    name, _, gen, C, _, edges = world
    rng = random.Random(3)
    universe = list(range(0, 4))
    for s, act, t in rng.sample(edges, min(len(edges), 60)):
        if act not in gen.ACTIONS:
            continue
        fn, params = gen.ACTIONS[act]
        d = getattr(gen, "d_" + act)
        sd, td = _d(gen, s), _d(gen, t)
        for args in itertools.product(universe, repeat=len(params)):
            want = _verdict(lambda: d(C, sd, td, *args))
            got = _gen_verdict(fn(C, sd, td, *args))
            if want is not True and got is not True:
                continue  # both reject (an error and FALSE are both a rejection)
            assert got == want, f"{name}.{act}{args}: act {got}, expression {want}"


def _same_failure(a, b) -> bool:
    if a is None or b is None:
        return a is b
    return (a.property, a.index, a.error is None) == (b.property, b.index, b.error is None)


def test_incremental_forms_agree(world):
    """inc_<I> over every element is inv_<I>; over a subset it may only pass more often
    (a failure it reports is a failure of inv_<I>, and where inv_<I> holds it holds)."""
    name, _, gen, C, states, _ = world
    rng = random.Random(2)
    checked = 0
    for s in states + _mutants(states, gen.VARIABLES, rng, MUTATIONS):
        sd = _d(gen, s)
        for n, (inc, domains) in gen.INCREMENTAL.items():
            full = gen.INVARIANTS[n](C, sd)
            everything = {dom: C[dom] for dom in domains}
            assert _same_failure(inc(C, sd, everything), full), f"{name}.{n} on {sd}"
            some = {dom: frozenset(x for x in sorted(C[dom]) if rng.random() < 0.5) for dom in domains}
            part = inc(C, sd, some)
            assert part is None or full is not None, f"{name}.{n}: a subset failed where the whole holds"
            checked += 1
    assert checked or not gen.INCREMENTAL


class _Unread:
    """A value no evaluation may touch: comparing, hashing, iterating or applying it raises."""
    __slots__ = ()

    def _no(self, *a, **k):
        raise AssertionError("an invariant read a variable READS does not list")
    __eq__ = __ne__ = __hash__ = __iter__ = __len__ = __contains__ = __lt__ = __le__ = __gt__ = __ge__ = _no
    __bool__ = __getitem__ = __add__ = __sub__ = __index__ = _no


def test_reads_lists_every_variable_an_invariant_reads(world):
    """READS[I] is what lets a monitor skip I after a step that changed none of them: with
    every other variable replaced by a value that raises when touched, inv_<I> gives the
    same verdict on reachable and mutated states."""
    name, _, gen, C, states, _ = world
    rng = random.Random(3)
    for s in states[:400] + _mutants(states, gen.VARIABLES, rng, 100):
        sd = _d(gen, s)
        for n, inv in gen.INVARIANTS.items():
            reads = gen.READS[n]
            hidden = {v: (x if v in reads else _Unread()) for v, x in sd.items()}
            assert _same_failure(inv(C, hidden), inv(C, sd)), f"{name}.{n} reads beyond {sorted(reads)}"


def test_incremental_forms_skip_only_unchanged_conjuncts(world):
    """inc_<I>(C, t, D, V) with V the variables that differ between s and t, where inv_<I>
    held on s: the conjuncts it skips read nothing in V, so it reports exactly what inv_<I>
    reports on t (checked on real transitions and on successors mutated in one variable)."""
    name, _, gen, C, states, edges = world
    rng = random.Random(4)
    pairs = [(s, t) for s, _, t in edges[:1500]]
    for s, t in list(pairs):
        m = list(t)
        j = rng.randrange(len(m))
        m[j] = rng.choice(states)[j]      # (a reachable value of the same variable)
        pairs.append((s, tuple(m)))
    checked = 0
    for s, t in pairs:
        sd, td = _d(gen, s), _d(gen, t)
        V = {v for v in gen.VARIABLES if sd[v] != td[v]}
        for n, (inc, domains) in gen.INCREMENTAL.items():
            if gen.INVARIANTS[n](C, sd) is not None:
                continue
            everything = {dom: C[dom] for dom in domains}
            assert _same_failure(inc(C, td, everything, V), gen.INVARIANTS[n](C, td)), f"{name}.{n} V={V}"
            checked += 1
    assert checked or not gen.INCREMENTAL


def test_fused_fast_path_agrees_with_the_forms(world):
    """inc_all(C, s, D, V, skip) is True only when every inc_<I> not in skip holds on
    (s, D, V) (what lets the monitor skip them), and on reachable states it is True
    whenever they all hold (the one pass is not a slower path in disguise)."""
    name, _, gen, C, states, _ = world
    if not gen.INCREMENTAL:
        return
    rng = random.Random(5)
    names = sorted(gen.INCREMENTAL)
    reachable = set(states)
    for s in states[:600] + _mutants(states, gen.VARIABLES, rng, 200):
        sd = _d(gen, s)
        domains = {d for _, doms in gen.INCREMENTAL.values() for d in doms}
        D = {dom: frozenset(x for x in sorted(C[dom]) if rng.random() < 0.7) for dom in domains}
        V = None if rng.random() < 0.3 else {v for v in gen.VARIABLES if rng.random() < 0.4}
        skip = frozenset(n for n in names if rng.random() < 0.2)
        each = all(gen.INCREMENTAL[n][0](C, sd, D, V) is None for n in names if n not in skip)
        fused = gen.inc_all(C, sd, D, V, skip)
        assert not fused or each, f"{name}: inc_all holds where a form fails (V={V}, skip={skip})"
        if s in reachable:
            assert fused == each, f"{name}: inc_all fails on a reachable state where every form holds"


def _native_agrees(name, gen, C, fast, sd, rng, odds) -> bool:
    """The verdict of gen.inc_all on state sd over random dirty elements, changed variables
    and skipped invariants, after asserting the native `fast` gives the same one. `odds`:
    (an element dirty, every variable changed (V None), a variable changed, an invariant
    skipped)."""
    dirty, every, changed, skipped = odds
    domains = {d for _, doms in gen.INCREMENTAL.values() for d in doms}
    D = {dom: frozenset(x for x in sorted(C[dom], key=repr) if rng.random() < dirty) for dom in domains}
    V = None if rng.random() < every else {v for v in gen.VARIABLES if rng.random() < changed}
    skip = frozenset(n for n in sorted(gen.INCREMENTAL) if rng.random() < skipped)
    want = gen.inc_all(C, sd, D, V, skip)
    assert fast(C, sd, D, V, skip) is want, f"{name}: native inc_all differs on {sd} (V={V}, skip={skip})"
    return want


def _native_pass(name: str, gen):
    """The spec's fused pass as it serves natively; the test skipped, by name, where there is
    none to compare (no incremental checks, no native module, a pass that does not translate)."""
    from hicache.monitors import fused_native, native
    if not gen.INCREMENTAL:
        pytest.skip(f"{name} has no incremental checks")
    if native.module() is None or fused_native.translate(gen.inc_all) is None:
        pytest.skip(f"no native module, or {name}'s fused pass does not translate")
    return fused_native.native_inc_all(gen)


def test_native_element_loops_decide_as_the_generated_python(world):
    """inc_all with its element loops compiled to C (monitors/fused_native.py: what the
    monitors run where it builds) returns what the generated Python returns, on reachable,
    mutated and crossed (TRUE for 1) states, over random dirty elements, changed variables
    and skipped invariants; where it cannot build, it is the generated function itself."""
    from hicache.monitors import fused_native, native
    name, _, gen, C, states, _ = world
    if not gen.INCREMENTAL:
        return
    fast = fused_native.native_inc_all(gen)
    if native.module() is not None and fused_native.translate(gen.inc_all) is not None:
        assert fast is not gen.inc_all, f"{name}: the native loops did not build"
    # (what serves, the function compiled whole where it translates, and the fallback with
    # only its loops in C)
    looped = fused_native.loops_native(gen) if native.module() is not None else None
    for form in (fast, looped):
        if form is None:
            continue
        rng = random.Random(8)
        inputs = states[:400] + _mutants(states, gen.VARIABLES, rng, 200) + \
            _crossed_states(states, gen.VARIABLES, rng, 200)
        decided = collections.Counter()
        for s in inputs:
            decided[_native_agrees(name, gen, C, form, _d(gen, s), rng, (0.7, 0.3, 0.5, 0.2))] += 1
        # (both verdicts occur: the comparison is not between two functions that always hold)
        assert decided[True] and decided[False], f"{name}: {decided}"


def test_the_native_pass_reuses_nothing_changed_in_place(world):
    """The pass compiled whole keeps, between calls, what it read of the constants binding,
    of skip and the readers it made of the state's values (fused_whole's item_at, member_at,
    reader): handed the same dict of constants changed in place, the same skip and the same
    state dict whose function values' dicts were replaced, it decides as the generated
    Python does on every call, as it does on fresh objects."""
    from hicache.tla.values import Fcn
    name, _, gen, C, states, _ = world
    fast = _native_pass(name, gen)
    rng = random.Random(11)
    domains = {d for _, doms in gen.INCREMENTAL.values() for d in doms}
    names = sorted(C, key=repr)
    same_C, same_s = dict(C), {}
    inputs = states[:150] + _mutants(states, gen.VARIABLES, rng, 150)
    decided = collections.Counter()
    for s in inputs:
        same_C.clear()
        same_C.update(C)
        if rng.random() < 0.5:          # (a constant's value swapped with another's, in place)
            a, b = rng.choice(names), rng.choice(names)
            same_C[a], same_C[b] = C[b], C[a]
        for v, x in _d(gen, s).items():
            old = same_s.get(v)
            if type(x) is Fcn and type(old) is Fcn and rng.random() < 0.5:
                old.d = x.d             # (the same function object, another dict: Fcn's slot)
            else:
                same_s[v] = Fcn(x.d) if type(x) is Fcn else x      # (a copy: `states` stays as it is)
        D = {dom: frozenset(x for x in sorted(C[dom], key=repr) if rng.random() < 0.7) for dom in domains}
        V = None if rng.random() < 0.3 else {v for v in gen.VARIABLES if rng.random() < 0.5}
        skip = frozenset(n for n in sorted(gen.INCREMENTAL) if rng.random() < 0.2)
        want = gen.inc_all(same_C, same_s, D, V, skip)
        assert fast(same_C, same_s, D, V, skip) is want, f"{name}: native inc_all differs on {same_s}"
        decided[want] += 1
    assert decided[True] and decided[False], f"{name}: {decided}"


def _moved(d: dict, rng) -> dict:
    """d's mapping in a dict that holds its keys at other entries than d's order gives them
    (shuffled), a third of them deleted and added again (their first entries left dead)."""
    keys = sorted(d, key=repr)
    rng.shuffle(keys)
    out = {k: d[k] for k in keys}
    for k in keys[:len(keys) // 3]:
        out[k] = out.pop(k)
    return out


def _copy_str(v):
    """v, a str, as another object equal to it (not the interned name), else v."""
    return "".join(list(v)) if type(v) is str and len(v) > 1 else v


def _domains_and_inputs(gen, states: list, rng: random.Random) -> tuple[list, list]:
    """The domains the pass's invariants range over (sorted) and the states to run it on: 200
    reachable ones, 100 mutated and 100 crossed (drawn from rng, in that order)."""
    domains = sorted({d for _, doms in gen.INCREMENTAL.values() for d in doms})
    return domains, states[:200] + _mutants(states, gen.VARIABLES, rng, 100) + \
        _crossed_states(states, gen.VARIABLES, rng, 100)


def test_the_native_pass_reads_entries_wherever_they_are(world):
    """The pass compiled whole reads a function's value at a position off the entry the
    position numbers, a state's or a domain's value by name off the entry the key was found
    at last, and tests a name in V at the first slot its hash probes (fused_native's
    int_entry and set_first_probe, fused_whole's str_item_at), each checked against the key
    it finds there: on states whose dicts hold their keys elsewhere (shuffled, deleted and
    added again, a name as an equal str that is not the interned one), on the same state
    and domain dicts changed so from call to call, and with V holding names removed and
    added again (dummies in its table), it decides as the generated Python does."""
    from hicache.tla.values import Fcn
    name, _, gen, C, states, _ = world
    fast = _native_pass(name, gen)
    rng = random.Random(13)
    domains, inputs = _domains_and_inputs(gen, states, rng)
    same_s, same_D = {}, {}
    decided = collections.Counter()
    for s in inputs:
        sd = {v: Fcn(_moved(x.d, rng)) if type(x) is Fcn and rng.random() < 0.7 else x
              for v, x in _d(gen, s).items()}
        D = {dom: frozenset(x for x in sorted(C[dom], key=repr) if rng.random() < 0.7) for dom in domains}
        if rng.random() < 0.5:
            # (the same dicts, each key deleted and added again in another order, or under
            # an equal str that is not the interned name)
            for held, new in ((same_s, sd), (same_D, D)):
                held.clear()
                for k in sorted(new, key=lambda _: rng.random()):
                    held[_copy_str(k) if rng.random() < 0.2 else k] = new[k]
            sd, D = same_s, same_D
        else:
            sd, D = _moved(sd, rng), _moved(D, rng)
        V = None
        if rng.random() < 0.8:
            V = {_copy_str(v) if rng.random() < 0.2 else v for v in gen.VARIABLES if rng.random() < 0.5}
            if rng.random() < 0.5:
                gone = {f"{v}_gone" for v in gen.VARIABLES}
                V |= gone
                V -= gone
        skip = frozenset(n for n in sorted(gen.INCREMENTAL) if rng.random() < 0.2)
        want = gen.inc_all(C, sd, D, V, skip)
        assert fast(C, sd, D, V, skip) is want, f"{name}: native inc_all differs on {sd} (D={D}, V={V})"
        decided[want] += 1
    assert decided[True] and decided[False], f"{name}: {decided}"


def test_the_native_pass_walks_whole_domains_as_python_does(world):
    """Handed the domains themselves (what the monitor hands over under a new binding, or for
    every request when `len` changed: intervals 1..n among them), or an empty interval, the
    pass compiled whole decides as the generated Python on every call: an interval's truth and
    its elements (fused_whole's each) are read off its bounds, and a sequence is read by the
    pass's own reader (SeqAt), on reachable, mutated and crossed states."""
    from hicache.tla.values import Interval
    name, _, gen, C, states, _ = world
    fast = _native_pass(name, gen)
    rng = random.Random(12)
    domains, inputs = _domains_and_inputs(gen, states, rng)
    decided = collections.Counter()
    for s in inputs:
        sd = _d(gen, s)
        D = {dom: C[dom] if rng.random() < 0.8 else Interval(1, 0) for dom in domains}
        V = None if rng.random() < 0.5 else {v for v in gen.VARIABLES if rng.random() < 0.5}
        skip = frozenset(n for n in sorted(gen.INCREMENTAL) if rng.random() < 0.2)
        want = gen.inc_all(C, sd, D, V, skip)
        assert fast(C, sd, D, V, skip) is want, f"{name}: native inc_all differs on {sd} (D={D}, V={V})"
        decided[want] += 1
    assert decided[True] and decided[False], f"{name}: {decided}"


class _Defaulting(dict):
    """A function's dict that answers a missing key (`__missing__`): `d[k]` of it is not a
    plain dict's lookup, and a native loop must ask it as Python does."""
    def __missing__(self, key):
        return next(iter(self.values()))


def _holed(states, variables, rng, count):
    """States with one function value missing a key of its domain: the dict itself (a read
    of the key raises KeyError), or that dict as a `_Defaulting` (the read answers)."""
    from hicache.tla.values import Fcn
    out = []
    for _ in range(count):
        s = list(rng.choice(states))
        at = [i for i, v in enumerate(s) if type(v) is Fcn and len(v.d) > 1]
        if not at:
            continue
        i = rng.choice(at)
        d = dict(s[i].d)
        del d[rng.choice(sorted(d, key=repr))]
        s[i] = Fcn(_Defaulting(d) if rng.random() < 0.5 else d)
        out.append((tuple(s), type(s[i].d) is _Defaulting))
    return out


def test_native_element_loops_read_a_function_as_python_does(world):
    """A native loop reads a function value's dict by its own lookup where the generated
    Python calls `d.__getitem__` (fused_native's call1): on states where a function misses
    a key of its domain, the two decide alike, the plain dict's missing key an exception
    (the fast path does not decide: False) and a dict subclass's `__missing__` answered."""
    from hicache.monitors import fused_native
    name, _, gen, C, states, _ = world
    if not gen.INCREMENTAL:
        return
    fast = fused_native.native_inc_all(gen)
    rng = random.Random(9)
    decided = collections.Counter()
    holed = _holed(states, gen.VARIABLES, rng, 300)
    for s, defaulting in holed:
        decided[defaulting, _native_agrees(name, gen, C, fast, _d(gen, s), rng, (0.9, 0.5, 0.7, 0.1))] += 1
    if holed:
        # (a missing key fails the fast path, a subclass's answer can let it hold)
        assert decided[False, False] and decided[True, True], f"{name}: {decided}"


def test_the_native_pass_releases_what_it_read_on_every_exit(world):
    """The pass compiled whole (and its element loops) releases what it read on every way
    out: on reachable states (it holds), mutated ones (it fails: `goto fail`) and holed ones
    (a read raises: `goto done` with an error), each value of the state and of the constants
    has the reference count it had before three calls (after a first, which may cache). A
    reference kept on one of those exits would show here as a count grown by 3 (a generator
    whose exit released nothing failed it)."""
    import sys

    name, _, gen, C, states, _ = world
    fast = _native_pass(name, gen)
    rng = random.Random(10)
    inputs = states[:200] + _mutants(states, gen.VARIABLES, rng, 100) + \
        [s for s, _ in _holed(states, gen.VARIABLES, rng, 100)]
    domains = {d for _, doms in gen.INCREMENTAL.values() for d in doms}
    verdicts = collections.Counter()

    def more_mutants():
        # (a mutant fails the pass only where its changed variable is among those asked
        # and its element among the domains drawn: ~4 of these 400 inputs on PDHandoff,
        # none for ~1 order of reachable states in 100, which the hash seed sets; so
        # mutants are drawn on, at most 2,000, until the failing exit has been taken)
        for _ in range(2000):
            if verdicts[False]:
                return
            yield _mutants(states, gen.VARIABLES, rng, 1)[0]
    for s in itertools.chain(inputs, more_mutants()):
        sd = _d(gen, s)
        D = {dom: frozenset(x for x in sorted(C[dom], key=repr) if rng.random() < 0.7) for dom in domains}
        V = None if rng.random() < 0.3 else {v for v in gen.VARIABLES if rng.random() < 0.5}
        # (the values themselves and a function value's dict; not the shared scalars, None,
        # booleans, small ints, interned strings, whose counts other code moves too)
        held = [x for x in (*sd.values(), *(getattr(v, "d", None) for v in sd.values()), *C.values(), *D.values())
                if x is not None and not isinstance(x, (bool, int, str))]
        fast(C, sd, D, V)      # (a first call may cache what it derives from a constant, once)
        before = [sys.getrefcount(x) for x in held]
        for _ in range(3):
            verdicts[fast(C, sd, D, V)] += 1
        assert [sys.getrefcount(x) for x in held] == before, f"{name}: references kept on {sd}"
    assert verdicts[True] and verdicts[False], f"{name}: {verdicts}"


def _int_range_variants(v: frozenset, k: str) -> list:
    """Sets in place of the constant v (a frozenset of ints) at an element loop's `x in r`:
    v itself (an interval lo..hi where the spec's is), a wider interval, and frozensets that
    are no interval of exact ints (a hole, a str, a float, an int past 64 bits), and a
    mutable set (which the test changes between calls)."""
    lo, hi = min(v), max(v)
    holed = (v - {sorted(v)[len(v) // 2]}) if len(v) > 2 else v | {hi + 2}
    return [v, v | {hi + 1, lo - 1}, holed, v | {f"x{k}"}, (v - {hi}) | {float(hi)}, v | {2 ** 70}, set(v)]


def _odd_value(rng, bounds):
    """A value an element loop may meet where the spec has an int of an interval: a bool, a
    float, a str, None, an int past 64 bits, or an int just outside (or at) the bounds."""
    lo, hi = rng.choice(bounds)
    return rng.choice((True, False, 1.0, float(hi), "x", None, 2 ** 70, -2 ** 70, lo - 1, hi + 1, lo, hi))


def test_the_native_pass_tests_membership_in_int_ranges_as_python_does(world):
    """An element loop's `x in r` keeps, per site, the frozenset it last met and whether it
    holds exactly the ints lo..hi (fused_native's contains_at: then a bounds test for an
    exact int of 64 bits): with those constants replaced, from call to call, by frozensets
    that are another interval or none (a hole, a str, a float, a big int), by a mutable set
    changed between calls, or kept, and with function values of other types at random keys
    (a bool, a float, a str, None, an int past 64 bits or outside the bounds), the pass
    compiled whole and its loops alone decide as the generated Python."""
    from hicache.monitors import fused_native
    from hicache.tla.values import Fcn
    name, _, gen, C, states, _ = world
    _native_pass(name, gen)
    ranges = sorted(k for k, v in C.items() if type(v) is frozenset and len(v) > 1 and all(type(x) is int for x in v))
    if not ranges:
        pytest.skip(f"{name}'s constants hold no set of ints")
    bounds = [(min(C[k]), max(C[k])) for k in ranges]
    constants = [C]
    for k in ranges:
        for r in _int_range_variants(C[k], k):
            c = dict(C)
            c[k] = r
            constants.append(c)
    forms = (fused_native.native_inc_all(gen), fused_native.loops_native(gen))
    rng = random.Random(13)
    decided = collections.Counter()
    for s in states[:200] + _mutants(states, gen.VARIABLES, rng, 200):
        sd = _d(gen, s)
        fcns = [v for v in gen.VARIABLES if type(sd[v]) is Fcn and sd[v].d]
        if fcns and rng.random() < 0.7:
            v = rng.choice(fcns)
            d = dict(sd[v].d)
            d[rng.choice(sorted(d, key=repr))] = _odd_value(rng, bounds)
            sd[v] = Fcn(d)
        c = rng.choice(constants)
        for r in c.values():
            if type(r) is set:          # (a mutable set at a site: changed since the last call)
                r.symmetric_difference_update({rng.choice(bounds)[1] + rng.randrange(-1, 2)})
        for form in forms:
            decided[_native_agrees(name, gen, c, form, sd, rng, (0.9, 0.5, 0.7, 0.1))] += 1
    assert decided[True] and decided[False], f"{name}: {decided}"

# ---------------------------------------------------------------- booleans are not integers
# Python's True == 1 (and False == 0, with equal hashes): a refinement map that writes a
# boolean where the spec has an integer (a slot id, NoSlot) or the reverse would pass
# `host[n] \in HSlots \cup {NoSlot}` by Python's `in`. The interpreter refuses it (TLC's
# "attempted to compare"): so must the monitors.

def _other_kind(x):
    """The value Python's equality pairs with x of the other kind: 1 for TRUE, FALSE for 0.
    (Not a dict: its keys True and 1 would be one key.)"""
    return int(x) if type(x) is bool else bool(x)


def _crossed(v, rng):
    """v with one boolean replaced by the integer Python's equality pairs it with, or one 0/1
    integer by the boolean (at the top level or one level inside a sequence or function);
    None when v holds neither."""
    from hicache.tla.values import Fcn
    if type(v) in (bool, int) and v in (0, 1):
        return _other_kind(v)
    if type(v) is tuple:
        at = [i for i, x in enumerate(v) if type(x) in (bool, int) and x in (0, 1)]
        if at:
            i = rng.choice(at)
            return v[:i] + (_other_kind(v[i]),) + v[i + 1:]
    if type(v) is Fcn:
        at = [k for k, x in v.d.items() if type(x) in (bool, int) and x in (0, 1)]
        if at:
            k = rng.choice(sorted(at, key=repr))
            d = dict(v.d)
            d[k] = _other_kind(d[k])
            return Fcn(d)
    return None


def _crossed_states(states, variables, rng, count):
    out = []
    for _ in range(count * 4):
        s = list(rng.choice(states))
        i = rng.randrange(len(variables))
        c = _crossed(s[i], rng)
        if c is not None:
            s[i] = c
            out.append(tuple(s))
        if len(out) == count:
            break
    return out


def test_a_boolean_for_an_integer_is_refused_like_the_interpreter_does(world):
    """On states where one value has the other kind (TRUE for 1, 0 for FALSE, inside a
    function or a sequence too): the generated invariants reject exactly the states the
    interpreter rejects (an invariant FALSE or an evaluation error), TypeOK among them, and
    neither the incremental forms nor the fused fast path let one through."""
    name, ck, gen, C, states, _ = world
    rng = random.Random(6)
    interp = {n: ck.model.def_value(n) for n in gen.INVARIANTS}
    crossed = _crossed_states(states, gen.VARIABLES, rng, 200)
    assert len(crossed) >= 50, f"{name}: too few states with a 0/1 or a boolean to cross"
    rejected = 0
    for s in crossed:
        sd = _d(gen, s)
        want = any(_verdict(lambda: interp[n](s, None, ())) is not True for n in gen.INVARIANTS)
        got = {n: inv(C, sd) for n, inv in gen.INVARIANTS.items()}
        assert any(f is not None for f in got.values()) == want, f"{name} on {sd}: generated {got}"
        if not want:
            continue
        rejected += 1
        # (the interpreter refuses every crossed value: TypeOK names the wrong kind)
        assert got["TypeOK"] is not None, f"{name}.TypeOK holds on {sd}"
        if gen.INCREMENTAL:
            domains = {d for _, doms in gen.INCREMENTAL.values() for d in doms}
            D = {dom: C[dom] for dom in domains}
            inc, _ = gen.INCREMENTAL["TypeOK"]
            assert inc(C, sd, {dom: C[dom] for dom in gen.INCREMENTAL["TypeOK"][1]}) is not None
            assert gen.inc_all(C, sd, D, None) is False, f"{name}: inc_all holds on {sd}"
    assert rejected == len(crossed), f"{name}: the interpreter accepted a crossed state"


# ---------------------------------------------------------------- states mapped from scratch
# A sampled step and a cache check map the state from scratch and check it through the fused
# fast path over every element (runtime.first_failure), after testing the domains its
# element-wise `f \in [Dom -> S]` conjuncts take as given (rt.domain_is).

def _domain_mutants(states, gen, rng, count):
    """(state, whether a key was added) pairs: one function variable of an element-wise
    conjunct given one key more or one fewer; TypeOK's exact form fails on each."""
    from hicache.tla.values import Fcn
    pairs = sorted({g for given in gen.FCN_DOMAINS.values() if given for g in given})
    out = []
    for _ in range(count):
        sd = _d(gen, rng.choice(states))
        var, _dom = rng.choice(pairs)
        f = sd[var]
        d = dict(f.d) if type(f) is Fcn else {i: x for i, x in enumerate(f, 1)}
        added = not d or rng.random() < 0.5
        if added:
            # a key of the domain's own kind (an integer past any domain, or a string no
            # domain holds), so no comparison across kinds decides the test
            ints = all(type(k) is int for k in d)
            d[max(d, default=0) + 100 if ints else "~outside~"] = next(iter(d.values()), 0)
        else:
            del d[rng.choice(sorted(d))]
        sd[var] = Fcn(d)
        out.append((sd, added))
    return out


def test_a_state_mapped_from_scratch_fails_as_the_exact_forms_do(world):
    """first_failure (the fused fast path over every element, then the forms it does not
    cover) names the same failure as the exact forms run in order, on reachable, mutated,
    boolean-crossed and domain-changed states. On a state whose function has a key outside
    its domain, TypeOK's fast path alone holds where its exact form fails (the key is no
    element it visits): what the domain test is for."""
    from hicache.monitors.runtime import first_failure, fused_over_all
    name, _, gen, C, states, _ = world
    fast = fused_over_all(gen, gen.INVARIANTS, {})
    if not gen.INCREMENTAL:
        assert fast is None
        return
    assert fast is not None and "TypeOK" in fast[0], f"{name}: TypeOK is not decided by the fast path"
    rng = random.Random(8)
    samples = [_d(gen, s) for s in states[:500] + _mutants(states, gen.VARIABLES, rng, 200)
               + _crossed_states(states, gen.VARIABLES, rng, 100)]
    changed = _domain_mutants(states, gen, rng, 100)
    for sd in samples + [sd for sd, _ in changed]:
        exact = next((f for f in (inv(C, sd) for inv in gen.INVARIANTS.values()) if f is not None), None)
        got = first_failure(gen, fast, C, sd, gen.INVARIANTS)
        assert _same_failure(got, exact), f"{name} on {sd}: {got} against the exact forms' {exact}"
    domains = {d: C[d] for _, doms in gen.INCREMENTAL.values() for d in doms}
    only_type_ok = frozenset(gen.INCREMENTAL) - {"TypeOK"}
    passed_unguarded = 0
    for sd, added in changed:
        assert gen.INVARIANTS["TypeOK"](C, sd) is not None, f"{name}: TypeOK holds on {sd}"
        passed_unguarded += added and gen.inc_all(C, sd, domains, None, only_type_ok)
    assert passed_unguarded, f"{name}: no state with a key outside its domain passed TypeOK's unguarded fast path"
