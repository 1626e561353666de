"""A rank entry that runs the per-layer prefix gather with its LayerPipeline monitor and
reports what each rank saw (tests/dist/test_gather_pipeline.py).

Each case is one `PrefixGather` (one forward pass's consumer loop: acquire/release per
layer). This rank's pool starts empty; its restore of layer l (the `restore_wait` the gather
calls) writes the stamp of every page it owns into that layer, so a gather that sends a
layer before its rank restored it delivers zeros, which the receivers see. A case may turn
on the seeded bug `GatherFaults.gather_before_restore` and a strict (or sample) monitor.
Launch with `hicache.dist.launch.launch(pipeline_rank, cp, payload)`.
"""
from __future__ import annotations

from typing import Any

import torch

from hicache.protocol.cp_layout import CPLayout

from .comm import Comm
from .topology import Topology

#: [kv, page size, heads, head dim] of a page
PAGE_SHAPE = (2, 2, 2, 4)


def stamp(page: int, layer: int) -> float:
    """The value every element of logical page `page`, layer `layer` holds once restored."""
    return float(1 + page * 100 + layer)


def pipeline_rank(rank: int, world: int, port: int, payload: dict[str, Any]) -> list[dict]:
    """payload: {"cases": [{"layers", "local_pages", "pages", "overlap", "verify" (mode or
    None), "fault" ((cp rank, layer) or None)}], "violation_dir", "timeout_s"}. Per case:
    the violation (kind, property, action, conjunct, location, step, trace) or the guard's
    IllegalTransition, the (layer, page) of every gathered page whose bytes are wrong, the
    monitor's (checked, steps), the events [(action, cp_rank, layer)] in emission order, and
    the case's wall time in seconds (`wall_s`)."""
    from . import gather as G
    comm = Comm(rank, world, port, payload.get("timeout_s", 30.0))
    try:
        comm.build_groups(Topology(cp=world, pp=1, rank=rank))
        try:
            out = [_run_case(comm, case, payload) for case in payload["cases"]]
        finally:
            G.FAULTS.gather_before_restore = None
        comm.barrier("pipeline_done")
    finally:
        comm.close()
    return out


def _run_case(comm: Comm, case: dict[str, Any], payload: dict[str, Any]) -> dict[str, Any]:
    import time

    from hicache.monitors.runtime import ProtocolViolation, VerifyConfig
    from hicache.protocol.layer_pipeline import IllegalTransition

    from . import gather as G
    timeout_s = payload.get("timeout_s", 30.0)
    me = comm.topo.cp_rank
    fault = case.get("fault")
    G.FAULTS.gather_before_restore = tuple(fault) if fault is not None else None
    layers, local, pages = case["layers"], case["local_pages"], list(case["pages"])
    layout = CPLayout(cp_size=comm.topo.cp, page_size=PAGE_SHAPE[1])
    pool = torch.zeros(layers, local, *PAGE_SHAPE)

    def restore(layer: int) -> bool:
        for j in range(local):
            pool[layer, j] = stamp(layout.logical_page(me, j), layer)
        return True
    events: list[tuple[str, int, int]] = []
    verify = None
    if case.get("verify"):
        verify = VerifyConfig(mode=case["verify"], violation_dir=payload["violation_dir"])
    g = G.PrefixGather(comm, layout, pool, pages, restore, overlap=case["overlap"], timeout_s=timeout_s,
                       stats=G.GatherStats(), verify=verify,
                       listener=lambda e, f: events.append((str(e), f["cp_rank"], f["layer"])))
    res: dict[str, Any] = {"violation": None, "illegal": None, "wrong": []}
    t0 = time.monotonic()
    try:
        g.start()
        for layer in range(layers):
            buf = g.acquire(layer)
            res["wrong"] += [(layer, p) for i, p in enumerate(pages) if not torch.all(buf[i] == stamp(p, layer))]
            g.release(layer)
        g.close()
    except (ProtocolViolation, IllegalTransition) as exc:
        if isinstance(exc, ProtocolViolation):
            res["violation"] = {"kind": exc.kind, "property": exc.property, "action": exc.action,
                                "conjunct": exc.conjunct, "location": exc.location, "step": exc.step,
                                "trace": exc.trace_path}
        else:
            res["illegal"] = str(exc)
        try:
            g.close()
        except (ProtocolViolation, IllegalTransition):
            pass
    res["wall_s"] = time.monotonic() - t0
    res["events"] = events
    res["checked"] = (g.monitor.checked, g.monitor.steps) if g.monitor is not None else None
    return res
