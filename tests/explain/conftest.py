"""Violation traces for the explain tests, produced here by the checker and the monitors."""
from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: bug twin cfg -> spec module (the twins' invariants are read from the cfgs by the checker)
TWINS = {
    "HostTier_bug": "HostTier",
    "LayerPipeline_bug": "LayerPipeline",
    "PPSync_bug": "PPSync",
    "DraftState_bug": "DraftState",
    "CPSharding_bug": "CPSharding",
}


@pytest.fixture(scope="session")
def twin_traces(tmp_path_factory) -> dict[str, Path]:
    """twin name -> the ITF trace `hicache check` writes for its counterexample."""
    from hicache.tla.run import check_one
    d = tmp_path_factory.mktemp("twins")
    out = {}
    for twin, spec in TWINS.items():
        path = d / f"{twin}.itf.json"
        res, payload, _ = check_one(str(ROOT / "spec" / f"{spec}.tla"), str(ROOT / "spec" / f"{twin}.cfg"),
                                    trace_out=str(path))
        assert payload["result"] == "invariant", (twin, payload)
        out[twin] = path
    return out


@pytest.fixture(scope="session")
def pipeline_trace(tmp_path_factory) -> Path:
    """A LayerPipeline monitor trace: the zoo's gather that does not wait for every rank."""
    from hicache.monitors.zoo import pipeline_run
    d = tmp_path_factory.mktemp("pipeline")
    for seed in range(30):
        ad, exc = pipeline_run(seed, True, str(d))
        if exc is not None:
            assert exc.trace_path
            return Path(exc.trace_path)
    pytest.fail("the faulty pipeline schedule never raised in 30 seeds")
