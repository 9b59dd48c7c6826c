"""Variants forward on CUDA (runs on the simulator): the first, plain kernel of the family.

The idea: the learner's mask_mod and score_mod become CUDA device functions, closed over
by a kernel built for them (`_kernel_for`, cached by `variants.mods.fingerprint`), and
the block mask from `variants.block_mask` tells each thread block which key blocks to
visit: full ones without calling mask_mod, partial ones with it, empty ones never.

Layout: one thread block per (query block i, head b*Hq + h), one thread per query row
(Br = block_mask.block_size[0] threads); each thread walks the listed key blocks one
key at a time with the online softmax (m, l, acc (d,) in local memory, float32), then
folds the sink in and writes its row. GQA: head h reads K/V head h // G, no copy.
Bytes moved: each thread reads its q row once and K_j, V_j rows of every visited block
(no shared-memory reuse across the block's threads yet), writes o and lse once. What
limits it: every K/V element is read by all Br threads of a block from global memory
(L1/L2 catch most), and the per-pair indirect work (mask, score_mod) is scalar code.
The shared-memory and tensor-core versions build on this one; this one sets the
contract: same arguments and results as `flashcourse.variants.tiled.forward`.

On a GPU the device functions come from `numba.cuda.jit(device=True)` of the plain
Python functions (helpers they call compiled with them); tests/test_variants_cuda_sim.py
passed on an H100 too (2026-12-06; not recorded in benchmarks/results/, and before
`variants.library.softcap` kept its cap in float32). Arrays a mask_mod closes over
(document ids, say) are compiled in as constants, which Numba places in the GPU's constant
memory: 64 KiB for a kernel, so int64 ids of two 4096-token sequences already fill it.

Run: `o, lse = cuda.cuda_core.variants.forward(q, k, v, block_mask=bm, score_mod=..., sinks=...)`;
tests: `pytest tests/test_variants_cuda_sim.py`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from ...variants.mods import always_visible, fingerprint, unchanged_score
from ..common._device import mod_device
from ...variants.inputs import check_result
from ...variants.tiled import prepare
from ..common._launch import serialised, simulator_note

#: the largest head dim d (elements of each thread's local accumulator)
D_MAX = 256
#: the most threads (query rows Br) a block may have
MAX_THREADS = 1024

_KERNELS: dict = {}




def _kernel_for(mask_mod, score_mod):
    """The forward kernel with mask_mod and score_mod inlined, built once per contents."""
    key = (fingerprint(mask_mod), fingerprint(score_mod))
    if key in _KERNELS:
        return _KERNELS[key][1]
    mask_dev, score_dev = mod_device(mask_mod), mod_device(score_mod)

    @cuda.jit
    def kernel(q, k, v, o, lse, n_heads, group, br, bc, kv_num, kv_idx, full_num,
               full_idx, sinks, has_sinks, scale):
        i_blk = cuda.blockIdx.x
        head = cuda.blockIdx.y
        tq, d = q.shape[1], q.shape[2]
        tk = k.shape[1]
        qi = i_blk * br + cuda.threadIdx.x
        if qi >= tq:
            return
        b = head // n_heads
        h = head % n_heads
        kvh = b * (n_heads // group) + h // group
        bi = b if kv_num.shape[0] > 1 else 0
        hi = h if kv_num.shape[1] > 1 else 0
        acc = cuda.local.array(D_MAX, np.float32)              # (d,) unnormalised o row
        for x in range(d):
            acc[x] = 0.0
        m = -math.inf
        l = 0.0
        n_full = full_num[bi, hi, i_blk]
        for t in range(n_full + kv_num[bi, hi, i_blk]):
            partial = t >= n_full
            j = kv_idx[bi, hi, i_blk, t - n_full] if partial else full_idx[bi, hi, i_blk, t]
            for kj in range(j * bc, min(j * bc + bc, tk)):
                if partial and not mask_dev(b, h, qi, kj):     # full blocks: no call
                    continue
                s = 0.0
                for x in range(d):
                    s += q[head, qi, x] * k[kvh, kj, x]
                s = score_dev(s * scale, b, h, qi, kj)
                if s == -math.inf:
                    continue
                m_new = max(m, s)
                a = math.exp(m - m_new) if m > -math.inf else 0.0
                p = math.exp(s - m_new)
                l = l * a + p
                for x in range(d):
                    acc[x] = acc[x] * a + p * v[kvh, kj, x]
                m = m_new
        if has_sinks:                                          # one more logit, no value
            m_new = max(m, sinks[h])
            a = math.exp(m - m_new) if m > -math.inf else 0.0
            l = l * a + math.exp(sinks[h] - m_new)
            for x in range(d):
                acc[x] = acc[x] * a
            m = m_new
        for x in range(d):
            o[head, qi, x] = acc[x] / l if l > 0 else 0.0
        lse[head, qi] = m + math.log(l) if l > 0 else -math.inf

    if len(_KERNELS) >= 32:
        _KERNELS.pop(next(iter(_KERNELS)))
    _KERNELS[key] = ((mask_mod, score_mod), kernel)      # the functions kept alive
    return kernel


@serialised
def forward(q, k, v, *, block_mask=None, score_mod=None, sinks=None, scale=None,
            block_q: int | None = None, block_k: int | None = None):
    """(o, lse) as `flashcourse.variants.tiled.forward`, computed in float32 on the GPU
    (or the simulator): o (B, Hq, Tq, d) in q's dtype, lse (B, Hq, Tq) float32. numpy
    inputs; head dim d <= 256, block_q (the block mask's Br) <= 1024."""
    simulator_note()
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    br, bc = bm.block_size
    if p.d > D_MAX:
        raise ValueError(f"head dim d must be at most {D_MAX} for the CUDA variants forward, "
                         f"got {p.d}")
    if br > MAX_THREADS:
        raise ValueError(f"block_q (the block mask's Br = threads per block) must be at "
                         f"most {MAX_THREADS}, got {br}")
    kernel = _kernel_for(bm.mask_mod if bm.mask_mod is not None else always_visible,
                         score_mod if score_mod is not None else unchanged_score)
    f32 = np.float32
    qf = np.ascontiguousarray(p.q.reshape(-1, p.tq, p.d), dtype=f32)   # (B Hq, Tq, d)
    kf = np.ascontiguousarray(p.k.reshape(-1, p.tk, p.d), dtype=f32)   # (B Hkv, Tk, d)
    vf = np.ascontiguousarray(p.v.reshape(-1, p.tk, p.d), dtype=f32)
    o = cuda.device_array(qf.shape, f32)
    lse = cuda.device_array(qf.shape[:2], f32)
    sinks_a = np.zeros(p.heads, f32) if p.sinks is None else p.sinks.astype(f32)
    grid = (-(-p.tq // br), qf.shape[0])
    kernel[grid, br](cuda.to_device(qf), cuda.to_device(kf), cuda.to_device(vf), o, lse,
                     p.heads, p.group, br, bc, *(cuda.to_device(a) for a in (
                         bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                         bm.full_kv_indices, sinks_a)),
                     p.sinks is not None, f32(p.scale))
    o_h = o.copy_to_host().reshape(p.q.shape).astype(p.q.dtype, copy=False)
    lse_h = lse.copy_to_host().reshape(p.q.shape[:3])
    check_result(o_h, lse_h)
    return o_h, lse_h
