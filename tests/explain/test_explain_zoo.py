"""hicache explain on the violation trace of every bug-zoo entry that writes one."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from hicache.explain import Verdict, explain
from hicache.explain.html import render
from hicache.explain.report import to_text
from hicache.tla.itf import read_itf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    from hicache.monitors.zoo import run_zoo
    vdir = tmp_path_factory.mktemp("zoo")
    results = run_zoo(seeds=30, vdir=str(vdir))
    return results, sorted(vdir.glob("*.itf.json"))


def test_every_zoo_trace_is_explained(zoo):
    results, traces = zoo
    caught = {r.property for r in results if r.caught and r.kind in ("runtime", "spec")}
    # the single-engine and spec entries write a trace (cross-rank digest alarms write none)
    seen = set()
    for path in traces:
        v = read_itf(path)["#meta"]["violation"]
        seen.add(v["property"])
        e = explain(path)
        text = to_text(e)
        assert f"{v['kind']} {v['property']}" in text.splitlines()[0]
        assert "First violating step: step" in text and "Failing conjunct at spec/" in text
        # every zoo fault is the implementation's: the spec (CI model) allows none of them
        assert e.verdict is Verdict.IMPLEMENTATION, (path.name, e.verdict_text)
        assert e.finding is not None and e.finding.conjunct.location.startswith(v["location"].rsplit(":", 2)[0])
        if e.finding.conjunct.location == v["location"]:
            # the same conjunct, quoted from the spec with its own layout
            assert e.finding.conjunct.text.split() == v["conjunct"].split()
            file, line, col = v["location"].rsplit(":", 2)
            src = (ROOT / file).read_text().splitlines()[int(line) - 1]
            assert src[int(col) - 1:].startswith(e.finding.conjunct.text.splitlines()[0])
        page = render(e)
        k = e.first_violating_step
        assert re.search(rf'class="mark violating[^"]*" id="mark-{k}"', page)
        data = json.loads(re.search(r'<script type="application/json" id="explain-data">(.*?)</script>',
                                    page, re.S).group(1).replace("<\\/", "</"))
        assert len(data["steps"]) == len(e.trace.steps) and data["violating"] == k
    assert caught <= seen
