"""Bad input: every error is one located line (file:line:col), exit code 150+, and never a
Python traceback. The CLI runs in a subprocess so that stderr is what a user sees."""
from __future__ import annotations

import contextlib
import io
import json
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SPEC_OK = """---- MODULE {name} ----
EXTENDS Naturals
VARIABLE x
Init == x = 0
Next == x < 2 /\\ x' = x + 1
====
"""
CFG_OK = "INIT Init\nNEXT Next\nCHECK_DEADLOCK FALSE\n"


def run_check(tmp_path: Path, name: str, spec: str, cfg: str = CFG_OK, *extra: str, subprocess_: bool = False):
    """Run `hicache check --json`; in a subprocess (what a user sees) or, to save process
    start-ups, in this process with stdout/stderr captured (an escaping exception fails)."""
    (tmp_path / f"{name}.tla").write_text(spec.replace("{name}", name))
    (tmp_path / f"{name}.cfg").write_text(cfg)
    argv = ["check", str(tmp_path / f"{name}.tla"), "--json", "--no-progress",
            "--trace-out", str(tmp_path / "trace.itf.json"), *extra]
    if subprocess_:
        proc = subprocess.run([sys.executable, "-m", "hicache.cli", *argv],
                              capture_output=True, text=True, cwd=tmp_path, timeout=60)
        code, out, err = proc.returncode, proc.stdout, proc.stderr
    else:
        from hicache.cli.main import main
        o, e = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            code = main(argv)
        out, err = o.getvalue(), e.getvalue()
    assert "Traceback" not in err, err
    assert "Traceback" not in out, out
    payload = json.loads(out.strip().splitlines()[-1])
    return Result(code, out, err), payload


@dataclass(frozen=True, slots=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def assert_located(payload: dict, file: str, line: int | None = None, col: int | None = None):
    """The error names file:line:col (1-based); line/col checked when given."""
    assert payload["result"] == "error"
    msg = payload["error"]
    assert "\n" not in msg
    m = re.search(re.escape(file) + r":(\d+):(\d+)", msg)
    assert m, msg
    if line is not None:
        assert int(m.group(1)) == line, msg
    if col is not None:
        assert int(m.group(2)) == col, msg
    return msg


def test_ok_baseline(tmp_path):
    proc, payload = run_check(tmp_path, "Ok", SPEC_OK)
    assert proc.returncode == 0
    assert (payload["result"], payload["distinct"], payload["generated"], payload["depth"]) == ("ok", 3, 3, 3)


def test_tla_syntax_error(tmp_path):
    spec = SPEC_OK.replace("Next == x < 2 /\\ x' = x + 1", "Next == x < 2 /\\ x' = = x + 1")
    proc, payload = run_check(tmp_path, "Syn", spec, subprocess_=True)
    assert proc.returncode >= 150
    assert_located(payload, "Syn.tla", 5)


def test_missing_module_end(tmp_path):
    proc, payload = run_check(tmp_path, "NoEnd", SPEC_OK.replace("====\n", ""))
    assert proc.returncode >= 150
    assert_located(payload, "NoEnd.tla")


def test_syntax_error_names_the_token_as_written(tmp_path):
    spec = SPEC_OK.replace("x' = x + 1", "x' = x + 1 /\\")
    proc, payload = run_check(tmp_path, "Bullet", spec)
    assert proc.returncode >= 150
    msg = assert_located(payload, "Bullet.tla")
    assert "syntax error at `/\\`" in msg and "NAME" not in msg, msg


def test_cfg_syntax_error(tmp_path):
    proc, payload = run_check(tmp_path, "CfgSyn", SPEC_OK, "INIT Init\nNEXT Next\nCONSTANTS\n  N = = 3\n", subprocess_=True)
    assert proc.returncode >= 150
    assert_located(payload, "CfgSyn.cfg", 4)


def test_cfg_unknown_section(tmp_path):
    proc, payload = run_check(tmp_path, "CfgSec", SPEC_OK, "INIT Init\nNEXTSTATE Next\n")
    assert proc.returncode >= 150
    assert_located(payload, "CfgSec.cfg", 2, 1)


def test_unknown_identifier(tmp_path):
    spec = SPEC_OK.replace("x' = x + 1", "x' = x + y")
    proc, payload = run_check(tmp_path, "Unk", spec)
    assert proc.returncode >= 150
    msg = assert_located(payload, "Unk.tla", 5)
    assert "y" in msg


def test_constant_not_given(tmp_path):
    spec = SPEC_OK.replace("VARIABLE x", "CONSTANT N\nVARIABLE x").replace("x < 2", "x < N")
    proc, payload = run_check(tmp_path, "NoConst", spec, subprocess_=True)
    assert proc.returncode >= 150
    msg = assert_located(payload, "NoConst.tla")
    assert "N" in msg


def test_cfg_names_undefined_invariant(tmp_path):
    proc, payload = run_check(tmp_path, "NoInv", SPEC_OK, CFG_OK + "INVARIANT Nope\n")
    assert proc.returncode >= 150
    assert "Nope" in payload["error"]


def test_operator_outside_its_domain(tmp_path):
    spec = SPEC_OK.replace("x' = x + 1", "x' = <<1, 2>>[x + 3]")
    proc, payload = run_check(tmp_path, "Dom", spec)
    assert proc.returncode >= 150
    assert_located(payload, "Dom.tla", 5)
    # an evaluation error names the state it happened in
    assert payload["result"] == "error"


def test_choose_without_witness(tmp_path):
    spec = SPEC_OK.replace("x' = x + 1", "x' = CHOOSE y \\in 1..3 : y > 5")
    proc, payload = run_check(tmp_path, "Choose", spec, subprocess_=True)
    assert proc.returncode >= 150
    msg = assert_located(payload, "Choose.tla", 5)
    assert "CHOOSE" in msg


def test_type_error_plus_set(tmp_path):
    spec = SPEC_OK.replace("x' = x + 1", "x' = 1 + {}")
    proc, payload = run_check(tmp_path, "Type", spec, subprocess_=True)
    assert proc.returncode >= 150
    msg = assert_located(payload, "Type.tla", 5)
    assert "+" in msg


def test_type_error_in_invariant(tmp_path):
    spec = SPEC_OK.replace("====", "Inv == x \\cup 1\n====")
    proc, payload = run_check(tmp_path, "InvType", spec, CFG_OK + "INVARIANT Inv\n")
    assert proc.returncode >= 150
    assert_located(payload, "InvType.tla", 6)


def test_non_boolean_invariant(tmp_path):
    spec = SPEC_OK.replace("====", "Inv == x + 1\n====")
    proc, payload = run_check(tmp_path, "InvNum", spec, CFG_OK + "INVARIANT Inv\n")
    assert proc.returncode >= 150
    assert "Inv" in payload["error"]


def test_evaluation_error_text_names_the_state(tmp_path):
    spec = SPEC_OK.replace("x' = x + 1", "x' = IF x = 1 THEN 10 \\div (1 - x) ELSE x + 1")
    (tmp_path / "State.tla").write_text(spec.replace("{name}", "State"))
    (tmp_path / "State.cfg").write_text(CFG_OK)
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "check", str(tmp_path / "State.tla"),
                           "--no-progress"], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode >= 150
    assert "Traceback" not in proc.stderr + proc.stdout
    text = proc.stdout + proc.stderr
    assert re.search(r"State\.tla:5:\d+", text), text
    assert "x = 1" in text      # the state in which 10 \div 0 was attempted


def test_missing_spec_file(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "hicache.cli", "check", str(tmp_path / "Nope.tla"), "--json"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode >= 150
    assert "Traceback" not in proc.stderr
    # the spec is named missing (not its default config, which follows from it)
    assert "no such spec file" in proc.stdout + proc.stderr and "Nope.cfg" not in proc.stdout + proc.stderr


def test_assume_violated(tmp_path):
    spec = SPEC_OK.replace("VARIABLE x", "ASSUME 1 > 2\nVARIABLE x")
    proc, payload = run_check(tmp_path, "Assume", spec)
    assert proc.returncode >= 150
    assert_located(payload, "Assume.tla", 3)


def test_unassigned_variable(tmp_path):
    spec = SPEC_OK.replace("VARIABLE x", "VARIABLES x, y").replace("Init == x = 0", "Init == x = 0 /\\ y = 0")
    proc, payload = run_check(tmp_path, "Unassigned", spec)
    assert proc.returncode >= 150
    assert "y" in payload["error"]


DEEP = SPEC_OK.replace("VARIABLE x", "RECURSIVE Loop(_)\nLoop(n) == Loop(n + 1)\nVARIABLE x") \
              .replace("x' = x + 1", "x' = Loop(x)")


def test_recursion_too_deep_is_an_error_not_a_crash(tmp_path):
    proc, payload = run_check(tmp_path, "Deep", DEEP)
    assert proc.returncode >= 150 and payload["result"] == "error"


def test_recursion_too_deep_is_located(tmp_path):
    proc, payload = run_check(tmp_path, "Deep", DEEP)
    assert_located(payload, "Deep.tla")


def test_cfg_undefined_name_located_in_cfg(tmp_path):
    proc, payload = run_check(tmp_path, "NoNext", SPEC_OK, "INIT Init\nNEXT Nxt\n")
    assert proc.returncode >= 150
    assert_located(payload, "NoNext.cfg", 2, 6)


def test_unused_constant_not_given_is_an_error(tmp_path):
    spec = SPEC_OK.replace("VARIABLE x", "CONSTANT Unused\nVARIABLE x")
    proc, payload = run_check(tmp_path, "Unused", spec)
    assert proc.returncode >= 150
    assert "Unused" in payload["error"]


@pytest.mark.parametrize("init, nxt", [("x \\in Nat", "x' = x"), ("x = 0", "x' \\in Nat")])
def test_infinite_enumeration_in_action_is_located(tmp_path, init, nxt):
    spec = SPEC_OK.replace("Init == x = 0", f"Init == {init}").replace("Next == x < 2 /\\ x' = x + 1",
                                                                     f"Next == {nxt}")
    proc, payload = run_check(tmp_path, "InfAct", spec)
    assert proc.returncode >= 150
    assert "infinite" in payload["error"]
    assert_located(payload, "InfAct.tla")


def test_circular_extends(tmp_path):
    (tmp_path / "Cyc2.tla").write_text("---- MODULE Cyc2 ----\nEXTENDS Cyc1\n====\n")
    proc, payload = run_check(tmp_path, "Cyc1", SPEC_OK.replace("EXTENDS Naturals", "EXTENDS Naturals, Cyc2"))
    assert proc.returncode >= 150
    assert "Cyc2" in payload["error"]
    assert_located(payload, "Cyc2.tla", 2)   # where Cyc2 extends Cyc1 and closes the cycle


def test_duplicate_definition_is_rejected(tmp_path):
    spec = SPEC_OK.replace("====", "Next == x < 2 /\\ x' = x + 2\n====")
    proc, payload = run_check(tmp_path, "Dup", spec)
    assert proc.returncode >= 150
    assert_located(payload, "Dup.tla", 6)


def test_non_boolean_invariant_is_located(tmp_path):
    spec = SPEC_OK.replace("====", "Inv == x + 1\n====")
    proc, payload = run_check(tmp_path, "InvNum", spec, CFG_OK + "INVARIANT Inv\n")
    assert_located(payload, "InvNum.tla", 6)


def test_a_counterexample_whose_trace_cannot_be_written_is_still_reported(tmp_path):
    """--trace-out into a path that cannot be written: the violation is reported (its exit
    code, the behavior), the file's failure named; it was a traceback."""
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    spec = SPEC_OK.replace("Next ==", "Inv == x < 2\nNext ==")
    proc, payload = run_check(tmp_path, "Viol", spec, CFG_OK + "INVARIANT Inv\n", "--trace-out",
                              str(blocked / "t.itf.json"))
    assert payload["result"] == "invariant" and payload["violated"] == "Inv" and proc.returncode == 12
    assert payload["trace"] is None and payload["trace_error"].startswith(str(blocked / "t.itf.json"))


@pytest.mark.parametrize("inv, col", [("x' = x", 8), ("UNCHANGED x", 18), ("[][x' = x]_x", 11), ("x \\in {x'}", 15)])
def test_a_primed_invariant_is_a_located_error_not_a_crash(tmp_path, inv, col):
    """An invariant is a state predicate; one that reads x' crashed the checker with an
    internal TypeError and no location (TLC refuses it at level checking)."""
    spec = ("---- MODULE {name} ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x' = x\n"
            f"Inv == {inv}\n====\n")
    proc, payload = run_check(tmp_path, "Primed", spec, "INIT Init\nNEXT Next\nINVARIANT Inv\n")
    assert proc.returncode >= 150
    msg = assert_located(payload, "Primed.tla", 6, col)
    assert "x': a primed variable in an expression evaluated on one state" in msg


@pytest.mark.parametrize("extra, second, first", [
    ("THEOREM T == x = 0\nTHEOREM T == x = 1\n", "7:14", "6:14"),    # a theorem name twice
    ("THEOREM Init == TRUE\n", "6:17", "4:1"),                         # a theorem named like an operator
    ("x == 3\n", "6:1", "3:10"),                                       # an operator named like a variable
    ("CONSTANT x\n", "6:10", "3:10"),                                  # a constant named like a variable
    ("ASSUME Next == TRUE\n", "6:1", "5:1"),                           # a named ASSUME
])
def test_a_multiply_defined_symbol_is_an_error_at_the_second_naming_the_first(tmp_path, extra, second, first):
    # SANY rejects them; the model kept the last one (or two theorem results under one name)
    spec = SPEC_OK.replace("====", extra + "====")
    proc, payload = run_check(tmp_path, "Multi", spec)
    f = tmp_path / "Multi.tla"
    name = re.search(r"(?:THEOREM |ASSUME |CONSTANT |^)(\w+)", extra).group(1)
    assert proc.returncode >= 150
    assert payload["error"] == \
        f"{f}:{second}: semantic error: multiply-defined symbol {name} (also defined at {f}:{first})"


def test_a_definition_clashing_with_an_extended_module_is_located_in_both(tmp_path):
    (tmp_path / "Base.tla").write_text("---- MODULE Base ----\nCONSTANT N\nLimit == 3\n====\n")
    spec = SPEC_OK.replace("EXTENDS Naturals", "EXTENDS Naturals, Base").replace("====", "N == 2\n====")
    proc, payload = run_check(tmp_path, "Ext", spec)
    assert payload["error"] == (f"{tmp_path / 'Ext.tla'}:6:1: semantic error: multiply-defined symbol N "
                                f"(also defined at {tmp_path / 'Base.tla'}:2:10)")


@pytest.mark.parametrize("before", [False, True])
def test_a_definition_clashing_with_an_unnamed_instances_is_a_multiply_defined_symbol(tmp_path, before):
    """`INSTANCE Oth` makes Oth's definitions the module's own: one of the same name in the
    module silently won, in either order. SANY refuses it; the error is at the second of
    the two, naming the first."""
    (tmp_path / "Oth.tla").write_text("---- MODULE Oth ----\nCONSTANT K\nLimit == K\n====\n")
    units = ["Limit == 5", "INSTANCE Oth WITH K <- 2"]
    spec = SPEC_OK.replace("====", "\n".join(units[::-1] if not before else units) + "\n====")
    proc, payload = run_check(tmp_path, "UInst", spec)
    f, oth = tmp_path / "UInst.tla", tmp_path / "Oth.tla"
    assert proc.returncode >= 150, payload
    if before:   # the definition first: the error at the INSTANCE
        assert payload["error"] == (f"{f}:7:1: semantic error: multiply-defined symbol Limit (INSTANCE Oth defines "
                                    f"it at {oth}:3:1, also defined at {f}:6:1)")
    else:
        assert payload["error"] == f"{f}:7:1: semantic error: multiply-defined symbol Limit (also defined at {oth}:3:1)"


def test_an_unnamed_instance_brings_its_definitions_and_keeps_its_local_ones(tmp_path):
    (tmp_path / "Oth.tla").write_text("---- MODULE Oth ----\nCONSTANT K\nLimit == K\nLOCAL Helper == 1\n====\n")
    spec = SPEC_OK.replace("x < 2", "x < Limit").replace("====", "INSTANCE Oth WITH K <- 2\nHelper == 7\n====")
    proc, payload = run_check(tmp_path, "UInstOk", spec)
    assert proc.returncode == 0 and payload["result"] == "ok", payload
    assert payload["distinct"] == 3, payload


def test_a_module_extended_along_two_paths_defines_nothing_twice(tmp_path):
    (tmp_path / "Base.tla").write_text("---- MODULE Base ----\nCONSTANT N\nLimit == 3\nTHEOREM L == TRUE\n====\n")
    (tmp_path / "Left.tla").write_text("---- MODULE Left ----\nEXTENDS Base\n====\n")
    (tmp_path / "Right.tla").write_text("---- MODULE Right ----\nEXTENDS Base\n====\n")
    spec = SPEC_OK.replace("EXTENDS Naturals", "EXTENDS Naturals, Left, Right")
    proc, payload = run_check(tmp_path, "Diamond", spec, CFG_OK + "CONSTANT N = 1\n")
    assert proc.returncode == 0 and payload["result"] == "ok", payload


def test_a_module_named_unlike_its_file_is_an_error_at_its_name(tmp_path):
    # SANY aborts on it; we checked the module under the other name
    proc, payload = run_check(tmp_path, "QaErr3", SPEC_OK.replace("{name}", "Other"), subprocess_=True)
    assert proc.returncode >= 150
    assert payload["error"] == (f"{tmp_path / 'QaErr3.tla'}:1:13: parse error: module Other is in file QaErr3.tla: "
                                f"a module's name must match its file name (MODULE QaErr3)")


def test_an_extended_file_holding_another_module_is_located_in_it(tmp_path):
    (tmp_path / "Base.tla").write_text("\\* a library\n---- MODULE Lib ----\nLimit == 3\n====\n")
    spec = SPEC_OK.replace("EXTENDS Naturals", "EXTENDS Naturals, Base")
    proc, payload = run_check(tmp_path, "UsesBase", spec)
    assert_located(payload, "Base.tla", 2, 13)


def test_a_precedence_conflict_is_a_located_error_of_check(tmp_path):
    spec = SPEC_OK.replace("====", "Inv == x = 0 => x < 3 => TRUE\n====")
    proc, payload = run_check(tmp_path, "Chain", spec, CFG_OK + "INVARIANT Inv\n", subprocess_=True)
    assert proc.returncode >= 150
    msg = assert_located(payload, "Chain.tla", 6, 23)
    assert "precedence conflict between `=>` and `=>`" in msg


# ------------------------------------------------- PROPERTY parts the checker does not check
LIVE = SPEC_OK.replace("====", "Spec == Init /\\ [][Next]_x /\\ WF_x(Next)\nLive == <>(x = 2)\n"
                                "Safe == \\A b \\in {2} : [](x < b)\n====")
LIVE_CFG = "SPECIFICATION Spec\nCHECK_DEADLOCK FALSE\n"


def test_an_unchecked_liveness_property_fails_the_run_unless_allowed(tmp_path):
    """`PROPERTY Live` (<>(x = 2)) printed a warning and exited 0: a false pass in CI."""
    proc, payload = run_check(tmp_path, "Live", LIVE, LIVE_CFG + "PROPERTY Live\n", subprocess_=True)
    assert proc.returncode == 150
    msg = assert_located(payload, "Live.tla", 7, 9)
    assert "PROPERTY Live" in msg and "`<>(x = 2)`" in msg and "is not checked" in msg
    assert "--allow-unchecked-properties" in msg
    proc, payload = run_check(tmp_path, "Live", LIVE, LIVE_CFG + "PROPERTY Live\n", "--allow-unchecked-properties")
    assert proc.returncode == 0 and payload["result"] == "ok"
    assert len(payload["warnings"]) == 1 and "Live.tla:7:9" in payload["warnings"][0]
    # WF_x(Next) in SPECIFICATION Spec is fairness, not a property to check
    proc, payload = run_check(tmp_path, "Live", LIVE, LIVE_CFG)
    assert proc.returncode == 0 and payload["result"] == "ok" and "warnings" not in payload


def test_a_quantified_always_property_fails_the_run(tmp_path):
    """`\\A b \\in {2} : [](x < b)` was "not checked" (exit 0); it is `[](\\A b \\in {2} : x < b)`."""
    proc, payload = run_check(tmp_path, "QSafe", LIVE, LIVE_CFG + "PROPERTY Safe\n", subprocess_=True)
    assert proc.returncode == 12
    assert (payload["result"], payload["violated"]) == ("invariant", "Safe")
    assert len(json.loads((tmp_path / "trace.itf.json").read_text())["states"]) == 3


# ------------------------------------------------- POSTCONDITION, ALIAS
POST = SPEC_OK.replace("EXTENDS Naturals", "EXTENDS Naturals, TLC").replace(
    "====", 'Three == TLCGet("stats").distinct = 3\nFour == TLCGet("stats").distinct = 4\nAtTwo == x = 2\n====')


def test_postcondition_is_evaluated_once_after_the_search(tmp_path):
    """A false POSTCONDITION passed: it was stored and never evaluated. (TLC: exit 10.)"""
    for post, code, result, violated in (("Four", 10, "postcondition", "Four"), ("Three", 0, "ok", None)):
        proc, payload = run_check(tmp_path, "Post", POST, CFG_OK + f"POSTCONDITION {post}\n")
        assert proc.returncode == code
        assert (payload["result"], payload["violated"], payload["distinct"]) == (result, violated, 3)


def test_a_postcondition_reading_a_variable_is_a_located_error(tmp_path):
    proc, payload = run_check(tmp_path, "PostVar", POST, CFG_OK + "POSTCONDITION AtTwo\n")
    assert proc.returncode >= 150
    msg = assert_located(payload, "PostVar.tla", 8)
    assert "POSTCONDITION AtTwo reads the variable x" in msg


@pytest.mark.parametrize("section", ["ALIAS", "POSTCONDITION"])
def test_alias_or_postcondition_naming_nothing_is_located_in_the_cfg(tmp_path, section):
    proc, payload = run_check(tmp_path, "NoPost", SPEC_OK, CFG_OK + f"{section} Nope\n")
    assert proc.returncode >= 150
    msg = assert_located(payload, "NoPost.cfg", 4, len(section) + 2)
    assert "Nope" in msg


ALIASED = SPEC_OK.replace("VARIABLE x", "VARIABLES x, y").replace("x = 0", "x = 0 /\\ y = 0").replace(
    "x' = x + 1", "x' = x + 1 /\\ y' = 2 * x").replace(
    "====", "Safe == x < 2\nAl == [count |-> x, next |-> x']\nFlat == x + 1\n====")


def _behavior(tmp_path, alias: str) -> str:
    from hicache.tla.run import check_one
    (tmp_path / "Al.tla").write_text(ALIASED.replace("{name}", "Al"))
    (tmp_path / "Al.cfg").write_text(CFG_OK + f"INVARIANT Safe\nALIAS {alias}\n")
    res, payload, text = check_one(str(tmp_path / "Al.tla"), str(tmp_path / "Al.cfg"),
                                   trace_out=str(tmp_path / "t.itf.json"))
    assert (res.result, payload["violated"]) == ("invariant", "Safe")
    # (the ITF trace keeps the variables: `hicache explain` reads the spec's state)
    assert json.loads((tmp_path / "t.itf.json").read_text())["vars"] == ["x", "y"]
    return text


def test_alias_is_shown_in_place_of_the_variables_primes_reading_the_next_state(tmp_path):
    """ALIAS was accepted and not applied: the behavior showed the variables."""
    text = _behavior(tmp_path, "Al")
    states = text.split("Error: The behavior up to this point is:\n")[1].split("\n\n")
    assert states[0] == "State 1: <Initial predicate>\n/\\ count = 0\n/\\ next = 1"
    assert states[1].endswith("\n/\\ count = 1\n/\\ next = 2")
    # the last state has no next state: its variables, and a warning saying why
    assert states[2].endswith("\n/\\ x = 2\n/\\ y = 2")
    assert "Warning: ALIAS Al could not be evaluated (" in text and ") in state 3: its variables are shown" in text


def test_an_alias_that_is_not_a_record_shows_the_variables_with_a_warning(tmp_path):
    text = _behavior(tmp_path, "Flat")
    assert "Warning: ALIAS Flat is 1, not a record in state 1: its variables are shown" in text
    assert "State 1: <Initial predicate>\n/\\ x = 0\n/\\ y = 0" in text


# ------------------------------------------------- errors that had no location
@pytest.mark.parametrize("cfg, extra", [(CFG_OK, ()), (CFG_OK, ("--simulate",)),
                                        ("SPECIFICATION Spec\n", ())])
def test_init_leaving_a_variable_free_is_located_at_init(tmp_path, cfg, extra):
    spec = SPEC_OK.replace("VARIABLE x", "VARIABLES x, y").replace(
        "====", "Spec == Init /\\ [][Next /\\ y' = y]_<<x, y>>\n====")
    proc, payload = run_check(tmp_path, "InitFree", spec, cfg, *extra)
    assert proc.returncode >= 150
    msg = assert_located(payload, "InitFree.tla", 4, 1)
    assert "Init does not assign y" in msg


@pytest.mark.parametrize("section", ["INVARIANT", "PROPERTY", "CONSTRAINT", "ACTION_CONSTRAINT", "VIEW",
                                     "SYMMETRY", "POSTCONDITION"])
def test_a_cfg_name_of_an_operator_with_parameters_is_a_located_cfg_error(tmp_path, section):
    """`INVARIANT InvP` with InvP(n) crashed with an internal IndexError."""
    spec = SPEC_OK.replace("====", "InvP(n) == x < n\n====")
    proc, payload = run_check(tmp_path, "Param", spec, CFG_OK + f"{section} InvP\n")
    assert proc.returncode >= 150
    msg = assert_located(payload, "Param.cfg", 4, len(section) + 2)
    assert f"{section} InvP takes 1 argument" in msg and "config error" in msg


@pytest.mark.parametrize("sym, why", [("Flag", "it is not a set"), ("Pairs", "its element 1 is not a function"),
                                      ("Skew", "does not map its domain onto itself")])
def test_a_symmetry_that_is_not_a_set_of_permutations_is_a_located_cfg_error(tmp_path, sym, why):
    spec = SPEC_OK.replace("VARIABLE x", "CONSTANT P\nVARIABLE x").replace(
        "====", "Flag == TRUE\nPairs == {1, 2}\nSkew == {[p \\in P |-> CHOOSE q \\in P : TRUE]}\n====")
    proc, payload = run_check(tmp_path, "Sym", spec, CFG_OK + f"CONSTANT P = {{a, b}}\nSYMMETRY {sym}\n")
    assert proc.returncode >= 150
    msg = assert_located(payload, "Sym.cfg", 5, 10)
    assert f"SYMMETRY {sym} must be a set of permutations" in msg and why in msg


def test_a_symmetry_reading_a_variable_is_a_located_error(tmp_path):
    spec = SPEC_OK.replace("====", "Inv == x < 5\n====")
    proc, payload = run_check(tmp_path, "SymVar", spec, CFG_OK + "SYMMETRY Inv\n")
    assert proc.returncode >= 150
    msg = assert_located(payload, "SymVar.tla", 6)
    assert "SYMMETRY Inv reads the variable x" in msg


UNUSED_SPEC = SPEC_OK.replace("VARIABLE x\n", "VARIABLE x\nInst == INSTANCE Other WITH y <- 0\n").replace(
    "====", "%s\n====")     # (line 7: the definition under test)


@pytest.mark.parametrize("unused, col, name", [
    ("Unused == x + Missing", 15, "unknown operator Missing"),                    # a value
    ("Step == x' = Missing(x)", 14, "unknown operator Missing"),                  # an action
    ("Op(a) == LET b == a IN b + Missing", 28, "unknown operator Missing"),       # under parameters and LET
    ("Via == Inst!Missing", 8, "Inst!Missing is not defined"),                    # an instance's operator
    ("Live == <>(x = Missing)", 16, "unknown operator Missing"),                  # temporal operands
    ("Fair == WF_x(x' = Missing)", 19, "unknown operator Missing"),
])
def test_an_unknown_name_in_a_definition_nothing_uses_is_refused_like_sany_does(tmp_path, unused, col, name):
    """The checker compiled only what the model reached, so an unused definition naming
    something undefined passed `check` (and TLC refuses the module). Every definition is
    now resolved before the check."""
    (tmp_path / "Other.tla").write_text("---- MODULE Other ----\nVARIABLE y\nLimit == y\n====\n")
    proc, payload = run_check(tmp_path, "Unused", UNUSED_SPEC % unused)
    assert proc.returncode >= 150, payload
    assert name in assert_located(payload, "Unused.tla", 7, col)


SHADOW_SPEC = SPEC_OK.replace("====", "%s\n====")     # (line 6: the body under test)


@pytest.mark.parametrize("body, col, name, why", [
    ("Q == \\A x \\in {1} : x > 0", 6, "x", "also defined at {f}:3:10"),            # a variable
    ("Q == CHOOSE Init \\in {1} : TRUE", 6, "Init", "also defined at {f}:4:1"),     # a definition before it
    ("Q(x) == x", 1, "x", "also defined at {f}:3:10"),                                 # a parameter
    ("Q == LET x == 1 IN x", 10, "x", "also defined at {f}:3:10"),                     # a LET name
    ("Q == \\A n \\in {1} : \\E n \\in {2} : n > 0", 21, "n", "bound already around it"),   # nested binders
    ("Q == [Next \\in {1} |-> 0]", 6, "Next", "also defined at {f}:5:1"),           # a function constructor
    ("Q[x \\in {1}] == x", 1, "x", "also defined at {f}:3:10"),                     # a function definition
    ("Q == LET F[n \\in {1}] == \\A n \\in {1} : TRUE IN F[1]", 26, "n", "bound already around it"),
])
def test_a_name_shadowing_a_visible_one_is_refused_like_sany_does(tmp_path, body, col, name, why):
    """TLA+ has no shadowing: SANY refuses a bound name already visible. The evaluator let
    the inner binding win, so a spec TLC rejects was checked here."""
    proc, payload = run_check(tmp_path, "Shadow", SHADOW_SPEC % body)
    assert proc.returncode >= 150, payload
    f = str(tmp_path / "Shadow.tla")
    assert payload["error"] == f"{f}:6:{col}: semantic error: multiply-defined symbol {name} ({why.format(f=f)})"


def test_a_binder_named_like_a_later_definition_is_no_conflict(tmp_path):
    """A module-level name declared after the binder was not visible where it binds."""
    proc, payload = run_check(tmp_path, "Later", SHADOW_SPEC % "Q == \\A Zed \\in {1} : Zed > 0\nZed == 3")
    assert proc.returncode == 0 and payload["result"] == "ok", payload


def test_definitions_nothing_uses_still_pass_when_they_resolve(tmp_path):
    """The resolution pass refuses unknown names only: an unused temporal formula, action,
    parametrized operator or instance reference that resolves is no error."""
    (tmp_path / "Other.tla").write_text("---- MODULE Other ----\nVARIABLE y\nLimit == y\n====\n")
    extra = ("Inst == INSTANCE Other WITH y <- x\nLive == <>(x = 2)\nStay == x' = x /\\ UNCHANGED x\n"
             "Op(a, F(_)) == F(a) + 1\nVia == Inst!Limit\n")
    spec = SPEC_OK.replace("====\n", extra + "====\n")
    proc, payload = run_check(tmp_path, "Resolves", spec)
    assert proc.returncode == 0 and payload["result"] == "ok", payload


@pytest.mark.parametrize("extends, body, col, name, hint", [
    ("Naturals", "Q == Len(<<1>>)", 6, "Len", "Sequences: EXTENDS Sequences"),
    ("Naturals", "Q == Cardinality({1})", 6, "Cardinality", "FiniteSets: EXTENDS FiniteSets"),
    ("Naturals", "Q == -1", 6, "-.", "Integers: EXTENDS Integers"),            # prefix minus: Integers'
    ("Naturals", "Q == x \\in Int", 12, "Int", "Integers: EXTENDS Integers"),
    ("Naturals", "Q == 1 :> 2", 6, ":>", "TLC: EXTENDS TLC"),
    # Sequences and TLC only LOCAL INSTANCE Naturals: they pass on no arithmetic
    ("Sequences", "Q == 1 + 2", 6, "+", "Naturals and Integers: EXTENDS Naturals"),
    ("TLC", "Q == 1 < 2", 6, "<", "Naturals and Integers: EXTENDS Naturals"),
])
def test_a_standard_operator_whose_module_is_not_extended_is_unknown_like_sany_says(tmp_path, extends, body, col,
                                                                                   name, hint):
    """The standard modules' operators were builtins visible everywhere, so a spec that
    forgot `EXTENDS Sequences` (or wrote -1 under Naturals alone) passed here and was
    refused by SANY. Each is now visible where its module is extended, and the error says
    which module to add."""
    spec = SHADOW_SPEC.replace("EXTENDS Naturals", f"EXTENDS {extends}").replace("x < 2 /\\ x' = x + 1", "x' = x")
    proc, payload = run_check(tmp_path, "Std", spec % body)
    assert proc.returncode >= 150, payload
    msg = assert_located(payload, "Std.tla", 6, col)
    assert msg.endswith(f"unknown operator {name} (defined by {hint})"), msg


def test_standard_operators_come_through_extended_and_instantiated_user_modules(tmp_path):
    """What a user module EXTENDS or INSTANCEs (unnamed) it passes on; its LOCAL INSTANCE
    it keeps, but its own definitions still use it."""
    (tmp_path / "Base.tla").write_text("---- MODULE Base ----\nEXTENDS Sequences\n====\n")
    (tmp_path / "Inst.tla").write_text("---- MODULE Inst ----\nINSTANCE FiniteSets\n====\n")
    (tmp_path / "Loc.tla").write_text("---- MODULE Loc ----\nLOCAL INSTANCE Integers\nMinusOne == -1\n====\n")
    spec = SHADOW_SPEC.replace("EXTENDS Naturals", "EXTENDS Naturals, Base, Inst, Loc") % \
        "Q == Len(<<1>>) + Cardinality({1}) + MinusOne"
    proc, payload = run_check(tmp_path, "Through", spec)
    assert proc.returncode == 0 and payload["result"] == "ok", payload
    proc, payload = run_check(tmp_path, "Kept", spec.replace("+ MinusOne", "+ (-1)"))
    assert proc.returncode >= 150, payload
    assert "unknown operator -. (defined by Integers" in assert_located(payload, "Kept.tla", 6, 39)


@pytest.mark.parametrize("extends, body, line, col, name, home", [
    ("Naturals, Sequences", "Len(s) == 0", 6, 1, "Len", "Sequences"),                 # a definition
    ("Naturals, FiniteSets", "Q == \\A Cardinality \\in {1} : TRUE", 6, 6, "Cardinality", "FiniteSets"),
    ("Integers", "Q == LET Int == 1 IN Int", 6, 10, "Int", "Integers"),               # a LET name
])
def test_a_name_clashing_with_an_extended_standard_operator_is_refused_like_sany_does(tmp_path, extends, body, line,
                                                                                     col, name, home):
    spec = SHADOW_SPEC.replace("EXTENDS Naturals", f"EXTENDS {extends}")
    proc, payload = run_check(tmp_path, "StdClash", spec % body)
    assert proc.returncode >= 150, payload
    msg = assert_located(payload, "StdClash.tla", line, col)
    assert msg.endswith(f"multiply-defined symbol {name} (also defined by the standard module {home}, which is "
                        f"extended here)"), msg


def test_a_standard_operators_name_is_free_where_its_module_is_not_extended(tmp_path):
    spec = SHADOW_SPEC % "Len(s) == 0\nQ == \\A Cardinality \\in {1} : Len(Cardinality) = 0"
    proc, payload = run_check(tmp_path, "StdFree", spec)
    assert proc.returncode == 0 and payload["result"] == "ok", payload


def test_a_users_own_module_named_like_a_standard_one_declares_its_operators_itself(tmp_path):
    """A TLC.tla beside the spec is the module EXTENDS TLC finds: its `Print` is its own
    definition, no clash with the standard TLC's, and its LOCAL INSTANCE Naturals is not
    passed on (the spec extends Naturals itself)."""
    (tmp_path / "TLC.tla").write_text("---- MODULE TLC ----\nLOCAL INSTANCE Naturals\nPrint(out, val) == val\n"
                                      "Twice(n) == n + n\n====\n")
    spec = SHADOW_SPEC.replace("EXTENDS Naturals", "EXTENDS Naturals, TLC") % 'Q == Print("hi", Twice(1)) = 2'
    proc, payload = run_check(tmp_path, "OwnTLC", spec, CFG_OK + "INVARIANT Q\n")
    assert proc.returncode == 0 and payload["result"] == "ok", payload
    proc, payload = run_check(tmp_path, "OwnTLC2", spec.replace("EXTENDS Naturals, TLC", "EXTENDS TLC"))
    assert proc.returncode >= 150, payload
    assert "unknown operator < (defined by Naturals" in payload["error"], payload
