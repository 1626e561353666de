"""Suite-wide setup. Triton reads TRITON_INTERPRET once, when it is first imported, and any
test folder may import `hicache.kernels` first: without a GPU, select the interpreter here,
before anything imports Triton, so kernel tests see the same mode whatever runs before them."""
import dataclasses
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Hypothesis on shared 2-core machines: no per-example deadline (timing is not what these
# tests check), and in CI a derandomized, reproducible example sequence.
from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile("hicache", deadline=None, derandomize=bool(os.environ.get("CI")),
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("hicache")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _verified_mode_as_configured(request):
    """Each test starts and ends in the verified mode the run asked for (--hicache-verify /
    HICACHE_VERIFY through the plugin, else off): `import hicache.verified` turns verified
    mode on for the whole process, so a test importing it would otherwise leave monitors on
    every cache of the tests after it."""
    yield
    import sys
    verified = sys.modules.get("hicache.verified")
    if verified is None:
        return
    want = getattr(request.config, "_hicache_verify_config", None)
    if want is None:
        verified.disable()
    elif verified.current() != want or not verified.enabled():
        # the whole configuration, not just the mode: a test's enable("strict",
        # violation_dir=its tmp_path) left every later test's traces in that directory
        verified.enable(**dataclasses.asdict(want))
