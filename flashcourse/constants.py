"""Constants of the compiled kernels, CPU and CUDA (one home: kernels and labs import them).

Inside a Numba kernel a Python float literal is float64 and promotes the arithmetic
around it to float64; these are float32 so that kernels stay in float32.
"""

from __future__ import annotations

import math

import numpy as np

F0 = np.float32(0.0)
F1 = np.float32(1.0)
NEG_INF = np.float32(-np.inf)
POS_INF = np.float32(np.inf)
#: log2(e) and ln(2) as Python floats (for host-side scale factors) ...
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
#: ... and as float32, for use inside kernels.
LN2_F = np.float32(LN2)
LOG2E_F = np.float32(LOG2E)
#: All 32 lanes of a warp (the mask of cuda.shfl_xor_sync).
FULL_MASK = 0xFFFFFFFF
#: The lazy rescale's threshold, log2 units (FlashAttention-4's `rescale_threshold` for 16-bit
#: inputs): a row keeps its running max m until a score passes m + 8, so P <= 2^8 = 256
#: (exact in fp16 and bf16) and O is rescaled only when a row's max moved that far. Used by
#: the Hopper kernel and the mma.sync fp16/bf16 forward (version 2).
RESCALE_THRESHOLD = 8.0
