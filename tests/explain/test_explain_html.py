"""The explain page: self-contained, and rendered by headless Chromium (Debian `chromium`)."""
from __future__ import annotations

import html as htmllib
import re
from pathlib import Path

import pytest

from explain_browser import Browser, available, dump_dom
from hicache.explain import explain
from hicache.explain.html import render, write_html
from hicache.tla.itf import decode, read_itf
from hicache.tla.values import fmt

needs_chromium = pytest.mark.skipif(not available(), reason="/usr/bin/chromium is missing "
                                                            "(scripts/setup.sh installs the Debian package)")


def _expected(trace_path: Path, k: int) -> dict[str, str]:
    """Step k's state in TLA+ notation, decoded here from the ITF file."""
    doc = read_itf(trace_path)
    return {v: fmt(decode(doc["states"][k][v])) for v in doc["vars"] if v in doc["states"][k]}


def _changed(trace_path: Path, k: int) -> set[str]:
    doc = read_itf(trace_path)
    if k == 0:
        return set()
    a, b = doc["states"][k - 1], doc["states"][k]
    return {v for v in doc["vars"] if v in a and v in b and decode(a[v]) != decode(b[v])}


def _panel(dom: str) -> tuple[str, dict[str, str], set[str]]:
    """(data-step, variable -> shown value, changed variables) of the rendered state panel."""
    m = re.search(r'<section id="state-panel" data-step="(\d*)">(.*?)</section>', dom, re.S)
    assert m, "no state panel in the rendered page"
    rows = re.findall(r'<tr data-var="([^"]+)"( class="changed")?><td class="var">[^<]*</td>'
                      r'<td class="val"><pre>(.*?)</pre></td>', m.group(2), re.S)
    return m.group(1), {v: htmllib.unescape(val) for v, _, val in rows}, {v for v, c, _ in rows if c}


def test_page_is_self_contained(twin_traces):
    page = render(explain(twin_traces["HostTier_bug"]))
    assert page.startswith("<!DOCTYPE html>")
    # no external resource of any kind: scripts and styles are inline
    assert not re.search(r'\b(src|href)\s*=', page)
    assert "<link" not in page and "@import" not in page
    assert "http://" not in page.replace("https://apalache", "") and "//cdn" not in page


def test_page_marks(pipeline_trace):
    e = explain(pipeline_trace)
    page = render(e)
    k = e.first_violating_step
    assert re.search(rf'<button class="mark violating[^"]*" id="mark-{k}" data-step="{k}"', page)
    assert page.count('class="mark') == len(e.trace.steps)
    lanes = re.findall(r'<div class="lane" data-lane="([^"]+)">', page)
    doc = read_itf(pipeline_trace)
    ranks = {f"rank {s['#meta']['args']['rank']}" for s in doc["states"] if "rank" in s["#meta"]["args"]}
    others = any("rank" not in s["#meta"]["args"] for s in doc["states"])
    assert ranks and others    # restores are per rank, gathers are global
    assert lanes == ["all"] + sorted(ranks)


@needs_chromium
@pytest.mark.parametrize("twin", ["HostTier_bug", "PPSync_bug"])
def test_dump_dom_selects_step_from_hash(twin_traces, tmp_path, twin):
    path = twin_traces[twin]
    out = tmp_path / "page.html"
    e = explain(path)
    write_html(e, str(out))
    k = e.first_violating_step
    for step in (k, 1):
        shown_step, shown, changed = _panel(dump_dom(f"{out.as_uri()}#step={step}"))
        assert shown_step == str(step)
        assert shown == _expected(path, step)
        assert changed == _changed(path, step)
    # without a hash the page opens on the violating step
    shown_step, shown, _ = _panel(dump_dom(out.as_uri()))
    assert shown_step == str(k) and shown == _expected(path, k)


@needs_chromium
@pytest.mark.parametrize("which", ["twin", "monitor"])
def test_click_violating_step(twin_traces, pipeline_trace, tmp_path, which):
    path = twin_traces["LayerPipeline_bug"] if which == "twin" else pipeline_trace
    e = explain(path)
    out = tmp_path / "page.html"
    write_html(e, str(out))
    k = e.first_violating_step
    read_panel = ("JSON.stringify({step: document.getElementById('state-panel').dataset.step, "
                  "title: document.querySelector('#state-panel h2').textContent, "
                  "rows: [...document.querySelectorAll('#state-panel tr')].map(tr => "
                  "[tr.dataset.var, tr.querySelector('.val').textContent, tr.className === 'changed'])})")
    import json
    with Browser() as b:
        b.open(f"{out.as_uri()}#step=0")
        before = json.loads(b.evaluate(read_panel))
        assert before["step"] == "0"
        x, y, step = b.evaluate("(() => { const m = document.querySelector('.mark.violating');"
                                " m.scrollIntoView({block: 'center', inline: 'center'});"
                                " const r = m.getBoundingClientRect();"
                                " return [r.x + r.width / 2, r.y + r.height / 2, +m.dataset.step]; })()")
        assert step == k
        b.click(x, y)
        after = json.loads(b.evaluate(read_panel))
        selected = b.evaluate("document.querySelector('.mark.selected').id")
    assert after["step"] == str(k) and selected == f"mark-{k}"
    assert "[violating step]" in after["title"] and after["title"].startswith(f"Step {k}: {e.action}(")
    assert {v: val for v, val, _ in after["rows"]} == _expected(path, k)
    assert {v for v, _, ch in after["rows"] if ch} == _changed(path, k)
