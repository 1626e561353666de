"""`hicache check --all` compares each bug twin's counterexample with the committed one: a
spec change that alters it fails until `--rewrite` re-records it (PrefixAgreement's traces
stayed stale for weeks after its verdict became a model value, unnoticed)."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from hicache import REPO_ROOT
from hicache.cli.main import main


def _layout(tmp_path: Path, name: str) -> Path:
    """A repo-shaped copy: spec/ linked, a manifest of the one model, its committed files."""
    (tmp_path / "spec").symlink_to(REPO_ROOT / "spec")
    mc = tmp_path / "models_checked"
    mc.mkdir()
    doc = json.loads((REPO_ROOT / "models_checked" / "manifest.json").read_text())
    doc["models"] = [m for m in doc["models"] if m["name"] == name]
    (mc / "manifest.json").write_text(json.dumps(doc))
    for ext in (".itf.json", ".txt"):
        shutil.copy(REPO_ROOT / "models_checked" / f"{name}{ext}", mc / f"{name}{ext}")
    return mc


def _check(mc: Path, capsys, *extra) -> tuple[int, dict]:
    rc = main(["check", "--all", "--json", "--manifest", str(mc / "manifest.json"), *extra])
    return rc, json.loads(capsys.readouterr().out.strip().splitlines()[-1])


def test_committed_counterexample_matches(tmp_path, capsys):
    mc = _layout(tmp_path, "DraftState_bug")
    rc, out = _check(mc, capsys)
    assert rc == 0 and out["models"][0]["match"] and out["models"][0]["diffs"] == []


def test_a_stale_counterexample_fails_until_rewritten(tmp_path, capsys):
    mc = _layout(tmp_path, "DraftState_bug")
    itf = mc / "DraftState_bug.itf.json"
    doc = json.loads(itf.read_text())
    doc["states"][2]["tgtDone"][0] = False          # what an older spec reached
    itf.write_text(json.dumps(doc))
    rc, out = _check(mc, capsys)
    (row,) = out["models"]
    assert rc == 1 and not row["match"]
    assert row["diffs"] == ["committed counterexample DraftState_bug.itf.json differs at state 3 "
                            "(run `hicache check --all --rewrite` and review the diff)"]
    rc, out = _check(mc, capsys, "--rewrite")
    assert rc == 0 and json.loads(itf.read_text())["states"][2]["tgtDone"][0] is True
    rc, out = _check(mc, capsys)
    assert rc == 0


def test_a_committed_counterexample_of_another_length_fails(tmp_path, capsys):
    mc = _layout(tmp_path, "DraftState_bug")
    itf = mc / "DraftState_bug.itf.json"
    doc = json.loads(itf.read_text())
    doc["states"].append(doc["states"][-1])
    itf.write_text(json.dumps(doc))
    rc, out = _check(mc, capsys)
    assert rc == 1 and out["models"][0]["diffs"] == [
        "committed counterexample DraftState_bug.itf.json has 5 states, the one found now 4 "
        "(run `hicache check --all --rewrite` and review the diff)"]


def test_a_missing_committed_counterexample_fails(tmp_path, capsys):
    mc = _layout(tmp_path, "DraftState_bug")
    (mc / "DraftState_bug.itf.json").unlink()
    rc, out = _check(mc, capsys)
    assert rc == 1 and out["models"][0]["diffs"] == [
        "no committed counterexample DraftState_bug.itf.json (run `hicache check --all --rewrite` and review it)"]
