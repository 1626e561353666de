"""spec/PrefixAgreementCore.tla: the agreement core of PrefixAgreement in the fragment Z3
translates. Its IndInv is model-checked (the cfg), proved inductive by `hicache prove` for
every pipeline of 1 to 8 stages, and the seeded bug (stages > 0 consume the latest acks)
breaks both: the model check reaches two stages with different cached prefixes, and the
inductive step gets a counterexample in which a stage consumed acks stage 0 did not cut."""
import json
import re
import shutil
from pathlib import Path

import pytest

import hicache
from hicache.cli.main import main
from hicache.tla.z3backend import Status, prove_files
from tla_testlib import check_model

SPEC = hicache.REPO_ROOT / "spec" / "PrefixAgreementCore.tla"
CFG = SPEC.with_suffix(".cfg")
SEEDED = Path(__file__).parent / "prove_models" / "PrefixAgreementCoreSeeded.tla"
#: index of `used` in the module's VARIABLES (the checker's state tuples follow that order)
USED = 10


def _fn(text: str) -> dict[int, int]:
    """A printed integer function `0 :> 5 @@ 1 :> 6` as a dict."""
    return {int(k): int(v) for k, v in re.findall(r"(-?\d+) :> (-?\d+)", text)}


def _printed(name: str, detail: str) -> dict[int, int]:
    m = re.search(rf"(?<![\w']){re.escape(name)} = \(([^)]*)\)", detail)
    assert m is not None, f"{name} not in {detail}"
    return _fn(m.group(1))


def _cfg_with(tmp_path: Path, *, bug: bool, invariants: list[str]) -> Path:
    """The shipped cfg with the bug constant set and only `invariants` checked."""
    text = CFG.read_text()
    text = text.replace("ConsumeLatestProgress = FALSE", f"ConsumeLatestProgress = {str(bug).upper()}")
    head, _, rest = text.partition("INVARIANTS")
    _, _, view = rest.partition("VIEW")
    out = tmp_path / "Core.cfg"
    out.write_text(head + "INVARIANTS\n" + "".join(f"    {i}\n" for i in invariants) + "VIEW" + view)
    return out


def test_shipped_model_checks_the_agreement_invariants_and_passes():
    text = CFG.read_text()
    for inv in ("PrefixOfIsLeadingRun", "PublishedLeLoaded", "SameCachedPrefix", "UsedLeLoaded",
                "AcksInStep", "SameAcksConsumed", "IndInv"):
        assert re.search(rf"^\s+{inv}$", text, re.M), inv
    assert "ConsumeLatestProgress = FALSE" in text
    res = check_model(SPEC, CFG)
    assert res.result == "ok" and res.violated is None
    assert res.depth >= 2 * 2 + 3     # every rank acked both batches, stages checked


def test_seeded_bug_model_reaches_different_cached_prefixes(tmp_path):
    res = check_model(SPEC, _cfg_with(tmp_path, bug=True, invariants=["SameCachedPrefix"]))
    assert res.result == "invariant" and res.violated == "SameCachedPrefix"
    used = res.trace[-1].state[USED].d
    chosen = {v for v in used.values() if v != -1}
    assert len(chosen) == 2, used


def test_same_model_without_the_bug_keeps_the_prefix(tmp_path):
    res = check_model(SPEC, _cfg_with(tmp_path, bug=False, invariants=["SameCachedPrefix"]))
    assert res.result == "ok"


def test_indinv_is_inductive_for_1_to_8_stages(capsys):
    # (two processes: the cases take ~130 s one after the other here)
    assert main(["prove", str(SPEC), "--json", "--timeout", "120", "--jobs", "2"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ok"] is True
    (t,) = [t for t in out["theorems"] if t["name"] == "IndInvInductive"]
    assert t["module"] == "PrefixAgreementCore" and t["status"] == "proved"
    assert "vacuous" not in t["detail"], t["detail"]
    assert t["detail"].startswith("Q.E.D. in 8 cases with NRanks = 2, NBatches = 2, BatchPages = 2, "
                                  "ConsumeLatestProgress = FALSE ("), t["detail"]
    cases = re.findall(r"NStages = (\d+): [\d.]+ s", t["detail"])
    assert [int(n) for n in cases] == list(range(1, 9))


@pytest.mark.parametrize("jobs", [1, 2])
def test_seeded_bug_breaks_the_inductive_step_with_a_counterexample(tmp_path, jobs):
    """With one process or two (the cases proved at once, the last first), the result is
    the first case in order that is not proved."""
    shutil.copy(SPEC, tmp_path / SPEC.name)
    shutil.copy(SEEDED, tmp_path / SEEDED.name)
    (r,) = prove_files([tmp_path / SEEDED.name], timeout_s=60, jobs=jobs)
    assert r.name == "SeededBugBreaksStep"
    assert r.status is Status.COUNTEREXAMPLE, r.detail
    # one stage is proved (no stage > 0 to consume differently); two are refuted
    assert r.detail.startswith("case NStages = 2: counterexample: "), r.detail
    # after the step some stage consumed acks other than stage 0's cut of its check
    checks = _printed("checks'", r.detail)
    consumed = _printed("consumed'", r.detail)
    cut = _printed("cut'", r.detail)
    assert any(checks[s] > 0 and consumed[s] != cut[checks[s]] for s in (0, 1)), r.detail
