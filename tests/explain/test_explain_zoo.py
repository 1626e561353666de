"""hicache explain on the violation of every bug in the zoo (1-14): the text report, the
HTML page, and the page rendered by headless Chromium (click the violating step, read the
spec state shown)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from explain_browser import Browser, available
from hicache.explain import Verdict, explain
from hicache.explain.html import render, write_html
from hicache.explain.report import to_json, to_text
from hicache.tla.itf import decode, read_itf
from hicache.tla.values import Fcn, fmt

ROOT = Path(__file__).resolve().parents[2]
BUGS = range(1, 15)

needs_chromium = pytest.mark.skipif(not available(), reason="/usr/bin/chromium is missing "
                                                            "(scripts/setup.sh installs the Debian package)")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict:
    from hicache.monitors.zoo import run_zoo
    vdir = tmp_path_factory.mktemp("zoo")
    return {r.bug: r for r in run_zoo(seeds=30, vdir=str(vdir))}


@pytest.fixture(scope="module")
def explained(zoo) -> dict:
    return {bug: explain(r.trace) for bug, r in zoo.items()}


def _expected(trace_path: str, k: int) -> dict[str, str]:
    """Step k's state in TLA+ notation, decoded here from the ITF file."""
    doc = read_itf(trace_path)
    return {v: fmt(decode(doc["states"][k][v])) for v in doc["vars"] if v in doc["states"][k]}


def test_every_bug_writes_a_trace(zoo):
    assert sorted(zoo) == list(BUGS)
    for bug, r in zoo.items():
        assert r.caught and r.trace and Path(r.trace).is_file(), (bug, r)


@pytest.mark.parametrize("bug", BUGS)
def test_text_report(zoo, explained, bug):
    r, e = zoo[bug], explained[bug]
    doc = read_itf(r.trace)
    v = doc["#meta"]["violation"]
    assert v["property"] == r.property
    text = to_text(e)
    lines = text.splitlines()
    assert lines[0] == f"{r.trace}: {v['kind']} {v['property']}"
    k = e.first_violating_step
    assert f"First violating step: step {k}" in text
    # every zoo fault is the implementation's
    assert e.verdict is Verdict.IMPLEMENTATION, (bug, e.verdict_text)
    assert f"Verdict: {e.verdict_text}" in lines
    if v["kind"] == "digest":
        _check_ranks(r, e, text, doc)
    elif v["kind"] == "runtime":
        assert "Failing conjunct at hicache/monitors/workers.py:" in text
        assert k == len(doc["states"]) - 1 and e.action == doc["states"][k]["#meta"]["action"]
    else:
        assert "Failing conjunct at spec/" in text
        file, line, col = e.finding.conjunct.location.rsplit(":", 2)
        src = (ROOT / file).read_text().splitlines()[int(line) - 1]
        assert src[int(col) - 1:].startswith(e.finding.conjunct.text.splitlines()[0])
    if "[tree form: " in v["conjunct"]:
        # a guard (or invariant) the map checks in its tree form: the report keeps the
        # recorded witness under the spec's text, and no chain-shaped spec search runs
        witness = v["conjunct"].split("[tree form: ", 1)[1]
        assert f"[tree form: {witness}" in e.finding.conjunct.text.splitlines()[-1]
        if v["kind"] == "action":
            assert e.spec_search.status == "skipped"
    # the monitor's model: recorded constants and verify settings
    meta = doc["#meta"]
    if v["kind"] != "digest":
        assert meta["config"]["mode"] == "strict" and e.constants_source == "trace"
        assert "  monitor: verify mode strict\n" in text     # (no sample rate: strict checks every step)


def _check_ranks(r, e, text: str, doc: dict) -> None:
    """A cross-rank trace: one lane per rank, the exchange last, the diverging ranks and
    fields named, recomputed independently from the exchange state here."""
    last = len(doc["states"]) - 1
    assert e.first_violating_step == last and e.action == "DigestExchange"
    assert {s["#meta"].get("rank") for s in doc["states"][:-1]} == {0, 1}
    assert "rank" not in doc["states"][-1]["#meta"]
    ex = doc["states"][-1]
    coll, view = decode(ex["collective"]), decode(ex["view"])
    assert isinstance(coll, Fcn) and set(coll.d) == {0, 1}
    assert "Diverging ranks: rank 1 (reference: rank 0" in text
    assert e.ranks["diverging_ranks"] == [1] and e.ranks["reference_rank"] == 0
    assert e.ranks["diverging_ranks"] == doc["#meta"]["violation"]["divergence"]["diverging_ranks"]
    v0, v1 = view.d[0].d, view.d[1].d
    differ = sorted(f for f in set(v0) | set(v1) if v0.get(f) != v1.get(f))
    assert e.ranks["fields"] == differ and differ
    assert f"Digest fields that differ: {', '.join(differ)}" in text
    if r.property == "SameCollectiveSequence":
        assert coll.d[0] != coll.d[1] and not e.ranks["same_call"]
        assert f"rank 0 {coll.d[0]}, rank 1 {coll.d[1]}  <- different calls" in text
    else:
        assert r.property == "RankStateDigestsEqual"
        assert coll.d[0] == coll.d[1] and e.ranks["same_call"]


@pytest.mark.parametrize("bug", BUGS)
def test_html_page(zoo, explained, bug):
    e = explained[bug]
    page = render(e)
    k = e.first_violating_step
    assert re.search(rf'<button class="mark violating[^"]*" id="mark-{k}" data-step="{k}"', page)
    data = json.loads(re.search(r'<script type="application/json" id="explain-data">(.*?)</script>',
                                page, re.S).group(1).replace("<\\/", "</"))
    assert len(data["steps"]) == len(e.trace.steps) and data["violating"] == k
    lanes = re.findall(r'<div class="lane" data-lane="([^"]+)">', page)
    if e.kind == "digest":
        assert lanes == ["all", "rank 0", "rank 1"] and data["steps"][k]["lane"] == "all"
        assert "<td>diverging ranks</td><td><pre>rank 1 (reference: rank 0)</pre>" in page
        # each rank's contribution to the exchange that disagreed is outlined on its lane
        ex = [i for i, st in enumerate(data["steps"]) if st["exchange"]]
        assert sorted(data["steps"][i]["lane"] for i in ex) == ["rank 0", "rank 1"]
        for i in ex:
            assert re.search(rf'<button class="mark exchange" id="mark-{i}"', page)
    else:
        assert not any(st["exchange"] for st in data["steps"])
    assert to_json(e)["first_violating_step"] == k


@needs_chromium
def test_chromium_click_violating_step_of_every_bug(zoo, explained, tmp_path):
    read_panel = ("JSON.stringify({step: document.getElementById('state-panel').dataset.step, "
                  "title: document.querySelector('#state-panel h2').textContent, "
                  "rows: [...document.querySelectorAll('#state-panel tr')].map(tr => "
                  "[tr.dataset.var, tr.querySelector('.val').textContent])})")
    locate = ("(() => { const m = document.querySelector('.mark.violating');"
              " m.scrollIntoView({block: 'center', inline: 'center'});"
              " const r = m.getBoundingClientRect();"
              " return [r.x + r.width / 2, r.y + r.height / 2, +m.dataset.step,"
              " m.closest('.lane').dataset.lane]; })()")
    lane_marks = ("JSON.stringify(Object.fromEntries([...document.querySelectorAll('.lane')].map(l =>"
                  " [l.dataset.lane, l.querySelectorAll('.mark').length])))")
    with Browser() as b:
        for bug in BUGS:
            r, e = zoo[bug], explained[bug]
            out = tmp_path / f"bug{bug}.html"
            write_html(e, str(out))
            k = e.first_violating_step
            b.open(f"{out.as_uri()}#step=0")
            assert json.loads(b.evaluate(read_panel))["step"] == "0", bug
            x, y, step, lane = b.evaluate(locate)
            assert step == k, bug
            b.click(x, y)
            after = json.loads(b.evaluate(read_panel))
            assert after["step"] == str(k), bug
            assert after["title"].startswith(f"Step {k}: {e.action}(") and "[violating step]" in after["title"]
            assert {v: val for v, val in after["rows"]} == _expected(r.trace, k), bug
            if e.kind == "digest":
                # both ranks' events are on the page, the exchange on the lane of every rank
                marks = json.loads(b.evaluate(lane_marks))
                assert lane == "all" and marks["rank 0"] > 0 and marks["rank 1"] > 0, (bug, marks)
                shown = dict(after["rows"])
                assert shown["collective"].startswith("(0 :> ") and "@@ 1 :> " in shown["collective"]
