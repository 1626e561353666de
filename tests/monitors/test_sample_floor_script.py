"""scripts/sample_floor.py: each variant takes away what it says, and leaves verified mode
as it found it (the timings themselves are the script's output, not asserted here)."""
from __future__ import annotations

from scripts_loader import load_script


def _script():
    return load_script("sample_floor")


def test_each_variant_attaches_and_publishes_what_it_says_and_restores_what_it_patched():
    from hicache.monitors import attach as registry
    from hicache.monitors import runtime
    from hicache.monitors.attach import chosen
    attach, final = registry.attach, runtime.Monitor.cache_check
    mod = _script()
    out = mod.measure(rounds=1, limit=12)
    got = out["variants"]
    assert list(got) == list(mod.VARIANTS)
    # off attaches nothing; every other variant attaches its cache's monitors
    assert got["off"]["caches_attached"] == 0 and got["off"]["events_published"] == 0
    assert all(got[v]["caches_attached"] == 1 for v in mod.VARIANTS if v != "off")
    # `attached` leaves the bus without listeners: nothing is published; the others publish
    # every event of the same replay
    assert got["attached"]["events_published"] == 0
    published = {got[v]["events_published"] for v in ("deaf", "events", "rate0", "sample")}
    assert len(published) == 1 and published.pop() > 0
    # ... and only the monitors' own listeners count them: `deaf` publishes to a listener of
    # its own
    assert got["attached"]["events_monitors_counted"] == got["deaf"]["events_monitors_counted"] == 0
    assert all(got[v]["events_monitors_counted"] > 0 for v in ("events", "rate0", "sample"))
    # ratios are to off's replays of the same rounds
    assert got["off"]["wall"] == {"best_of": 1.0, "paired_median": 1.0}
    assert all(got[v]["wall"]["best_of"] > 0 for v in mod.VARIANTS)
    # what a variant patched is restored, and verified mode is off again
    assert registry.attach is attach and runtime.Monitor.cache_check is final
    assert chosen().mode is runtime.Mode.OFF


def test_the_final_check_runs_only_where_the_variant_keeps_it(monkeypatch):
    from hicache.bench import monitors as bm
    from hicache.monitors import runtime
    from hicache.replay.driver import load_requests
    mod = _script()
    reqs = load_requests(str(bm.TRACE), bm.PAGE, 8)
    cfg = bm.REPLAYS["kv_bytes"](8)
    checks = []
    final = runtime.Monitor.cache_check

    def counted(self, step=None):
        checks.append(self)
        return final(self, step)
    monkeypatch.setattr(runtime.Monitor, "cache_check", counted)
    seen = {}
    for v in mod.VARIANTS:
        checks.clear()
        mod.replay_once(v, cfg, reqs)
        seen[v] = len(checks)
    assert seen["off"] == 0
    assert seen["attached"] == seen["deaf"] == seen["events"] == 0
    assert seen["rate0"] >= 1 and seen["sample"] >= 1
