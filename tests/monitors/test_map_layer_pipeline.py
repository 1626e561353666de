"""The per-rank LayerPipeline map (`RankLayerPipelineMap`, what the distributed gather
attaches on each CP rank) and the guard's knowledge of the other ranks' restores.

A seeded in-process schedule plays one rank of the gather as `hicache.dist.gather` does:
its own restores, the peers' restores as the collective reports them (a peer may be ahead of
what this rank knows), gathers, attention; each step's guard transition, then its event. The
real gather on gloo processes is tests/dist/test_gather_pipeline.py."""
from __future__ import annotations

import itertools
import random

import pytest

from hicache.monitors.maps.layer_pipeline import RankLayerPipelineMap
from hicache.monitors.runtime import Monitor, ProtocolViolation, VerifyConfig
from hicache.protocol.layer_pipeline import IllegalTransition, LayerPipelineGuard, late_ranks
from hicache.tla.values import Fcn


class RankSchedule:
    """One CP rank: `me` of `cp`, `n` layers. Peers restore at their own pace (`truth`); this
    rank learns a peer's restores when a gather's collective returns (all it has restored by
    then). `blind`: the layer whose gather does not wait for this rank's own restore (seeded
    bug 11); its restore is held back until that gather started, so every schedule has the
    fault there."""

    def __init__(self, guard, listener, rng, me: int, cp: int, blind: int | None = None):
        self.g, self.listener, self.rng, self.me, self.blind = guard, listener, rng, me, blind
        self.n = guard.num_layers
        self.truth = {r: 0 for r in range(cp) if r != me}
        self.fault_step: int | None = None
        self.events = 0

    def _emit(self, action: str, **fields) -> None:
        self.events += 1
        self.listener(action, {"rank": self.me, "cp_rank": self.me, **fields})

    def enabled(self) -> list:
        g, out = self.g, []
        own = len(g.restored)
        if own < self.n and not (own == self.blind and own not in g.gathering | g.gathered):
            out.append(("restore", own))
        out += [("peer", r) for r, k in self.truth.items() if k < self.n]
        started = g.gathering | g.gathered
        l = len(started)
        if l < self.n and not g.gathering and (own > l or l == self.blind) and (l < 2 or l - 2 in g.attended) and \
                all(k > l for k in self.truth.values()):
            out.append(("gather", l))
        if g.gathering:
            out.append(("finish", next(iter(g.gathering))))
        a = len(g.attending | g.attended)
        if not g.attending and a in g.gathered:
            out.append(("attend", a))
        if g.attending:
            out.append(("release", next(iter(g.attending))))
        return out

    def step(self) -> bool:
        en = self.enabled()
        if not en:
            return False
        what, x = self.rng.choice(en)
        g = self.g
        if what == "restore":
            g.rank_restore_layer(x)
            self._emit("RankRestoreLayer", layer=x)
        elif what == "peer":
            self.truth[x] += 1
        elif what == "gather":
            # the collective returned: every peer's restores up to now become known here
            for r, k in self.truth.items():
                for learned in range(g.peers[r], k):
                    g.peer_restore_layer(r, learned)
                    self.events += 1
                    self.listener("RankRestoreLayer", {"rank": self.me, "cp_rank": r, "layer": learned})
            if self.fault_step is None and x not in g.restored:
                self.fault_step = self.events + 1
            g.gather_start(x)
            self._emit("GatherStart", layer=x)
        elif what == "finish":
            g.gather_finish(x)
            self._emit("GatherFinish", layer=x)
        elif what == "attend":
            g.attention_start(x)
            self._emit("AttentionStart", layer=x)
        else:
            g.attention_finish(x)
            self._emit("AttentionFinish", layer=x)
        return True


def _run(seed: int, tmp_path, *, blind: int | None = None, me: int = 1, cp: int = 3, layers: int = 5):
    from hicache.dist.gather import _RestoreBlindGuard
    cls = LayerPipelineGuard if blind is None else _RestoreBlindGuard
    guard = cls(layers, peers={r: 0 for r in range(cp) if r != me})
    mon = Monitor(RankLayerPipelineMap(guard, me, cp), VerifyConfig(mode="strict", violation_dir=str(tmp_path)))
    sched = RankSchedule(guard, mon, random.Random(seed), me, cp, blind)
    try:
        while sched.step():
            pass
    except ProtocolViolation as exc:
        return sched, mon, exc
    return sched, mon, None


@pytest.mark.parametrize("seed", range(40))
def test_legal_rank_schedules_pass_every_action_check(seed, tmp_path):
    sched, mon, exc = _run(seed, tmp_path, me=seed % 3)
    assert exc is None
    g = sched.g
    assert g.attended == set(range(g.num_layers)) and all(k == g.num_layers for k in g.peers.values())
    assert mon.checked == mon.steps == sched.events == 3 * g.num_layers + 4 * g.num_layers


@pytest.mark.parametrize("seed", range(20))
def test_gather_before_this_ranks_restore_is_caught_at_that_gather(seed, tmp_path):
    layers = 5
    blind = seed % layers
    sched, mon, exc = _run(seed, tmp_path, blind=blind, me=seed % 3, layers=layers)
    assert sched.fault_step is not None       # every schedule reaches the fault
    assert exc is not None and (exc.kind, exc.property, exc.action) == ("action", "GatherStart", "GatherStart")
    assert exc.location.startswith("spec/LayerPipeline.tla:90:") and exc.step == sched.fault_step
    g = sched.g
    assert blind in g.gathering and blind not in g.restored and len(g.gathered) == blind


@pytest.mark.parametrize("cp", [1, 2, 3])
def test_late_ranks_is_the_guards_verdict_on_every_header(cp):
    """`late_ranks` on all headers: the ranks whose count says they had not restored the layer;
    on a rank that restored it, the others are exactly the ones its guard (having learned
    every count) refuses GatherStart for, so every rank reaches one verdict."""
    layers = 3
    for counts in itertools.product(range(layers + 1), repeat=cp):
        for layer in range(layers):
            late = late_ranks(counts, layer)
            assert late == sorted(r for r in range(cp) if counts[r] <= layer)
            for me in range(cp):
                if counts[me] <= layer:
                    continue          # this rank itself has not restored `layer`: no gather here
                g = LayerPipelineGuard(layers, peers={r: 0 for r in range(cp) if r != me})
                for l in range(layer + 1):
                    g.rank_restore_layer(l)
                for r, k in enumerate(counts):
                    for learned in range(k if r != me else 0):
                        g.peer_restore_layer(r, learned)
                g.gathered.update(range(layer))
                g.attended.update(range(layer))
                if late:
                    with pytest.raises(IllegalTransition, match=rf"before rank {late[0]} restored layer {layer}"):
                        g.gather_start(layer)
                else:
                    g.gather_start(layer)
    assert late_ranks([], 0) == []
    with pytest.raises(ValueError, match="layer"):
        late_ranks([1], -1)


def test_state_maps_own_restores_and_what_this_rank_learned():
    g = LayerPipelineGuard(3, peers={0: 0, 2: 0})
    m = RankLayerPipelineMap(g, 1, 3)
    g.rank_restore_layer(0)
    g.rank_restore_layer(1)
    g.peer_restore_layer(2, 0)
    s = m.state()
    assert s["restored"] == Fcn({0: 0, 1: 2, 2: 1})
    assert m.constants()["NRanks"] == 3 and m.constants()["NLayers"] == 3
    assert m.bind("RankRestoreLayer", {"rank": 5, "cp_rank": 2, "layer": 0}) == [("RankRestoreLayer", (2, 0))]
    assert m.bind("GatherStart", {"rank": 5, "cp_rank": 1, "layer": 0, "slot": 0}) == [("GatherStart", (0,))]
    assert m.bind("PageEvict", {}) is None
    with pytest.raises(ValueError, match="cp_rank 3"):
        RankLayerPipelineMap(g, 3, 3)


def test_guard_waits_for_every_peers_restore():
    g = LayerPipelineGuard(3, peers={1: 0})
    g.rank_restore_layer(0)
    with pytest.raises(IllegalTransition, match=r"GatherStart\(0\) before rank 1 restored layer 0"):
        g.gather_start(0)
    g.peer_restore_layer(1, 0)
    g.gather_start(0)
    with pytest.raises(IllegalTransition, match="known to have restored 1 layers"):
        g.peer_restore_layer(1, 2)
    with pytest.raises(ValueError, match="not a peer"):
        g.peer_restore_layer(0, 1)
    with pytest.raises(ValueError, match="outside"):
        g.peer_restore_layer(1, 3)
