"""The Hopper kernels on Numba's CUDA simulator, through the twins of `cuda/ptx/wgmma.py`.

What the simulator gained for them (`sim_scheduler`, `ptx/smem_ops`, `ptx/wgmma`): warp
shuffles and votes, named barriers, mbarriers, byte addresses of global and shared arrays
with `cp.async` copies from them, and wgmma products read through the descriptors.
Checked here: each piece on its own (a shuffle table, a product against numpy, a
descriptor that lies gives another answer), then the 16-bit kernel's five versions and
the FP8 kernel's two against float64 and against the FP8 numpy twin, on ragged shapes
(Tq != Tk both ways, lengths not multiples of the tiles, d padded to 16, causal rows
that see no key), extreme scores, a negative scale and a split tail.
"""

import numpy as np
import pytest

import flashcourse  # noqa: F401  (simulator before numba)
from numba import cuda, float32, uint32
from flashcourse import reference
from flashcourse.cuda import forward
from flashcourse.cuda.hopper import fp8
from flashcourse.cuda.hopper.wgmma_layouts import interleaved_kmajor
from flashcourse.cuda.ptx import mma
from flashcourse.fp8 import attention as fa
from flashcourse.gpu import using_simulator
from helpers import rel_err

pytestmark = pytest.mark.skipif(not using_simulator(), reason="the simulator's twins")


# ------------------------------------------------------------------ the simulator's pieces
def test_warp_shuffles_and_votes_exchange_within_each_warp():
    @cuda.jit
    def kernel(x, total, up, down, pick, votes):
        i = cuda.threadIdx.x
        v = x[i]
        for off in (16, 8, 4, 2, 1):
            v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
        total[i] = v
        up[i] = cuda.shfl_up_sync(0xFFFFFFFF, x[i], 1)
        down[i] = cuda.shfl_down_sync(0xFFFFFFFF, x[i], 2)
        pick[i] = cuda.shfl_sync(0xFFFFFFFF, x[i], 5)
        votes[i, 0] = cuda.ballot_sync(0xFFFFFFFF, x[i] % 3 == 0)
        votes[i, 1] = 1 if cuda.any_sync(0xFFFFFFFF, x[i] == 40) else 0
        votes[i, 2] = 1 if cuda.all_sync(0xFFFFFFFF, x[i] < 32) else 0
        cuda.syncwarp()

    n = 48                                       # the second warp has 16 lanes
    x = np.arange(n, dtype=np.int64)
    total, up, down, pick = (np.zeros(n, np.int64) for _ in range(4))
    votes = np.zeros((n, 3), np.int64)
    kernel[1, n](x, total, up, down, pick, votes)
    assert (total[:32] == x[:32].sum()).all()    # (warp 1's xor by 16 has no partner lane)
    for w, lanes in ((0, np.arange(32)), (1, np.arange(32, n))):
        assert (pick[lanes] == 32 * w + 5).all()
        ballot = sum(1 << (int(i) - 32 * w) for i in lanes if i % 3 == 0)
        assert (votes[lanes, 0] == ballot).all()
        assert (votes[lanes, 1] == int(w == 1)).all()
        assert (votes[lanes, 2] == int(w == 0)).all()
    lane = np.arange(n) % 32
    assert (up == np.where(lane >= 1, x - 1, x)).all()       # lane 0 keeps its own value
    last = np.where(np.arange(n) < 32, 31, n - 1 - 32)
    assert (down == np.where(lane + 2 <= last, x + 2, x)).all()


def _product_kernel(n, lbo, sbo):
    """One warpgroup: A (64 x 16) and B (n x 16) K-major in shared memory, one mma_ss."""
    from flashcourse.cuda.ptx import wgmma
    from flashcourse.cuda.ptx.smem_ops import sim_shared_address
    MMA = wgmma.mma_ss(n, "f16")
    desc_fields = (lbo // 16) << 16 | (sbo // 16) << 32

    @cuda.jit
    def kernel(a_words, b_words, out):
        sm = cuda.shared.array(0, uint32, alignment=16)
        tid = cuda.threadIdx.x
        for i in range(tid, a_words.size + b_words.size, 128):
            sm[i] = a_words[i] if i < a_words.size else b_words[i - a_words.size]
        cuda.syncthreads()
        base = int(sim_shared_address(sm, 0))
        da = (base >> 4) | desc_fields
        db = ((base + 4 * a_words.size) >> 4) | desc_fields
        acc = cuda.local.array(n // 2, float32)
        MMA(acc, np.uint64(da), np.uint64(db), 0)
        for i in range(n // 2):
            out[tid, i] = acc[i]
    return kernel


def _kmajor_words(x):
    """x (rows, 16) float16 in the kernel's no-swizzle K-major layout, as uint32 words."""
    rows = x.shape[0]
    buf = np.zeros(rows * 32, np.uint8)
    r, c = np.meshgrid(np.arange(rows), np.arange(16), indexing="ij")
    off = interleaved_kmajor(r, c, 16)
    bits = x.astype(np.float16).view(np.uint16)
    buf[off] = bits & 0xFF
    buf[off + 1] = bits >> 8
    return buf.view(np.uint32)


@pytest.mark.parametrize("n", [8, 32])
def test_a_wgmma_product_reads_what_the_descriptor_says(n, rng):
    a = rng.standard_normal((64, 16)).astype(np.float16)
    b = rng.standard_normal((n, 16)).astype(np.float16)
    want = a.astype(np.float64) @ b.astype(np.float64).T                  # (64, n)
    aw, bw = _kmajor_words(a), _kmajor_words(b)
    smem = 4 * (aw.size + bw.size) + 1024        # room for the reads of a lying descriptor

    def product(lbo, sbo):
        out = np.zeros((128, n // 2), np.float32)
        _product_kernel(n, lbo, sbo)[1, 128, 0, smem](aw, bw, out)
        got = np.zeros((64, n))                  # thread (w, lane)'s values: the C layout
        for tid in range(128):
            w, lane = divmod(tid, 32)
            for j in range(n // 8):
                for i in range(4):
                    r, c = mma.c_m16n8(lane, i)
                    got[16 * w + r, 8 * j + c] = out[tid, 4 * j + i]
        return got
    # the kernel's layout: LBO 128 bytes (next 8 k), SBO 16 x 16 = 256 bytes (next 8 rows)
    np.testing.assert_allclose(product(128, 256), want, rtol=1e-6, atol=1e-5)
    # the same bytes through a descriptor with LBO and SBO exchanged: another product
    assert rel_err(product(256, 128), want) > 0.1


# ------------------------------------------------------------------ the 16-bit kernel
def _check_16bit(q, k, v, causal, precision, scale=None, tol_o=None, **options):
    r = mma.round_fp16 if precision == "fp16" else mma.round_bf16
    qr, kr, vr = (r(x).astype(np.float64) for x in (q, k, v))
    o_ref, lse_ref = reference.attention(qr, kr, vr, causal=causal, scale=scale)
    o, lse = forward(q, k, v, kernel="hopper", precision=precision, causal=causal,
                     scale=scale, **options)
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~fin), "rows with no visible key: lse = -inf"
    assert np.all(o[~fin] == 0)
    # P is rounded to 16 bits before P V, and o to 16 bits at the end
    tol = tol_o or {"fp16": 2e-3, "bf16": 1.2e-2}[precision]
    assert rel_err(o, o_ref) < tol
    assert rel_err(lse[fin], lse_ref[fin]) < 1e-5


CASES_16 = [  # (pipeline, warpgroups, block_k, precision, Tq, Tk, d, causal)
    ("serial", 1, 64, "fp16", 100, 77, 64, True),          # Tq > Tk: rows with no key
    ("serial", 2, 128, "bf16", 70, 200, 48, False),        # d padded to 48 -> 48
    ("overlap", 1, 64, "fp16", 130, 200, 40, True),        # d 40 padded to 48
    ("overlap", 2, 64, "bf16", 1, 90, 16, False),
    ("specialised", 1, 64, "fp16", 70, 130, 64, True),
    ("producer", 2, 64, "bf16", 70, 100, 64, False),
    ("pingpong", 2, 64, "fp16", 140, 130, 32, True),
]


@pytest.mark.slow
@pytest.mark.parametrize("pipeline,wg,bk,precision,tq,tk,d,causal", CASES_16)
def test_each_hopper_version_matches_float64(pipeline, wg, bk, precision, tq, tk, d,
                                             causal, rng):
    heads = 2 if wg == 1 else 1              # a block of 2 warpgroups: 256 Python threads
    q, k, v = (rng.standard_normal((heads, t, d)).astype(np.float32) for t in (tq, tk, tk))
    _check_16bit(q, k, v, causal, precision, pipeline=pipeline, warpgroups=wg, block_k=bk)


@pytest.mark.slow
def test_hopper_extreme_scores_negative_scale_and_a_split_tail(rng):
    q, k, v = (rng.standard_normal((1, t, 32)).astype(np.float32) for t in (70, 150, 150))
    big = 100 / np.linalg.norm(q, axis=-1, keepdims=True)
    _check_16bit(q * big, k * 100 / np.linalg.norm(k, axis=-1, keepdims=True), v, False,
                 "bf16", scale=1.0, warpgroups=1, block_k=64, tol_o=2e-2)
    _check_16bit(q, k, v, True, "fp16", scale=-0.3, warpgroups=1, block_k=64,
                 lazy_rescale=False)
    # the overlap version's tail split: pieces of the last wave's units, then the combine
    _check_16bit(q, k, v, False, "fp16", warpgroups=1, block_k=32, pipeline="overlap",
                 splits=2)


@pytest.mark.slow
def test_hopper_device_arrays_in_and_out(rng):
    q, k, v = (rng.standard_normal((1, 2, t, 64)).astype(np.float16) for t in (65, 80, 80))
    o, lse = forward(*(cuda.to_device(x) for x in (q, k, v)), kernel="hopper", causal=True)
    o_ref, _ = reference.attention(*(x.astype(np.float64) for x in (q, k, v)), causal=True)
    assert rel_err(o.copy_to_host(), o_ref) < 2e-3


# ------------------------------------------------------------------ the FP8 kernel
CASES_FP8 = [  # (heads, Tq, Tk, d, causal, scheme, hadamard, warpgroups, block_k, pipeline)
    (1, 70, 130, 64, False, "block", False, 1, 64, "serial"),
    (2, 100, 77, 64, True, "head", False, 1, 64, "overlap"),       # rows with no key
    (1, 65, 200, 128, True, "block", True, 2, 128, "overlap"),
    (1, 1, 90, 80, False, "tensor", False, 1, 64, "serial"),        # d 80 padded to 96
]


@pytest.mark.slow
@pytest.mark.parametrize("h,tq,tk,d,causal,scheme,had,wg,bk,pipeline", CASES_FP8)
def test_fp8_kernel_matches_its_numpy_twin(h, tq, tk, d, causal, scheme, had, wg, bk,
                                           pipeline, rng):
    q, k, v = fa.outlier_qkv(rng, (h, tq, d), (h, tk, d))
    q8, k8, v8 = fp8.quantize(q, k, v, scheme=scheme, block=128, hadamard=had)
    o, lse = fp8.forward(q8, k8, v8, causal=causal, warpgroups=wg, block_k=bk,
                         pipeline=pipeline)
    # the twin quantizes P against the running max of key blocks of the kernel's size
    model = fa.fp8_attention(q, k, v, scheme=scheme, block=128, hadamard=had, key_block=bk,
                             causal=causal)
    ref, ref_lse = reference.attention(*(x.astype(np.float64) for x in (q, k, v)),
                                       causal=causal)
    fin = np.isfinite(ref_lse)
    assert np.array_equal(np.isfinite(lse), fin)
    o = o.astype(np.float64)
    # the same codes, the same P~ rounding: only fp32 sums' order and o's fp16 rounding
    assert np.abs(o - model).max() <= 1e-3 * np.abs(model).max()
    assert abs(fa.rmse(o, ref) - fa.rmse(model, ref)) <= 0.01 * fa.rmse(model, ref)
