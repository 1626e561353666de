"""Refinement maps: layer pipeline guards -> spec/LayerPipeline.

The runtime side is `hicache.protocol.layer_pipeline.LayerPipelineGuard`, which its adapter
calls in the order it performs the steps, and emits each step's event after the guard
transition it names (so the state mapped after an event includes it). Every adapter step
is one spec step, so the monitor checks the action itself, not only the invariants:

  restored[r]   the longest prefix 0..k-1 of layers rank r restored (restores run in order)
  slotLayer[s]  the latest layer gathered or being gathered into slot s = l % 2, or None
  slotFull[s]   that layer's gather finished;  gatherBusy[s]: it is in progress
  gatherNext    1 + the last layer whose gather started (0 before any)
  attnNext      1 + the last layer attention finished on (0 before any)
  reading       the layer attention reads now, or None

Two maps, which differ in where `restored[r]` of the other ranks comes from:

`LayerPipelineMap(guards)`: one guard per rank, all in one process (the bug zoo's adapter
schedule moves every rank's gather and attention in lockstep, so rank 0's guard stands for
the one gather stream). Event fields: `rank` (RankRestoreLayer) and `layer`.

`RankLayerPipelineMap(guard, cp_rank, cp_size)`: one CP rank of the distributed gather
(`hicache.dist.gather`), a process holding only its own guard. `restored[me]` is its own
restores; `restored[r]` of another rank is what this rank learned of r (`guard.peers`: each
rank's part of the gather's collective says how many layers it had restored when it sent),
so the spec's GatherStart guard (every rank restored l) is checked against what this rank
knows when it writes its slot. Event fields: `cp_rank` (RankRestoreLayer: the CP rank that
restored the layer, this one or a peer) and `layer`.
"""
from __future__ import annotations

from hicache.monitors.generated import layer_pipeline as spec
from hicache.tla.values import Fcn

NONE = -1
_STEPS = ("GatherStart", "GatherFinish", "AttentionStart", "AttentionFinish")


def _prefix(layers) -> int:
    k = 0
    while k in layers:
        k += 1
    return k


def _state(restored: dict[int, int], g) -> dict:
    """The spec state of the restores `restored` and guard `g`'s gathers and attention."""
    started = g.gathering | g.gathered
    slot_layer, full, busy = {}, {}, {}
    for s in (0, 1):
        mine = [x for x in started if x % 2 == s]
        lay = max(mine) if mine else NONE
        slot_layer[s] = lay
        full[s] = lay in g.gathered
        busy[s] = lay in g.gathering
    reading = next(iter(g.attending), NONE)
    return {"restored": Fcn(restored), "slotLayer": Fcn(slot_layer), "slotFull": Fcn(full),
            "gatherBusy": Fcn(busy), "gatherNext": (max(started) + 1) if started else 0,
            "attnNext": (max(g.attended) + 1) if g.attended else 0, "reading": reading}


def _constants(ranks: int, layers: int) -> dict:
    return {"NRanks": ranks, "NLayers": layers, "BugSkipRestoreWait": False, "BugSkipSlotWait": False}


class LayerPipelineMap:
    """Every rank's guard in one process (see the module docstring)."""
    spec = spec
    _PARAMS = {"RankRestoreLayer": ("rank", "layer"), **{a: ("layer",) for a in _STEPS}}

    def __init__(self, guards):
        self.guards = guards          # one LayerPipelineGuard per rank

    def bind(self, action: str, fields: dict):
        names = self._PARAMS.get(action)
        if names is None:
            return None
        return [(action, tuple(fields[n] for n in names))]

    def constants(self) -> dict:
        return _constants(len(self.guards), self.guards[0].num_layers)

    def state(self) -> dict:
        return _state({r: _prefix(g.restored) for r, g in enumerate(self.guards)}, self.guards[0])


class RankLayerPipelineMap(LayerPipelineMap):
    """One CP rank's guard and what it learned of the other ranks' restores."""
    _PARAMS = {"RankRestoreLayer": ("cp_rank", "layer"), **{a: ("layer",) for a in _STEPS}}

    def __init__(self, guard, cp_rank: int, cp_size: int):
        if not 0 <= cp_rank < cp_size:
            raise ValueError(f"cp_rank {cp_rank} outside [0, {cp_size})")
        self.guard, self.cp_rank, self.cp_size = guard, cp_rank, cp_size

    def constants(self) -> dict:
        return _constants(self.cp_size, self.guard.num_layers)

    def state(self) -> dict:
        g = self.guard
        restored = {r: _prefix(g.restored) if r == self.cp_rank else g.peers.get(r, 0) for r in range(self.cp_size)}
        return _state(restored, g)
