"""Suite-wide setup. Triton reads TRITON_INTERPRET once, when it is first imported, and any
test folder may import `hicache.kernels` first: without a GPU, select the interpreter here,
before anything imports Triton, so kernel tests see the same mode whatever runs before them."""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
