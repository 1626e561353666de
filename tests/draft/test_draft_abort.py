"""TransferAbort: a transfer one of whose copies failed never fires; its owner aborts it, its
record leaves the set and its spec slot is idle again, so a long canary that survives copy
and storage errors keeps neither records nor window slots of them.

Every cache here is strict-monitored (the `verified` fixture's mode): each step, the abort
included, is checked against spec/DraftState.tla, and the HostTier steps against its spec."""
from __future__ import annotations

import pytest

from draft_support import TOKENS, complete_transfer, compute, host_only_cache, make_cache
from hicache.monitors.attach import monitor_of
from hicache.monitors.maps.draft_state import DraftStateMap
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
from hicache.runtime import draft
from hicache.runtime.events import Recorder

class CopyFailed(RuntimeError):
    pass


def _actions(rec: Recorder, t: int) -> list[str]:
    return [str(e.action) for e in rec.events if e.args.get("t") == t]


def _failing_loads(cache) -> None:
    """Every load-back's copy of the cache fails at its last layer (after the target's
    earlier layers landed)."""
    orig = cache._load_layer_fn
    last = cache.cfg.layers - 1

    def load_fn(op):
        copy = orig(op)

        def failing(layer):
            if layer == last:
                raise CopyFailed("copy kernel failed")
            copy(layer)
        return failing
    cache._load_layer_fn = load_fn


@pytest.fixture
def monitored(tmp_path, verified):
    """A strict-monitored cache with dependent pools whose TOKENS prefix is on host only,
    the DraftState events recorded, its load-backs failing; yields (cache, deps, recorder)."""
    cache, deps, rec = host_only_cache(verified, str(tmp_path))
    _failing_loads(cache)
    yield cache, deps, rec
    cache.close()
    assert deps.transfers == {}


def test_a_failed_load_is_aborted_and_its_read_reads_none_of_it(monitored):
    cache, deps, rec = monitored
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op is not None and op.wait(30) and isinstance(op.error, CopyFailed)
    # the read waits on the load and takes the prefix after it: the failed nodes are out
    assert deps.read(req, "draft_kv") == [] and deps.read(req, None) == []
    assert "BufferRead" not in _actions(rec, op.draft_tid)          # (nothing fired: no read)
    cache.poll()
    assert _actions(rec, op.draft_tid) == ["TransferLaunch", "TransferAbort"]
    assert op.draft_tid not in deps.transfers and cache.metrics.load_failures == 1
    rmap = monitor_of(deps).rmap
    assert op.draft_tid not in rmap.slot_of and rmap.tid_at == {}
    cache.finish(req)


def test_a_failed_backup_is_aborted(monitored, monkeypatch):
    cache, deps, rec = monitored
    req = cache.match(list(range(200, 204)))
    pages = cache.alloc(1)
    monkeypatch.setattr(deps, "copy_all", lambda *a: (_ for _ in ()).throw(CopyFailed("write failed")))
    cache.insert(req, pages)                 # write-through: the backup starts, its copy fails
    cache.finish(req)
    cache.drain()
    launches = [e.args["t"] for e in rec.events if e.action == "TransferLaunch" and e.args["kind"] == "backup"]
    assert _actions(rec, launches[-1]) == ["TransferLaunch", "TransferAbort"]
    assert launches[-1] not in deps.transfers and req.node.host is None


def test_a_long_run_of_failed_loads_keeps_the_window(monitored):
    """Fifty failed loads, one after another: each leaves its record and slot behind it, so
    the window stays at its first width and the set holds nothing (before, each kept both)."""
    cache, deps, rec = monitored
    rmap = monitor_of(deps).rmap
    width = rmap.capacity
    for _ in range(50):
        req = cache.match(TOKENS)
        op = cache.load_back(req)
        assert op is not None and op.wait(30) and op.error is not None
        cache.finish(req)
        cache.poll()
        assert deps.transfers == {} and rmap.slot_of == {}
    assert rmap.capacity == width and cache.metrics.load_failures == 50
    assert sum(e.action == "TransferAbort" for e in rec.events) == 50




@pytest.mark.parametrize("actions", [True, False], ids=["actions", "invariants_only"])
def test_the_public_abort(tmp_path, actions):
    """abort: a copying transfer aborts (TransferAbort), a fired one retires (TransferRetire),
    an unknown or ended one is ignored; a step of an aborted transfer is refused."""
    cache, deps = make_cache(draft_layout="sidecar")
    mon = Monitor(DraftStateMap(deps, actions=actions), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    rec = Recorder()
    deps.bus.subscribe(mon)
    deps.bus.subscribe(rec)
    a = deps.launch(draft.Kind.GATHER, [0, 1], [0, 1])
    deps.finish_target(a)
    deps.abort(a)
    b = deps.launch(draft.Kind.GATHER, [2], [2])
    complete_transfer(deps, b)
    deps.abort(b)
    deps.abort(a)
    deps.abort(99)
    assert [str(e.action) for e in rec.events if e.args["t"] == a] == ["TransferLaunch", "TargetCopyFinish",
                                                                        "TransferAbort"]
    assert [str(e.action) for e in rec.events if e.args["t"] == b][-1] == "TransferRetire"
    assert deps.transfers == {} and mon.steps == mon.checked == len(rec.events)
    with pytest.raises(ValueError, match=r"tid: fire\(1\) of no live transfer"):
        deps.fire(a)
    cache.close()


def test_an_abort_of_a_fired_transfer_is_a_violation(tmp_path):
    """The spec's TransferAbort needs a copying transfer: one emitted for a fired transfer
    (which must retire) fails its guard."""
    cache, deps = make_cache(draft_layout="sidecar")
    deps.bus.subscribe(Monitor(DraftStateMap(deps), VerifyConfig(mode="strict", violation_dir=str(tmp_path))))
    t = deps.launch(draft.Kind.GATHER, [0], [0])
    complete_transfer(deps, t)
    with pytest.raises(ProtocolViolation) as e:
        deps._emit(draft.D.TransferAbort, t=t)
    assert (e.value.action, e.value.conjunct, e.value.kind) == ("TransferAbort", 'phase[t] = "copying"', "action")
    cache.close()


def test_sample_mode_checks_every_abort(tmp_path, verified):
    """At sample rate 0 the aborts are still checked (the map's always_check): the record
    they end is gone for any later sample."""
    verified.enable("sample", sample_rate=0.0, violation_dir=str(tmp_path))
    cache, deps = make_cache(draft_layout="sidecar")
    compute(cache, deps, TOKENS)
    assert cache.evict_device(cache.cfg.device_pages) > 0
    _failing_loads(cache)
    mon = monitor_of(deps)
    before = mon.checked
    req = cache.match(TOKENS)
    op = cache.load_back(req)
    assert op.wait(30) and op.error is not None
    cache.poll()
    assert mon.checked == before + 1 and mon.history[-1].action == "TransferAbort"
    cache.finish(req)
    cache.close()


def test_a_failed_prefetch_of_a_live_request_is_aborted_at_close(tmp_path, verified):
    """A prefetch whose host write failed, its request still live when the cache closes: the
    close aborts it (a finish would have), and the set ends empty."""
    from draft_support import DictStorage
    verified.enable("strict", violation_dir=str(tmp_path))
    tokens = list(range(100, 112))
    cache, deps = make_cache(storage=DictStorage(), draft_layout="sidecar")
    compute(cache, deps, tokens)
    cache.drain()
    cache.evict_device(cache.cfg.device_pages)
    cache.evict_host(cache.cfg.host_pages)

    def failing(*a, **k):
        raise CopyFailed("host write failed")
    deps.write_value = failing
    req = cache.match(tokens)
    assert cache.prefetch(req)
    req.prefetch.wait()
    tid = req.prefetch.draft_tid
    assert isinstance(req.prefetch.error, CopyFailed) and tid in deps.transfers
    cache.close()
    assert deps.transfers == {}


@pytest.mark.parametrize("overlap", [True, False])
def test_a_failed_gather_is_aborted_at_close(tmp_path, overlap):
    """A CP gather (one rank, a restore that never lands) fails: with overlap its worker's
    error, without it the caller's; either way its close aborts the transfer, which never
    fired (before, overlap off retired it: the record stayed, copying, for good)."""
    import types

    import torch

    from draft_support import draft_config, target_config
    from hicache.dist import gather as G
    from hicache.dist.errors import LocalTimeout
    from hicache.dist.gather_deps_check import _page_shape, _pool
    from hicache.protocol.cp_layout import CPLayout
    from hicache.runtime.draft import DependentSet
    from hicache.runtime.events import EventBus
    dcfg = draft_config(target_config(), "sidecar")
    tcfg = dcfg.target
    layout = CPLayout(cp_size=1, page_size=tcfg.page_size)
    comm = types.SimpleNamespace(topo=types.SimpleNamespace(cp_rank=0), rank=0)

    def pool(name, cfg):
        return _pool(name, cfg.layers, 4, _page_shape(cfg), getattr(torch, cfg.dtype), layout, 0)
    target = pool("target", tcfg)
    pools = {s.role: pool(s.role.value, dcfg.pool_config(s)) for s in dcfg.pools}
    deps = DependentSet(dcfg, EventBus())
    mon = Monitor(DraftStateMap(deps), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    rec = Recorder()
    deps.bus.subscribe(mon)
    deps.bus.subscribe(rec)
    g = G.PrefixGather(comm, layout, target, [0, 1, 2], lambda layer: False, overlap=overlap, timeout_s=0.5,
                       stats=G.GatherStats(), deps=deps, dep_pools=pools)
    g.start()
    with pytest.raises(LocalTimeout, match="restore of layer 0 did not finish"):
        g.acquire(0)
    try:
        g.close()
    except LocalTimeout:    # with overlap, close raises the worker's error again
        assert overlap
    assert deps.transfers == {} and [str(e.action) for e in rec.events] == ["TransferLaunch", "TransferAbort"]
    assert mon.checked == mon.steps == 2
