"""One self-contained HTML page for an explanation (inline CSS and JS, no network).

The page: a summary (property, first violating step, failing conjunct, verdict), a timeline
with one lane per rank/stage (one lane when the trace names none) and one mark per step
(the violating step highlighted, steps the spec does not allow marked; in a cross-rank
trace the ranks' contributions to the disagreeing exchange outlined), and a state panel
showing the selected step's spec state in TLA+ notation, changed variables marked.
Selecting: click a mark, or open the page at `#step=N` (read on load and on hash change).
Test hooks: `#state-panel[data-step]`, `tr[data-var]` with `.val` cells, `#mark-N`.
"""
from __future__ import annotations

import html
import json

from hicache.explain.analysis import Explanation, StepStatus
from hicache.explain.report import to_json

_CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; margin: 0 0 8px; }
table.summary td { padding: 2px 8px; vertical-align: top; }
pre { margin: 0; white-space: pre-wrap; font: 13px/1.35 ui-monospace, monospace; }
.verdict-implementation { color: #a00; font-weight: 600; }
.verdict-spec { color: #a60; font-weight: 600; }
#timeline { overflow-x: auto; border: 1px solid #ccc; padding: 6px; margin: 12px 0; }
.lane { display: flex; align-items: center; height: 26px; }
.lane-label { width: 90px; flex: none; font-size: 12px; color: #555; }
.slot { width: 24px; flex: none; display: flex; justify-content: center; }
.mark { width: 18px; height: 18px; border-radius: 9px; border: 1px solid #468; background: #bcd;
        padding: 0; cursor: pointer; font-size: 9px; }
.mark.bad { background: #fb8; }
.mark.violating { background: #d22; border-color: #700; color: #fff; }
.mark.exchange { background: #f99; border: 2px solid #a00; }
.mark.selected { outline: 3px solid #06c; }
#state-panel table { border-collapse: collapse; }
#state-panel td { border-top: 1px solid #eee; padding: 2px 8px; vertical-align: top; }
tr.changed td.var { font-weight: 700; }
tr.changed td.val { background: #fff3c4; }
td.was { color: #777; }
"""

_JS = r"""
const DATA = JSON.parse(document.getElementById('explain-data').textContent);
function text(tag, s, cls) {
  const e = document.createElement(tag);
  e.textContent = s;
  if (cls) e.className = cls;
  return e;
}
function select(i) {
  if (!(i >= 0 && i < DATA.steps.length)) return;
  const st = DATA.steps[i];
  document.querySelectorAll('.mark.selected').forEach(m => m.classList.remove('selected'));
  const mark = document.getElementById('mark-' + i);
  if (mark) mark.classList.add('selected');
  const panel = document.getElementById('state-panel');
  panel.dataset.step = String(i);
  panel.replaceChildren();
  const title = 'Step ' + i + ': ' + (st.action ? st.action + '(' + st.args + ')' : 'first state')
    + (i === DATA.violating ? '  [violating step]' : '');
  panel.appendChild(text('h2', title));
  if (st.check) panel.appendChild(text('p', 'spec check: ' + st.check));
  const prev = i > 0 ? DATA.steps[i - 1].state : null;
  const table = document.createElement('table');
  for (const v of DATA.variables) {
    if (!(v in st.state)) continue;
    const tr = document.createElement('tr');
    tr.dataset.var = v;
    const changed = st.changed.includes(v);
    if (changed) tr.className = 'changed';
    tr.appendChild(text('td', v, 'var'));
    const val = text('td', '', 'val');
    val.appendChild(text('pre', st.state[v]));
    tr.appendChild(val);
    tr.appendChild(text('td', changed && prev && v in prev ? 'was ' + prev[v] : '', 'was'));
    table.appendChild(tr);
  }
  panel.appendChild(table);
}
function fromHash() {
  const m = /step=(\d+)/.exec(location.hash);
  select(m ? parseInt(m[1], 10) : DATA.violating);
}
document.querySelectorAll('.mark').forEach(b => b.addEventListener('click', () => {
  const i = parseInt(b.dataset.step, 10);
  history.replaceState(null, '', '#step=' + i);
  select(i);
}));
window.addEventListener('hashchange', fromHash);
fromHash();
document.body.dataset.ready = '1';
"""


def _args(args: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in args.items() if k != "seq")


def _data(e: Explanation) -> dict:
    checks = {c.index: c for c in e.step_checks}
    steps = []
    for i, st in enumerate(e.trace.steps):
        c = checks.get(i)
        check = ""
        if c is not None:
            check = str(c.status) + (f" ({', '.join(c.actions)})" if c.actions else "") + \
                (f": {c.note}" if c.note else "")
        steps.append({"action": st.action, "args": _args(st.args), "lane": st.lane or "all",
                      "state": e.states[i], "changed": e.changed[i], "check": check,
                      "bad": c is not None and c.status in (StepStatus.NOT_ALLOWED, StepStatus.NOT_INITIAL),
                      "exchange": st.exchange})
    return {"variables": e.trace.variables, "steps": steps, "violating": e.first_violating_step
            if e.first_violating_step is not None else len(steps) - 1}


def render(e: Explanation) -> str:
    data = _data(e)
    j = to_json(e)
    lanes = sorted({s["lane"] for s in data["steps"]}, key=lambda x: (x != "all", x))
    esc = html.escape
    rows = []
    for lane in lanes:
        cells = []
        for i, st in enumerate(data["steps"]):
            if st["lane"] != lane:
                cells.append('<div class="slot"></div>')
                continue
            cls = "mark" + (" violating" if i == data["violating"] else "") + (" bad" if st["bad"] else "") \
                + (" exchange" if st["exchange"] else "")
            tip = esc(f"step {i}: {st['action'] or 'first state'}({st['args']})")
            cells.append(f'<div class="slot"><button class="{cls}" id="mark-{i}" data-step="{i}" '
                         f'title="{tip}">{i}</button></div>')
        rows.append(f'<div class="lane" data-lane="{esc(lane)}"><div class="lane-label">{esc(lane)}</div>'
                    f'{"".join(cells)}</div>')
    summary = [
        ("property", f"{j['kind'] or ''} {j['violated'] or ''}"),
        ("first violating step", f"{j['first_violating_step']} by {j['action'] or 'the first state'}"
                                 f"({_args(j['args'])})"),
        ("failing conjunct", j["conjunct"] or "?"),
        ("location", j["location"] or "?"),
        ("bindings", ", ".join(f"{k} = {v}" for k, v in j["bindings"].items())),
        ("trace is a spec behavior", {True: "yes", False: "no", None: "not checked"}[j["trace_is_spec_behavior"]]),
        ("spec's shortest path", "" if j["spec_search"] is None else
         f"to {j['spec_search']['target']}: {j['spec_search']['status']}"
         + (f", {j['spec_shortest_length']} states" if j["spec_shortest_length"] else "")
         + f" (the trace: {j['trace_length']} states)"),
    ]
    if j["ranks"] is not None:
        r = j["ranks"]
        summary[1:1] = [
            ("diverging ranks", ", ".join(f"rank {x}" for x in r["diverging_ranks"])
             + f" (reference: rank {r['reference_rank']})"),
            ("collective calls", ", ".join(f"rank {k}: {c}" for k, c in sorted(r["calls"].items(),
                                                                               key=lambda kv: int(kv[0])))),
            ("digest fields that differ", ", ".join(r["fields"]) or "-"),
        ]
    srows = "".join(f"<tr><td>{esc(k)}</td><td><pre>{esc(str(v))}</pre></td></tr>" for k, v in summary)
    payload = json.dumps(data).replace("</", "<\\/")
    title = esc(f"hicache explain: {j['violated'] or 'violation'} ({e.spec or e.trace.path})")
    notes = "".join(f"<li>{esc(n)}</li>" for n in e.notes)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>{_CSS}</style></head>
<body>
<h1>{title}</h1>
<table class="summary">{srows}</table>
<p id="verdict" class="verdict-{esc(j['verdict'])}">{esc(j['verdict_text'])}</p>
{f'<ul class="notes">{notes}</ul>' if notes else ''}
<p class="hint">Click a step (or open the page at #step=N) to see its spec state.</p>
<div id="timeline">{''.join(rows)}</div>
<section id="state-panel" data-step=""></section>
<script type="application/json" id="explain-data">{payload}</script>
<script>{_JS}</script>
</body></html>
"""


def write_html(e: Explanation, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(render(e))
