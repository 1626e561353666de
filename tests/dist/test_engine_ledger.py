"""The strict byte ledger (a clone of every page's KV ever written) is kept only under
verify=strict, the one level whose check reads it; it used to grow at every level."""
import pytest

from hicache.dist.comm import Comm
from hicache.dist.config import RunConfig
from hicache.dist.engine import Engine
from hicache.dist.launch import free_port
from hicache.dist.topology import Topology
from hicache.dist.workload import make_workload
from hicache.storage.file_store import FileStorage


@pytest.fixture
def comm():
    """One rank on loopback (world of 1: nothing to wait for)."""
    c = Comm(0, 1, free_port(), 10.0)
    try:
        c.build_groups(Topology(cp=1, pp=1, rank=0))
        yield c
    finally:
        c.close()


def test_the_byte_ledger_is_kept_only_under_strict_verification(comm, tmp_path):
    for verify in ("off", "sample", "strict"):
        cfg = RunConfig(cp=1, pp=1, requests=20, device_pages_per_rank=8, host_pages_per_rank=16,
                        storage_fail_p=0.0, transfer_delay_s=0.0, storage_delay_s=0.0, verify=verify,
                        storage_dir=str(tmp_path / verify))
        eng = Engine(cfg, comm, FileStorage(cfg.storage_dir))
        eng.serve(make_workload(cfg.requests, cfg.page_size, cfg.model.vocab, cfg.seed, cfg.model.max_len))
        report = eng.report()
        assert report["violations"] == [] and report["requests"] == cfg.requests
        if verify == "strict":
            # every created page's layers, and the check read them: cached prefixes were gathered
            assert len(eng.ledger) > 0 and report["tally"]["device_tokens"] > 0
        else:
            assert eng.ledger == {}, verify
