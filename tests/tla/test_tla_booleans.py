"""TRUE is no integer. A Python bool is an int (True == 1, hash(True) == hash(1)), so the
checker took TRUE for 1 wherever Python's equality, sets or dicts met them: `<<1>> = <<TRUE>>`,
`[a |-> 1] = [a |-> TRUE]` and `1 \\in BOOLEAN` held, `{TRUE, 1}` had one element, and two
states differing only by 1 where the other has TRUE were one state to the seen-set. TLC refuses
to compare a boolean with an integer ("Attempted to compare ...", an evaluation error), and
its fingerprints tell the two states apart. Each expression is one definition of one module,
evaluated on its own (the parser dominates the cost)."""
from __future__ import annotations

import itertools

import pytest

from hicache.tla.compiler import Model
from hicache.tla.errors import EvalError
from hicache.tla.loader import Loader
from tla_testlib import check_text, write_module

_counter = itertools.count()

#: each refused: a boolean paired with an integer by Python's equality
REFUSED = [
    "<<1>> = <<TRUE>>", "<<1>> # <<TRUE>>", "<<FALSE, 2>> = <<0, 2>>", "[a |-> 1] = [a |-> TRUE]",
    "[a |-> 1, b |-> 2] # [a |-> TRUE, b |-> 2]", "{<<1>>} = {<<TRUE>>}", "{{TRUE}} = {{1}}",
    "<<[a |-> {1}]>> = <<[a |-> {TRUE}]>>",
    "1 \\in BOOLEAN", "0 \\in BOOLEAN", "1 \\notin BOOLEAN", "<<1>> \\in {<<TRUE>>}", "TRUE \\in {0, 1}",
    "{TRUE, 1}", "Cardinality({TRUE, 1})", "{FALSE, 0, 5}", "{<<1>>, <<TRUE>>}", "{[a |-> 1], [a |-> TRUE]}",
    "{IF x = 1 THEN TRUE ELSE 1 : x \\in 1..2}", "UNION {{1}, {TRUE}}",
    "{1} \\cup {TRUE}", "{1, 2} \\cap {TRUE}", "{1, 2} \\ {TRUE}", "{1} \\subseteq {TRUE}",
    "[b \\in BOOLEAN |-> 0][1]", "(TRUE :> 1) @@ (1 :> 2)", "[x \\in {<<1>>} |-> 0][<<TRUE>>]",
    "<<TRUE, FALSE>> \\in [1..2 -> {0, 1}]", "<<0>> \\in [{TRUE} -> Nat]", "(0 :> 5 @@ 1 :> 6) \\in [BOOLEAN -> Nat]",
    "CASE <<TRUE>> = <<1>> -> 1 [] OTHER -> 2",
]
#: the same forms between values of one kind: unchanged
ALLOWED = [
    ("<<1>> = <<1>>", True), ("<<TRUE>> = <<TRUE>>", True), ("[a |-> TRUE] = [a |-> TRUE]", True),
    ("{<<1>>} = {<<1>>}", True), ("TRUE \\in BOOLEAN", True), ("1 \\in {0, 1}", True),
    ("Cardinality({TRUE, FALSE, TRUE})", 2), ("Cardinality({<<1>>, <<1>>, <<2>>})", 2),
    ("[b \\in BOOLEAN |-> 0][TRUE]", 0), ("{1} \\cup {1, 2}", frozenset({1, 2})),
    ("<<TRUE, FALSE>> \\in [1..2 -> BOOLEAN]", True), ("[x \\in {1} |-> 1] = <<1>>", True),
]


def _eval_each(tmp_path, exprs):
    """Each expression's value, or the EvalError it raised, from one module."""
    name = f"B{next(_counter)}"
    path = write_module(tmp_path, name, "\n".join(f"E{i} == {e}" for i, e in enumerate(exprs)))
    loader = Loader([tmp_path])
    model = Model(loader, loader.load_file(path), {}, {})
    out = []
    for i in range(len(exprs)):
        try:
            out.append(model.def_value(f"E{i}")((), None, ()))
        except EvalError as e:
            out.append(e)
    return path, out


def test_a_boolean_paired_with_an_integer_is_a_located_error(tmp_path):
    path, got = _eval_each(tmp_path, REFUSED)
    bad = [(e, g) for e, g in zip(REFUSED, got) if not isinstance(g, EvalError)]
    assert not bad, "\n".join(f"{e}: {g!r} (expected an evaluation error)" for e, g in bad)
    for i, (expr, err) in enumerate(zip(REFUSED, got)):
        assert "attempted to compare" in err.message and "boolean" in err.message and "integer" in err.message, \
            (expr, err.message)
        # located in the definition's line (the module header takes 2 lines)
        assert err.loc is not None and err.loc.file == str(path) and err.loc.line == 3 + i, (expr, err.loc)


def test_tuple_and_record_equality_name_the_pair_and_the_operator(tmp_path):
    _, (tup, rec) = _eval_each(tmp_path, ["<<1>> = <<TRUE>>", "[a |-> 1] = [a |-> TRUE]"])
    assert (tup.loc.line, tup.loc.col) == (3, 7)    # at the `=`'s expression, as TLC's trace
    assert tup.message == "attempted to compare an integer 1 with a boolean TRUE (comparing <<1>> with <<TRUE>>)"
    assert (rec.loc.line, rec.loc.col) == (4, 7)
    assert "integer 1 with a boolean TRUE" in rec.message and "[a |-> 1]" in rec.message


def test_one_in_boolean_is_an_error_as_in_tlc(tmp_path):
    """TLC's BOOLEAN is the enumerated set {FALSE, TRUE}: its membership test compares 1 with
    its elements and stops ("Attempted to compare integer 1 with non-integer")."""
    _, (one, zero, true) = _eval_each(tmp_path, ["1 \\in BOOLEAN", "0 \\in BOOLEAN", "TRUE \\in BOOLEAN"])
    assert isinstance(one, EvalError) and "integer 1 with a boolean TRUE" in one.message
    assert isinstance(zero, EvalError) and "integer 0 with a boolean FALSE" in zero.message
    assert true is True


def test_true_and_one_in_one_set_is_an_error(tmp_path):
    _, (s,) = _eval_each(tmp_path, ["{TRUE, 1}"])
    assert isinstance(s, EvalError) and "boolean TRUE with an integer 1" in s.message


def test_values_of_one_kind_still_compare(tmp_path):
    _, got = _eval_each(tmp_path, [e for e, _ in ALLOWED])
    bad = [(e, want, g) for (e, want), g in zip(ALLOWED, got) if g != want or type(g) is not type(want)]
    assert not bad, bad


ONE_OR_TRUE = """---- MODULE OneOrTrue ----
EXTENDS TLC
VARIABLES x, y
Init == x = 0 /\\ y = 0
\\* x becomes 1 or TRUE in two states that differ only there; nothing compares x with another kind
Next == /\\ y = 0
        /\\ y' = 1
        /\\ \\/ x' = 1
           \\/ x' = TRUE
NotTrue == ToString(x) # "TRUE"
====
"""


@pytest.mark.parametrize("inv, result, distinct", [("", "ok", 3), ("INVARIANT NotTrue\n", "invariant", 3)])
def test_states_differing_only_by_one_and_true_are_two_states(tmp_path, inv, result, distinct):
    """TLC's fingerprints tell <<1, 1>> from <<TRUE, 1>>: 3 distinct states, and the second
    one, reached after the first, breaks NotTrue. The seen-set here took them for one state
    (2 distinct; NotTrue held)."""
    res = check_text(tmp_path, "OneOrTrue", ONE_OR_TRUE, "INIT Init\nNEXT Next\nCHECK_DEADLOCK FALSE\n" + inv)
    assert (res.result, res.distinct, res.generated) == (result, distinct, 3), (res.result, res.error)
    if result == "invariant":
        assert res.violated == "NotTrue" and [s.state for s in res.trace] == [(0, 0), (True, 1)]
        assert type(res.trace[-1].state[0]) is bool


@pytest.mark.parametrize("nxt, col", [("x' = <<1>> /\\ x' = <<TRUE>>", 23),
                                      ("x' = <<TRUE>> /\\ UNCHANGED x", 26),
                                      ("<<x' = <<TRUE>> >>_x", 9)])
def test_an_action_comparing_one_with_true_is_a_located_error(tmp_path, nxt, col):
    """A conjunct of an assigned variable, UNCHANGED and <<A>>_v compare values: errors where
    Python's <<1>> = <<TRUE>> held (the successor was taken for x's own value)."""
    spec = f"---- MODULE ActCmp ----\nVARIABLES x\nInit == x = <<1>>\nNext == {nxt}\n====\n"
    res = check_text(tmp_path, "ActCmp", spec, "INIT Init\nNEXT Next\n")
    msg = res.error.message if res.result == "error" else res.result
    assert "boolean TRUE" in msg and "integer 1" in msg and "<<1>>" in msg, msg
    assert (res.error.loc.line, res.error.loc.col) == (4, col), res.error


def _pairs_by_brute_force(a, b):
    """Whether some x in a and y in b are equal to Python and one is a boolean where the
    other is an integer, at the top or inside a tuple (what cross_common looks for)."""
    def crossed(x, y):
        if type(x) is tuple and type(y) is tuple:
            return len(x) == len(y) and any(crossed(p, q) for p, q in zip(x, y))
        return x == y and (type(x) is bool) != (type(y) is bool)
    return any(x == y and crossed(x, y) for x in a for y in b)


@pytest.mark.parametrize("seed", range(4))
def test_common_elements_are_paired_across_kinds_exactly_when_brute_force_finds_it(seed):
    """cross_common (\\cup, \\cap, \\, \\subseteq) on sets of atoms, small and large (past
    the 64 elements where it stops scanning the larger side's types), with and without a
    boolean on either side, and with tuples: a pair found exactly where one exists."""
    import random

    from hicache.tla.values import cross_common
    rng = random.Random(seed)
    atoms = [0, 1, 2, 3, True, False, "a", (1,), (True,), (0, 2)]
    for _ in range(400):
        sets = []
        for _side in range(2):
            n = rng.choice([0, 1, 3, 10, 100, 300])
            xs = set(rng.sample(range(4, 2000), n))
            xs.update(rng.sample(atoms, rng.randrange(3)))
            sets.append(frozenset(xs))
        a, b = sets
        assert (cross_common(a, b) is not None) == _pairs_by_brute_force(a, b), (sorted(map(repr, a - b)), b & a)
