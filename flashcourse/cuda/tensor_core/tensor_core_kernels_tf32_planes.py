"""tensor_core_kernels_tf32_planes: version 3 of the 3xTF32 (and TF32) tensor-core forward.

Same maths, work split, accuracy and contract as versions 1 and 2 (`tensor_core_kernels.
make_tf32_kernel`, `tensor_core_kernels_tf32_async`): the same products in the same order,
so the output is the same bit for bit. What changes is who splits K_j and V_j:

  v2 (pipeline="async")   every warp splits every K and V fragment it reads into tf32
                          big and small parts (4 ALU instructions per value): with W
                          warps the block splits each value of K_j, V_j W times, and ncu
                          found version 2 issue-bound (results/h200_tf32_ncu_d128_log.txt).
  v3 (pipeline="planes")  K_j, V_j go global -> shared by `cp.async` as raw fp32 into a
                          staging buffer; once they land, each thread splits the very
                          16-byte chunks it copied into a big plane and a small plane
                          (version 1's layout), issues the copy of block j + 1 into the
                          same chunks, and after a barrier the warps read both planes:
                          each value is split once per block instead of once per warp,
                          and a B fragment costs a second load instead of four ALU
                          instructions. Q stays raw in shared memory, split where it is
                          read (each warp reads only its own 16 rows).

Per key block a warp issues (d = 128, Bc = 32; counted from the loops below): S's K
fragments 2 ldmatrix per 6 mma instead of 1 ldmatrix and 16 ALU; P V's V fragments 4 loads
per 3 mma instead of 2 loads and 8 ALU; plus its share of the block's split (2 Bc D / (32 W)
values per lane, each 1 load, 4 ALU and 2 stores). The price: a second barrier per key block
(the planes are single-buffered: the split waits until every warp is done with block j - 1)
and shared memory for the planes (4 Bc (D + 4) words).

Shared memory (32-bit words, rows padded to D + 4 words, conflict-free fragment reads as in
version 2): Q (Br rows, raw), K_j and V_j raw (staging, Bc rows each), then the planes K big,
K small, V big, V small (Bc rows each). The thread that copies a chunk is the thread that
splits it, so the staging buffer needs no barrier of its own (a thread's cp.async writes
land, after its wait, in program order with its own reads).
"""

from __future__ import annotations

from numba import cuda
from numba import uint64 as U

from ..common._device import inlined
from .tensor_core_kernels_tf32_async import tf32_forward_kernel, tf32_steps


def make_tf32_planes_kernel(cfg, passes: int):
    st = tf32_steps(cfg, passes, raw=False)    # K_j, V_j from their planes
    ops, so = st["ops"], st["so"]
    AS_F32 = ops["as_f32"]
    CP16, COMMIT, WAIT = so["cp16"], so["commit"], so["wait_all"]
    BC, D, NT = cfg.block_k, cfg.head_dim, cfg.threads
    RS = cfg.k_stride              # row stride of Q, K and V in shared memory (words)
    Q_OFF, K_OFF, V_OFF, KB_OFF, KS_OFF, VB_OFF, VS_OFF, _ = cfg.tf32_planes_offsets()
    CH = D // 4                    # 16-byte chunks per row
    KV_LOADS = -(-(BC * CH) // NT)
    THREE = passes == 3
    # the planes' split (`mma.split_tf32`): big rounded on the bits (2 instructions where
    # cvt.rna.tf32 takes 3), small truncated (1); one-pass TF32 keeps cvt.rna.tf32
    BIG = ops["tf32_round"] if THREE else ops["to_tf32"]
    SMALL = ops["tf32_trunc"]

    @inlined
    def stage(sm, k, v, jb, n_kb, k0, kbase, tk, tid):
        WAIT()                     # this thread's chunks of block jb (and Q) landed
        cuda.syncthreads()         # every warp is done with block jb - 1's planes
        # split this thread's own chunks of the staging buffer into the planes, then
        # reuse those chunks for block jb + 1 (the same thread: no barrier needed)
        more = jb + 1 < n_kb
        k1 = k0 + BC
        for it in range(KV_LOADS):
            e = tid + NT * it
            if e < BC * CH:
                r = e // CH
                c = (e - r * CH) * 4
                w = r * RS + c
                for i in range(4):
                    x = AS_F32(sm[U(K_OFF + w + i)])
                    big = BIG(x)
                    sm[U(KB_OFF + w + i)] = big
                    if THREE:
                        sm[U(KS_OFF + w + i)] = SMALL(x - AS_F32(big))
                    x = AS_F32(sm[U(V_OFF + w + i)])
                    big = BIG(x)
                    sm[U(VB_OFF + w + i)] = big
                    if THREE:
                        sm[U(VS_OFF + w + i)] = SMALL(x - AS_F32(big))
                if more:
                    key = k1 + r
                    ok = key < tk
                    gi = U(kbase + (key if ok else 0)) * U(D) + U(c)
                    CP16(sm, U(K_OFF + w), k, gi, 16 if ok else 0)
                    CP16(sm, U(V_OFF + w), v, gi, 16 if ok else 0)
        COMMIT()
        cuda.syncthreads()         # the planes of block jb are written
        return KB_OFF, KS_OFF, VB_OFF, VS_OFF

    return tf32_forward_kernel(cfg, st, (Q_OFF, K_OFF, V_OFF), stage, "planes")
