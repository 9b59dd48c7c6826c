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
