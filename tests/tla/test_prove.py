"""`hicache prove`: Z3 discharges true THEOREMs, refutes false ones with a model, flags
ill-defined ones (divisor, domain) at their location, and names unsupported constructs."""
import json
import re
from pathlib import Path

import pytest
import z3

import hicache
from hicache.cli.main import main
from hicache.tla.z3arith import Arith, Poly
from hicache.tla.z3backend import Prover, Status, prove_files

MODELS = Path(__file__).parent / "prove_models"


def _results(name: str, **kw) -> dict:
    return {r.name: r for r in prove_files([MODELS / f"{name}.tla"], **kw)}


@pytest.fixture(scope="module")
def good():
    return _results("ProveGood")


@pytest.fixture(scope="module")
def bad():
    return _results("ProveBad")


def _model(detail: str) -> dict[str, int]:
    """name = integer pairs of a printed counterexample."""
    return {k: int(v) for k, v in re.findall(r"(\w+) = (-?\d+)", detail)}


@pytest.mark.parametrize("theorem", ["PlacementBijective", "OwnerInRange", "ChainBalanced", "SlotAlternates",
                                     "PackedOffsetsDisjoint", "CaseAndLet", "InvInductive"])
def test_true_theorems_are_proved(good, theorem):
    r = good[theorem]
    assert (r.status, r.detail) == (Status.PROVED, "Q.E.D.")


def test_good_fixture_has_exactly_the_listed_theorems(good):
    assert len(good) == 7


def test_wrong_owner_formula_gets_a_counterexample_that_really_refutes_it(bad):
    r = bad["WrongOwnerInRange"]
    assert r.status is Status.COUNTEREXAMPLE
    m = _model(r.detail)
    # the model satisfies the hypotheses and violates Owner(N, ps, loc) < N with Owner = loc \div ps
    assert m["N"] >= 1 and m["ps"] >= 1 and m["loc"] >= 0
    assert m["loc"] // m["ps"] >= m["N"]


def test_slot_reuse_mistake_is_refuted(bad):
    r = bad["SlotWrong"]
    assert r.status is Status.COUNTEREXAMPLE
    assert (_model(r.detail)["l"] + 2) % 2 == _model(r.detail)["l"] % 2


def test_possibly_zero_divisor_is_not_proved_and_is_located(bad):
    r = bad["DivisorMayBeZero"]
    assert r.status is Status.COUNTEREXAMPLE
    assert r.detail.startswith(f"{MODELS / 'ProveBad.tla'}:17:48: not well-defined: divisor of \\div is positive")
    assert _model(r.detail)["n"] <= 0


def test_non_inductive_invariant_shows_both_states(bad):
    r = bad["NotInductive"]
    assert r.status is Status.COUNTEREXAMPLE
    pre = _fn(re.search(r"done = \(([^)]*)\)", r.detail).group(1))
    post = _fn(re.search(r"done' = \(([^)]*)\)", r.detail).group(1))
    assert all(v <= pre[0] for v in pre.values())           # Inv holds before
    assert any(v > post[0] for v in post.values())          # and fails after


def test_unsupported_constructs_are_named_with_their_location():
    res = _results("ProveUnsupported")
    record, rec = res["UsesRecord"], res["UsesRecursion"]
    path = MODELS / "ProveUnsupported.tla"
    assert (record.status, record.detail) == (Status.UNSUPPORTED, f"{path}:4:12: unsupported: construct Field")
    assert (rec.status, rec.detail) == (
        Status.UNSUPPORTED, f"{path}:9:36: unsupported: recursive operator Sum (inlining would not terminate)")


@pytest.fixture(scope="module")
def semantics():
    return _results("ProveSemantics")


def test_semantics_fixture_is_complete(semantics):
    assert len(semantics) == 36


@pytest.mark.parametrize("theorem", [
    "FloorDiv_ok", "NegConst_ok", "TruncDiv_cex", "DivExact_cex", "Multiple_ok", "ProductSign_ill",
    "ZeroFactor_ill", "Square_cex", "Unbounded_ok", "NoWitness_cex", "Filter_ok", "Filter_cex",
    "FilterDiv_ok", "Grid_cex", "Bool_cex", "Excluded_ok", "Vacuous_ok", "CaseGap_ill", "CaseCover_ok",
    "CaseClash_ill", "CaseAgree_ok", "TrailBreaksInv_cex", "DomainChange_cex", "NoTypeNoDomain_cex", "NoTypeNoArg_ill",
    "OutsideDomain_ill", "BoolEnum_cex", "TupleSet_ok", "TupleSet_cex",
    "Except_ok", "Shift_ok", "Halve_ok", "LetPrime_cex", "ArgPrime_cex", "LetPrimeDiff_ok", "ArgPrime_ok"])
def test_semantics(semantics, theorem):
    r = semantics[theorem]
    expect = theorem.rsplit("_", 1)[1]
    if expect == "ok":
        assert r.status is Status.PROVED, r.detail
    elif expect == "cex":
        assert r.status is Status.COUNTEREXAMPLE and r.detail.startswith("counterexample: "), r.detail
    else:
        assert r.status is Status.COUNTEREXAMPLE and ": not well-defined: " in r.detail, r.detail
        assert r.detail.startswith(str(MODELS / "ProveSemantics.tla") + ":")


@pytest.mark.parametrize("cfg", [None, "ProveInductive.cfg"])
def test_inductive_invariant_over_nested_functions(cfg):
    res = _results("ProveInductive", cfg_path=MODELS / cfg if cfg else None)
    assert res["AppliedIsDone"].status is Status.PROVED, res["AppliedIsDone"].detail
    bad = res["ApplyChangesApplied"]
    assert bad.status is Status.COUNTEREXAMPLE, bad.detail
    # the step that breaks it is an Apply at stage s: applied'[s] differs from applied[s]
    s = _model(bad.detail)["s"]
    before = _fn(re.search(r"applied = \(([^)]*)\)", bad.detail).group(1))
    after = _fn(re.search(r"applied' = \(([^)]*)\)", bad.detail).group(1))
    assert before[s] != after[s]
    if cfg:   # the 8 stages of the configuration, printed in full
        assert sorted(before) == list(range(8)) and "NStages" not in bad.detail


def _fn(text: str) -> dict[int, int]:
    """A printed integer function `0 :> 5 @@ 1 :> 6` (entries shown) as a dict."""
    return {int(k): int(v) for k, v in re.findall(r"(-?\d+) :> (-?\d+)", text)}


def test_timeout_gives_unknown():
    r = _results("ProveHard", timeout_s=1.0)["NoCubeSum"]
    assert r.status is Status.UNKNOWN and not r.proved


def test_constants_come_from_the_config_only_when_given():
    free = _results("ProveConfig")
    assert free["NoWrap"].status is Status.COUNTEREXAMPLE
    assert _model(free["NoWrap"].detail)["S"] != 3
    fixed = _results("ProveConfig", cfg_path=MODELS / "ProveConfig.cfg")
    assert fixed["NoWrap"].status is Status.PROVED and fixed["FlagIsBool"].status is Status.PROVED


def test_cli_json_contract_and_exit_codes(capsys):
    assert main(["prove", str(MODELS / "ProveGood.tla"), str(MODELS / "ProveNone.tla"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ok"] is True and len(out["theorems"]) == 7          # ProveNone contributes nothing
    assert set(out["theorems"][0]) >= {"name", "module", "proved", "seconds", "status", "detail"}
    assert all(t["proved"] and t["status"] == "proved" for t in out["theorems"])

    assert main(["prove", str(MODELS / "ProveBad.tla"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ok"] is False
    assert {t["name"]: t["status"] for t in out["theorems"]} == {
        "WrongOwnerInRange": "counterexample", "DivisorMayBeZero": "counterexample",
        "SlotWrong": "counterexample", "NotInductive": "counterexample"}


def test_missing_inputs_are_refused_before_any_proof(tmp_path, capsys):
    from hicache.cli.main import EXIT_USAGE
    assert main(["prove", str(MODELS / "ProveGood.tla"), str(tmp_path / "Nope.tla")]) == EXIT_USAGE
    assert main(["prove", str(MODELS / "ProveGood.tla"), "--config", str(tmp_path / "nope.cfg")]) == EXIT_USAGE
    out = capsys.readouterr()
    assert f"no such file: {tmp_path / 'Nope.tla'}" in out.err and f"no such file: {tmp_path / 'nope.cfg'}" in out.err
    assert "PROVED" not in out.out          # nothing was proved on the way


def test_vacuous_proof_is_flagged(tmp_path):
    spec = tmp_path / "Vac.tla"
    spec.write_text("---- MODULE Vac ----\nEXTENDS Naturals\nTHEOREM V == \\A x \\in Nat : x < 0 => x = 5\n====\n")
    (r,) = prove_files([spec])
    assert r.status is Status.PROVED and "vacuous" in r.detail


def test_div_mod_normal_form_merges_and_splits_divisors():
    arith = Arith(lambda lemma: None)
    n, ps, loc = (arith.opaque(z3.Int(s)) for s in ("n", "ps", "loc"))
    # (loc % (n*ps)) \div ps = (loc \div ps) % n          (R3)
    assert arith.div(arith.mod(loc, n * ps), ps) == arith.mod(arith.div(loc, ps), n)
    # (loc \div ps) \div n = loc \div (n*ps)               (R4)
    assert arith.div(arith.div(loc, ps), n) == arith.div(loc, n * ps)
    # (q*ps + loc % ps) % ps = loc % ps                    (R1, R2)
    q = arith.div(loc, n * ps)
    assert arith.mod(q * ps + arith.mod(loc, ps), ps) == arith.mod(loc, ps)
    assert arith.div(Poly.const(-7), Poly.const(2)) == Poly.const(-4)     # floor, as TLA+
    assert arith.mod(Poly.const(-7), Poly.const(2)) == Poly.const(1)


#: specs whose theorems test_pipeline_invariants_are_inductive_up_to_8_stages proves (the
#: slow ones: one obligation per pipeline size)
INDUCTIVE_SPECS = ("PPSync.tla", "PrefixAgreement.tla")
#: specs whose theorems their own test file proves (tests/tla/test_prove_prefix.py)
OWN_TEST_SPECS = ("PrefixAgreementCore.tla",)


def test_repository_spec_theorems_are_all_proved():
    skip = INDUCTIVE_SPECS + OWN_TEST_SPECS
    specs = sorted(p for p in (hicache.REPO_ROOT / "spec").glob("*.tla") if p.name not in skip)
    results = prove_files(specs, timeout_s=30)
    if not results:
        pytest.skip("no THEOREM in spec/ yet")
    assert [(r.module, r.name, r.status.value, r.detail) for r in results if not r.proved] == []


def test_prover_lists_only_the_root_module_theorems():
    assert [t[0] for t in Prover(MODELS / "ProveBad.tla").theorems()] == [
        "WrongOwnerInRange", "DivisorMayBeZero", "SlotWrong", "NotInductive"]


@pytest.fixture(scope="module")
def sets():
    return _results("ProveSets")


@pytest.mark.parametrize("theorem", ["Step_ok", "StepBad_cex", "MinOfMap_ok", "UnionEq_ok", "Subset_cex"])
def test_sets_choose_and_constant_cases(sets, theorem):
    r = sets[theorem]
    if theorem.endswith("_ok"):
        assert r.status is Status.PROVED and r.detail.startswith("Q.E.D. in "), r.detail
    else:
        assert r.status is Status.COUNTEREXAMPLE and r.detail.startswith("case N = 1"), r.detail


def test_constant_cases_are_listed_with_their_times(sets):
    detail = sets["Step_ok"].detail
    assert re.fullmatch(r"Q\.E\.D\. in 3 cases with K = 3 \(N = 1: [\d.]+ s; N = 2: [\d.]+ s; N = 3: [\d.]+ s\)",
                        detail), detail


def test_set_valued_state_is_printed_as_sets(sets):
    detail = sets["Subset_cex"].detail
    got = re.search(r"got = \(0 :> \{([\d, ]*)\}\)", detail)
    assert got is not None, detail
    members = {int(x) for x in got.group(1).split(",") if x.strip()}
    assert members <= {1, 2, 3} and 3 in members       # a member of SUBSET 1..3 outside 1..2


def test_pipeline_invariants_are_inductive_up_to_8_stages(capsys):
    specs = [str(hicache.REPO_ROOT / "spec" / name) for name in INDUCTIVE_SPECS]
    # (two processes: the cases of a theorem take ~110 s one after the other here)
    assert main(["prove", *specs, "--json", "--timeout", "120", "--jobs", "2"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    by_name = {(t["module"], t["name"]): t for t in out["theorems"]}
    t = by_name[("PPSync", "IndInvInductive")]
    assert t["proved"] and "vacuous" not in t["detail"], t["detail"]
    cases = re.findall(r"NStages = (\d+): [\d.]+ s", t["detail"])
    assert [int(n) for n in cases] == list(range(1, 9))


def test_seeded_bug_breaks_the_inductive_step_with_a_counterexample(tmp_path):
    import shutil
    shutil.copy(hicache.REPO_ROOT / "spec" / "PPSync.tla", tmp_path / "PPSync.tla")
    shutil.copy(MODELS / "PPSyncSeeded.tla", tmp_path / "PPSyncSeeded.tla")
    (r,) = prove_files([tmp_path / "PPSyncSeeded.tla"], timeout_s=60)
    assert r.status is Status.COUNTEREXAMPLE and r.detail.startswith("case NStages = 2: counterexample: "), r.detail
    # stage 1 applied its own count: after the step its record of check 2 differs from stage 0's
    upto = re.search(r"upto' = \(0 :> \(([^)]*)\) @@ 1 :> \(([^)]*)\)\)", r.detail)
    checks = _fn(re.search(r"checks' = \(([^)]*)\)", r.detail).group(1))
    s0, s1 = _fn(upto.group(1)), _fn(upto.group(2))
    assert any(k <= checks[0] and k <= checks[1] and s0[k] != s1[k] for k in s0)


# ------------------------------------------------------------ --config and --timeout input errors
CONFIG_SPEC = MODELS / "ProveConfig.tla"      # ASSUME S \in Nat /\ S >= 1 /\ Flag \in BOOLEAN (line 6)


def _prove_with_cfg(tmp_path, capsys, cfg_text: str, *extra: str) -> tuple[int, str, str]:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text(cfg_text)
    code = main(["prove", str(CONFIG_SPEC), "--config", str(cfg), *extra])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_config_values_violating_an_assume_are_a_located_usage_error(tmp_path, capsys):
    # before: every theorem "PROVED (vacuous ...)" and exit 0, a cfg typo turned CI green
    from hicache.cli.main import EXIT_USAGE
    code, out, err = _prove_with_cfg(tmp_path, capsys, "CONSTANTS\n    S = 0\n    Flag = TRUE\n")
    assert code == EXIT_USAGE and "PROVED" not in out
    assert err.strip() == (f"hicache prove: --config: {CONFIG_SPEC}:6:8: evaluation error: ASSUME is violated "
                           f"by the --config values S = 0 ({tmp_path / 'bad.cfg'}:2:5)")
    code, out, _ = _prove_with_cfg(tmp_path, capsys, "CONSTANTS\n    S = 3\n    Flag = 5\n", "--json")
    assert code == EXIT_USAGE
    payload = json.loads(out.strip().splitlines()[-1])
    assert payload["ok"] is False and payload["theorems"] == [] and "Flag = 5" in payload["error"]


def test_config_values_violating_the_assumes_together_are_refused(tmp_path):
    from hicache.tla.z3backend import ConfigRejected
    spec = tmp_path / "Joint.tla"
    spec.write_text("---- MODULE Joint ----\nEXTENDS Naturals\nCONSTANT S, K\nASSUME S > K\nASSUME K > 5\n"
                    "THEOREM T == S > 0\n====\n")
    (tmp_path / "j.cfg").write_text("CONSTANTS S = 3\n")
    with pytest.raises(ConfigRejected) as ei:
        prove_files([spec], cfg_path=tmp_path / "j.cfg")
    assert str(ei.value.error) == (f"{spec}:4:8: evaluation error: the ASSUMEs together are violated by the "
                                   f"--config values S = 3 ({tmp_path / 'j.cfg'}:1:11)")


def test_assumes_contradictory_without_the_config_are_not_blamed_on_it(tmp_path):
    spec = tmp_path / "Contra.tla"
    spec.write_text("---- MODULE Contra ----\nEXTENDS Naturals\nCONSTANT S, K\nASSUME K > 5 /\\ K < 2\n"
                    "THEOREM T == S > 0\n====\n")
    (tmp_path / "c.cfg").write_text("CONSTANTS S = 3\n")
    (r,) = prove_files([spec], cfg_path=tmp_path / "c.cfg")
    assert r.status is Status.PROVED and "vacuous" in r.detail       # the spec's own fault, flagged there


@pytest.mark.parametrize("cfg_text, message", [
    ("CONSTANTS\n    S = 3\n    Flag = TRUE\n    Bogus = 4\n",
     "{cfg}:4:5: config error: Bogus is assigned a value, but it is not a CONSTANT of module ProveConfig"),
    ("CONSTANTS\n    S = 3\n    Flag = TRUE\n    S = 4\n",
     "{cfg}:4:5: config error: constant S is assigned twice (first at {cfg}:2:5)"),
    ("CONSTANTS\n    S = {1, 2}\n    Flag = TRUE\n",
     "{cfg}:2:5: config error: S = {{1, 2}}: hicache prove takes integer and boolean constant values only"),
    ("CONSTANTS\n    S = \"x\"\n",
     "{cfg}:2:5: config error: S = \"x\": hicache prove takes integer and boolean constant values only"),
    ("CONSTANTS\n    S = \n",
     "{cfg}:2:7: config error: expected a value but the file ended"),
])
def test_config_that_does_not_fit_the_spec_is_a_located_usage_error(tmp_path, capsys, cfg_text, message):
    from hicache.cli.main import EXIT_USAGE
    code, out, err = _prove_with_cfg(tmp_path, capsys, cfg_text)
    assert code == EXIT_USAGE and "PROVED" not in out
    assert err.strip() == "hicache prove: --config: " + message.format(cfg=tmp_path / "bad.cfg")


def test_config_may_leave_constants_symbolic(tmp_path):
    (tmp_path / "p.cfg").write_text("CONSTANTS\n    S = 3\n")      # Flag stays "any boolean"
    res = {r.name: r for r in prove_files([CONFIG_SPEC], cfg_path=tmp_path / "p.cfg")}
    assert [(r.status, r.detail) for r in res.values()] == [(Status.PROVED, "Q.E.D.")] * 2


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e7", "0", "-1"])
def test_timeout_outside_what_z3_takes_is_a_usage_error(capsys, value):
    from hicache.cli.main import EXIT_USAGE
    assert main(["prove", str(MODELS / "ProveGood.tla"), f"--timeout={value}"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("hicache prove: --timeout must be a number of seconds in (0, 1000000], got ") \
        and "Traceback" not in err
    with pytest.raises(ValueError, match="timeout_s"):
        Prover(MODELS / "ProveGood.tla", timeout_s=float(value))


# ------------------------------------------------------------ theorem names, case count
@pytest.mark.parametrize("first, where", [("THEOREM T == 1 = 1", "4:14"), ("T == 3", "4:1")])
def test_a_theorem_name_defined_twice_is_an_error_at_the_second(tmp_path, first, where):
    spec = tmp_path / "Dup.tla"
    spec.write_text(f"---- MODULE Dup ----\nEXTENDS Naturals\nCONSTANT N\n{first}\nTHEOREM T == 1 = 2\n====\n")
    (r,) = prove_files([spec])
    assert (r.status, r.detail) == (
        Status.ERROR, f"{spec}:5:14: semantic error: multiply-defined symbol T (also defined at {spec}:{where})")


def test_an_unknown_name_in_a_definition_no_theorem_uses_is_an_error(tmp_path):
    # (SANY refuses the module: a proof of its theorems would be of a spec TLC cannot load)
    spec = tmp_path / "Unk.tla"
    spec.write_text("---- MODULE Unk ----\nEXTENDS Naturals\nCONSTANT N\nSpare == N + Missing\n"
                    "THEOREM T == 1 = 1\n====\n")
    (r,) = prove_files([spec])
    assert (r.status, r.detail) == (Status.ERROR, f"{spec}:4:14: semantic error: unknown operator Missing")


def test_a_theorem_in_one_case_says_case(tmp_path):
    spec = tmp_path / "One.tla"
    spec.write_text("---- MODULE One ----\nEXTENDS Naturals\nCONSTANT N\nTHEOREM T == N = 2 => N + N = 4\n====\n")
    (r,) = prove_files([spec])
    assert r.status is Status.PROVED and re.fullmatch(r"Q\.E\.D\. in 1 case \(N = 2: [\d.]+ s\)", r.detail), r.detail


@pytest.mark.parametrize("value, text", [("x", '"x"'), (frozenset({1, 2}), "{1, 2}")])
def test_a_constant_value_z3_cannot_take_is_named_in_tla_syntax(tmp_path, value, text):
    # (the CLI refuses such a .cfg first; the translator's own message is for API callers)
    from hicache.tla.compiler import Model
    from hicache.tla.loader import Loader
    from hicache.tla.z3translate import Ctx, Translator, Unsupported
    spec = tmp_path / "K.tla"
    spec.write_text("---- MODULE K ----\nCONSTANT S\nTHEOREM T == S = S\n====\n")
    loader = Loader([tmp_path])
    model = Model(loader, loader.load_file(spec), {"S": value})
    (_, goal, mod), = model.theorems
    with pytest.raises(Unsupported) as ei:
        Translator(model, {"S": value}).formula(goal, Ctx({}, mod, model.root_scope))
    assert ei.value.message == f"constant S = {text} (only integers and booleans)"


def test_a_module_named_unlike_its_file_is_an_error_result(tmp_path):
    spec = tmp_path / "QaErr3.tla"
    spec.write_text("---- MODULE Other ----\nTHEOREM T == TRUE\n====\n")
    (r,) = prove_files([spec])
    assert (r.status, r.detail) == (Status.ERROR, f"{spec}:1:13: parse error: module Other is in file QaErr3.tla: "
                                                  "a module's name must match its file name (MODULE QaErr3)")
