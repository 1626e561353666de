"""The worker watch's common case (loops.watch_probe, native where it builds, and its twin
py_watch_probe): the watch's check is called exactly when it has something to judge (a worker
with a queued ack, a storage audit with a breach the watch has not reported), whatever the
cache, its workers and their types went through (a worker replaced or gone, the cache's
attributes made a dict, a worker class changed: each read by index must then miss and read
again, never misread)."""
from __future__ import annotations

import pytest

from hicache.monitors.maps import loops
from hicache.monitors.workers import KeyAudit, WorkerWatch
from hicache.monitors.workload import MemStore, WorkloadConfig, make_cache, plan
from hicache.runtime.transfer import Worker


class _Monitor:
    def fail(self, *a) -> None:
        raise AssertionError("the probe's own tests judge nothing")


def _probe(impl: str):
    if impl == "native" and loops._mod is None:
        pytest.skip("no native module: watch_probe is its Python twin")
    wcfg = WorkloadConfig(requests=2)
    policy, _ = plan(0, wcfg)
    cache = make_cache(wcfg, policy)
    watch = WorkerWatch(cache, _Monitor())
    calls = []

    def slow(name, fields):
        calls.append(name)
        return "judged"
    make = loops._mod.watch_probe if impl == "native" else loops.py_watch_probe
    return cache, watch, make(cache, watch, KeyAudit, slow), calls


def _answers(cache, watch, probe, calls) -> list:
    """The probe's answer in each state the watch can be in, and whether it called the check."""
    out = []
    watch._seen = 0

    def ask(what):
        n = len(calls)
        out.append((what, probe(what, {}), len(calls) - n))
    for _ in range(3):                       # (the reads by index: made, then hit)
        ask("idle")
    cache.writer.acks.append("op")           # a worker with an ack queued
    ask("queued")
    cache.writer.acks.clear()
    ask("drained")
    saved, cache.prefetcher = cache.prefetcher, None       # a worker gone
    ask("no prefetcher")
    cache.prefetcher = saved
    cache.prefetcher.acks.append("op")
    ask("prefetcher queued")
    cache.prefetcher.acks.clear()
    audit = KeyAudit(MemStore())
    saved, cache.storage = cache.storage, audit
    ask("audit, no breach")
    audit.breaches.append(("t", "k"))
    ask("audit breach")
    watch._seen = 1
    ask("breach reported")
    cache.storage = saved
    return out


@pytest.mark.parametrize("impl", ["native", "twin"])
def test_the_check_is_called_exactly_when_something_is_due(impl):
    cache, watch, probe, calls = _probe(impl)
    got = _answers(cache, watch, probe, calls)
    due = {"queued", "prefetcher queued", "audit breach"}
    assert [(w, r, n) for w, r, n in got] == [(w, "judged" if w in due else None, int(w in due)) for w, _, _ in got]


@pytest.mark.parametrize("impl", ["native", "twin"])
def test_reads_by_index_miss_and_read_again_after_the_objects_change(impl, monkeypatch):
    """The cache's attributes made a dict, a worker class given a new attribute (its version
    tag renewed), the loader replaced by another worker: the same answers as before."""
    cache, watch, probe, calls = _probe(impl)
    before = _answers(cache, watch, probe, calls)
    vars(cache)                               # (its attributes now in a dict of its own)
    monkeypatch.setattr(Worker, "probe_test_marker", 1, raising=False)
    loader, cache.loader = cache.loader, Worker("load-again")
    try:
        assert _answers(cache, watch, probe, calls) == before
        cache.loader.acks.append("op")
        assert probe("queued", {}) == "judged"
    finally:
        cache.loader.acks.clear()
        cache.loader.close()
        cache.loader = loader


def test_the_native_probe_refuses_bad_arguments():
    if loops._mod is None:
        pytest.skip("no native module")
    with pytest.raises(TypeError, match="audit must be a type"):
        loops._mod.watch_probe(object(), object(), object(), print)
    cache, watch, probe, _ = _probe("native")
    with pytest.raises(TypeError, match="takes \\(name, fields\\)"):
        probe("only one")
