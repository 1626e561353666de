"""Run a whole distributed workload from one parent process (CLI and tests)."""
from __future__ import annotations

import dataclasses
import tempfile

from .config import RunConfig
from .launch import launch
from .worker import Faults, run_rank


def run_distributed(cfg: RunConfig | None = None, *, faults: Faults = Faults(), launch_timeout_s: float = 120.0,
                    grace_s: float = 10.0, gather_bench_iters: int = 0, monitors=None, **overrides) -> list[dict]:
    """Launch cfg.world ranks, serve the workload, return each rank's report (rank order).

    A fresh storage directory is created when cfg has none. `monitors`: the VerifyConfig of
    the spec monitors on every rank (default: the verified mode in force here). Raises
    LaunchError on failure; the ranks are stopped once none made progress (finished a
    collective) for `launch_timeout_s`.
    """
    with tempfile.TemporaryDirectory(prefix="hicache-run-") as tmp:
        if cfg is None:
            cfg = RunConfig(storage_dir=tmp, **overrides)
        elif overrides or not cfg.storage_dir:
            cfg = dataclasses.replace(cfg, storage_dir=cfg.storage_dir or tmp, **overrides)
        from hicache.monitors.maps.dist import verify_config
        # the parent's verified mode, not the ranks' environment (a fork server keeps its own)
        payload = (cfg, faults, gather_bench_iters, monitors if monitors is not None else verify_config())
        return launch(run_rank, cfg.world, payload, timeout_s=launch_timeout_s, grace_s=grace_s)
