"""Refinement map: the per-rank layer pipeline guards -> spec/LayerPipeline.

The runtime side is `hicache.protocol.layer_pipeline.LayerPipelineGuard`, one per
context-parallel rank (the gather adapter calls it in the order it performs the steps).
Every adapter step is one spec step, so the monitor checks the action itself, not only the
invariants:

  restored[r]   the longest prefix 0..k-1 of layers rank r restored (restores run in order)
  slotLayer[s]  the latest layer rank 0 gathers or gathered into slot s = l % 2, or None
  slotFull[s]   that layer's gather finished;  gatherBusy[s]: it is in progress
  gatherNext    1 + the last layer whose gather started (0 before any)
  attnNext      1 + the last layer attention finished on (0 before any)
  reading       the layer attention reads now, or None

Event fields: `rank` (RankRestoreLayer) and `layer`.
"""
from __future__ import annotations

from hicache.monitors.generated import layer_pipeline as spec
from hicache.tla.values import Fcn

NONE = -1
_PARAMS = {"RankRestoreLayer": ("rank", "layer"), "GatherStart": ("layer",), "GatherFinish": ("layer",),
           "AttentionStart": ("layer",), "AttentionFinish": ("layer",)}


class LayerPipelineMap:
    spec = spec

    def __init__(self, guards):
        self.guards = guards          # one LayerPipelineGuard per rank

    def bind(self, action: str, fields: dict):
        names = _PARAMS.get(action)
        if names is None:
            return None
        return [(action, tuple(fields[n] for n in names))]

    def constants(self) -> dict:
        return {"NRanks": len(self.guards), "NLayers": self.guards[0].num_layers,
                "BugSkipRestoreWait": False, "BugSkipSlotWait": False}

    def state(self) -> dict:
        g0 = self.guards[0]
        restored = {}
        for r, g in enumerate(self.guards):
            k = 0
            while k in g.restored:
                k += 1
            restored[r] = k
        started = g0.gathering | g0.gathered
        slot_layer, full, busy = {}, {}, {}
        for s in (0, 1):
            mine = [x for x in started if x % 2 == s]
            lay = max(mine) if mine else NONE
            slot_layer[s] = lay
            full[s] = lay in g0.gathered
            busy[s] = lay in g0.gathering
        reading = next(iter(g0.attending), NONE)
        return {"restored": Fcn(restored), "slotLayer": Fcn(slot_layer), "slotFull": Fcn(full),
                "gatherBusy": Fcn(busy), "gatherNext": (max(started) + 1) if started else 0,
                "attnNext": (max(g0.attended) + 1) if g0.attended else 0, "reading": reading}
