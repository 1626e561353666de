"""Kernel tests run Triton kernels on CPU tensors through Triton's interpreter.

TRITON_INTERPRET is set before any test module imports the kernels (scripts/test.sh exports it
too); the launchers also pick the interpreted form per launch, so import order cannot matter.
Tests of Triton kernels skip, with the import error as reason, where Triton is missing; the
torch-fallback tests run regardless. Copy tests also run the native CPU copy (``copy_impl``);
they skip, with the reason, where it cannot be built (no C compiler) or ``HICACHE_NATIVE=0``.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture(params=["triton", "torch"])
def impl(request) -> str:
    """Run a test once per backend; the Triton run skips (with the reason) without Triton."""
    if request.param == "triton":
        pytest.importorskip("triton", reason="triton is not installed; only the torch fallback is tested")
    return request.param


@pytest.fixture(params=["triton", "torch", "native"])
def copy_impl(request) -> str:
    """Run a page-copy test once per implementation (Triton, torch, the native C loop)."""
    if request.param == "triton":
        pytest.importorskip("triton", reason="triton is not installed; only the torch fallback is tested")
    if request.param == "native":
        from hicache.kernels import native
        if native.library() is None:
            pytest.skip(f"native page copy unavailable: {native.unavailable_reason()}")
    return request.param
