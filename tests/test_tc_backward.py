"""The tensor-core backward (flashcourse.cuda.gradients.tc_backward*) on Numba's simulator, and the
models of its shared-memory fragment loads (flashcourse.cuda.ptx.smem_ops).

Two references: the float64 gradients of the float16/bfloat16-rounded inputs
(`reference.attention_backward`; the kernels round P and dS to 16 bits, as FlashAttention-2
does, so they differ from it by ~1e-3 relative), and a numpy model that rounds P and dS
where the kernels do (agreement to ~1e-5: a wrong fragment, mask or scale is off by O(1)).
Shapes: ragged tiles, Tq != Tk both ways, causal with rows that see no key, odd d,
large logits. Each simulated mma costs a barrier: the shapes are tiny (1 warp, Br = 16).
On the simulator the D pre-pass runs one thread per row (`tc_backward_passes.prepass_layout`);
tests that take the gpu_prepass fixture run the GPU's layout (tests/conftest.py says why).
"""

import numpy as np
import pytest
from numba import cuda, uint32   # module globals: the simulator swaps them inside kernels

from flashcourse import reference
from flashcourse.cuda import backward, forward
from flashcourse.cuda.ptx import smem_ops
from flashcourse.cuda.gradients import tc_backward as tcb
from flashcourse.cuda.gradients import tc_backward_passes as passes
from flashcourse.cuda.ptx.mma import round_bf16
from flashcourse.cuda.registry import BACKWARD
from flashcourse.gpu import using_simulator
from helpers import build_flags, rel_err

pytestmark = pytest.mark.skipif(not using_simulator(), reason="simulator tests (CPU machine)")

ROUND = {"fp16": lambda x: np.asarray(x, np.float64).astype(np.float16).astype(np.float64),
         "bf16": lambda x: round_bf16(np.asarray(x, np.float64)).astype(np.float64)}
#: vs the float64 gradients of the rounded inputs: P and dS rounded to 16 bits
TOL_REF = {"fp16": 3e-3, "bf16": 2e-2}
#: vs the numpy model that rounds P and dS where the kernels do (and the output to its
#: dtype): left are a few elements rounded the other way at a tie, and fp32 sums
TOL_MODEL = {"fp16": 1e-4, "bf16": 1e-4}


def problem(tq, tk, d, causal, precision, seed=0, lead=(1,), big=1.0):
    """Inputs in the kernel's dtype (float16 for fp16, float32 for bf16), o and lse from the
    float64 forward of the rounded inputs (o stored in the input dtype)."""
    rng = np.random.default_rng(seed)
    q, k, v, do = (rng.standard_normal((*lead, t, d)).astype(np.float32)
                   for t in (tq, tk, tk, tq))
    q = q * np.float32(big)
    dt = np.float16 if precision == "fp16" else np.float32
    q, k, v, do = (ROUND[precision](a).astype(dt) for a in (q, k, v, do))
    o, lse = reference.attention(*(a.astype(np.float64) for a in (q, k, v)), causal=causal)
    return q, k, v, ROUND[precision](o).astype(dt), lse.astype(np.float32), do


def model(q, k, v, o, lse, do, causal, precision):
    """float64 gradients with P and dS rounded to 16 bits where the kernels round them."""
    r = ROUND[precision]
    q, k, v, o, do = (a.astype(np.float64) for a in (q, k, v, o, do))
    tq, tk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1.0 / np.sqrt(d)
    s = q @ np.swapaxes(k, -1, -2)
    lse = lse.astype(np.float64)[..., None]
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.where(np.isneginf(lse), 0.0, np.exp(scale * s - lse))
    if causal:
        p = np.where(np.arange(tk)[None, :] > np.arange(tq)[:, None] + tk - tq, 0.0, p)
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    dv = np.swapaxes(r(p), -1, -2) @ do
    dk = scale * np.swapaxes(r(ds), -1, -2) @ q
    dq = scale * r(ds) @ k
    return dq, dk, dv


CASES = [  # (Tq, Tk, d, causal)
    (20, 24, 16, False),
    (19, 6, 5, True),        # Tq > Tk: rows 0..12 see no key
    (7, 37, 20, True),       # Tk > Tq, d padded to 32
    (33, 17, 16, True),
]


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
@pytest.mark.parametrize("tq,tk,d,causal", CASES)
def test_matches_reference_and_rounding_model(precision, tq, tk, d, causal):
    assert_matches_reference_and_model(tq, tk, d, causal, precision)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_the_gpu_prepass_layout_end_to_end(precision, gpu_prepass):
    """The D pre-pass a GPU runs (one warp per row, sums by shuffles; the simulator's
    default is one thread per row), through the whole backward: fp16, and bf16 from
    float32 arrays, within the same bounds."""
    assert passes.prepass_layout() == "warp_shfl"
    assert_matches_reference_and_model(7, 37, 20, True, precision)


def assert_matches_reference_and_model(tq, tk, d, causal, precision):
    """The backward's gradients within TOL_REF of the float64 gradients of the rounded
    inputs and within TOL_MODEL of the rounding model; dq = 0 in rows that see no key."""
    args = problem(tq, tk, d, causal, precision, seed=tq + tk)
    got = backward(*args, kernel="tensor_core", causal=causal, precision=precision)
    q, k, v, o, lse, do = args
    ref = reference.attention_backward(*(a.astype(np.float64) for a in (q, k, v, do)),
                                       causal=causal)
    mod = model(*args, causal, precision)
    for name, g, r, m in zip(("dq", "dk", "dv"), got, ref, mod):
        assert g.dtype == q.dtype and g.shape == r.shape, name
        assert rel_err(g, r) <= TOL_REF[precision], f"{name}: {rel_err(g, r):.2e}"
        m = m.astype(g.dtype).astype(np.float64)          # the output's own rounding
        assert rel_err(g, m) <= TOL_MODEL[precision], f"{name} vs model: {rel_err(g, m):.2e}"
    if tq > tk and causal:                     # rows that see no key: dq = 0 exactly
        empty = np.isneginf(lse[0])
        assert empty.any() and np.all(got[0][0, empty] == 0)


@pytest.mark.slow
def test_versions_and_dq_designs_agree():
    """v1 ("plain") and v2 ("async": cp.async + ldmatrix) do the same arithmetic in the same
    order: equal bit for bit. dQ by atomics vs by the query-major pass: the same sums in
    another order."""
    args = problem(21, 29, 24, True, "fp16", seed=3, lead=(2,))   # ragged, Tk > Tq
    runs = {(pipe, det): backward(*args, kernel="tensor_core", causal=True, pipeline=pipe,
                                  deterministic=det)
            for pipe in ("async", "plain") for det in (False, True)}
    for det in (False, True):
        for a, b in zip(runs["async", det], runs["plain", det]):
            assert np.array_equal(a, b)
    for a, b in zip(runs["async", False], runs["async", True]):
        assert rel_err(a, b) <= 1e-3


@pytest.mark.slow
def test_kv_fragments_by_ldmatrix_equal_scalar_loads():
    """K_j, V_j in shared memory (kv_regs=False, d > 64's default): version 2 reads their A
    fragments by ldmatrix.x4 or by four 32-bit loads, and dQ's dS fragments by ld_at or
    ld_bt (tiles arriving as a0, a2, a1, a3); all equal version 1 bit for bit, and the
    rounding model."""
    from flashcourse.cuda.gradients import tc_backward_kernels_async as v2
    # one block per key block, each reading its own K_j, V_j: two key blocks (one full, one
    # ragged) check what a third did; two query blocks reread dS and Q in each block
    args = problem(21, 29, 40, True, "fp16", seed=5)
    kw = dict(kernel="tensor_core", causal=True, kv_regs=False)
    want = backward(*args, pipeline="plain", **kw)
    for how, ds in (("ldmatrix", "ld_at"), ("scalar", "ld_bt")):
        with build_flags(v2, tcb.kernels.cache_clear, KV_FRAGMENTS=how, DS_FRAGMENTS=ds):
            for a, b in zip(backward(*args, pipeline="async", **kw), want):
                assert np.array_equal(a, b), (how, ds)
    for name, g, m in zip(("dq", "dk", "dv"), want, model(*args, True, "fp16")):
        m = m.astype(g.dtype).astype(np.float64)
        assert rel_err(g, m) <= TOL_MODEL["fp16"], f"{name} vs model: {rel_err(g, m):.2e}"


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp16", "3xtf32"])
def test_causal_key_block_orders_agree(precision):
    """_device.key_block_order: the heaviest-first grid (key block 0 of every head first)
    covers every (key block, head) once: the same gradients as the launch order (3 key
    blocks x 2 heads, so a mapping that mixed up X and Y would skip or repeat blocks; one
    ragged query block, which every key block sees: the grid is over key blocks, and a
    second query block only doubled the simulator's time)."""
    from flashcourse.cuda.common import _device
    fp16 = precision == "fp16"
    args = problem(9, 45, 16, True, "fp16" if fp16 else "bf16", seed=8, lead=(2,))
    if not fp16:
        rng = np.random.default_rng(8)
        q, k, v, do = (rng.standard_normal((2, t, 16)).astype(np.float32)
                       for t in (9, 45, 45, 9))
        o, lse = reference.attention(*(a.astype(np.float64) for a in (q, k, v)), causal=True)
        args = (q, k, v, o.astype(np.float32), lse.astype(np.float32), do)
    runs = {}
    for order in _device.KEY_ORDERS:
        with build_flags(_device, tcb.kernels.cache_clear, CAUSAL_KEY_ORDER=order):
            runs[order] = backward(*args, kernel="tensor_core", causal=True)
    for a, b in zip(runs["launch"], runs["heaviest_first"]):
        assert rel_err(a, b) <= 1e-6
    with pytest.raises(ValueError, match="order must be one of"):
        _device.key_block_order("head_reversed")


@pytest.mark.slow
@pytest.mark.parametrize("warps,block_q", [(4, 32)])
def test_multi_warp_tiles_agree_with_version_1(warps, block_q):
    """Several warps per block: each warp's slice of dQ (rows mq, columns nb), the dS^T
    tiles of the other warps read back through shared memory, ragged query blocks (the
    checked atomics) and full ones (the unchecked ones): v2 equals v1 bit for bit and
    matches the rounding model."""
    args = problem(45, 70, 32, True, "fp16", seed=11)
    runs = [backward(*args, kernel="tensor_core", causal=True, pipeline=pipe, warps=warps,
                     block_q=block_q) for pipe in ("async", "plain")]
    for a, b in zip(*runs):
        assert np.array_equal(a, b)
    for name, g, m in zip(("dq", "dk", "dv"), runs[0], model(*args, True, "fp16")):
        m = m.astype(g.dtype).astype(np.float64)
        assert rel_err(g, m) <= TOL_MODEL["fp16"], f"{name} vs model: {rel_err(g, m):.2e}"


@pytest.mark.slow
def test_large_logits_and_device_arrays():
    """Peaked softmax rows (scores ~ +-40) stay finite and accurate; device arrays in,
    device arrays out, in the input dtype."""
    args = problem(18, 18, 16, False, "fp16", seed=5, big=8.0)
    dev = [cuda.to_device(a) for a in args]
    got = [g.copy_to_host() for g in backward(*dev, kernel="tensor_core")]
    mod = model(*args, False, "fp16")
    for g, m in zip(got, mod):
        assert np.isfinite(g).all() and g.dtype == np.float16
        assert rel_err(g, m) <= 2e-3


@pytest.mark.slow
def test_bf16_from_float32_device_arrays_with_the_course_forward():
    rng = np.random.default_rng(9)
    q, k, v, do = (cuda.to_device(rng.standard_normal((1, t, 16)).astype(np.float32))
                   for t in (17, 23, 23, 17))
    o, lse = forward(q, k, v, kernel="tensor_core", precision="bf16", causal=True)
    got = backward(q, k, v, o, lse, do, kernel="tensor_core", precision="bf16", causal=True)
    r = [ROUND["bf16"](a.copy_to_host()) for a in (q, k, v, do)]
    ref = reference.attention_backward(*r, causal=True)
    for g, rr in zip(got, ref):
        assert g.dtype == np.float32 and rel_err(g.copy_to_host(), rr) <= TOL_REF["bf16"]


@pytest.mark.parametrize("kwargs,exc,word", [
    (dict(precision="tf32"), ValueError, "precision must be one of"),
    (dict(precision="fp16"), ValueError, "takes float16 arrays"),
    (dict(pipeline="fast"), ValueError, "pipeline must be one of"),
    (dict(block_q=48), ValueError, "block_q must be 16, 32, 64 or 128"),
    (dict(warps=1, block_q=32), ValueError, "does not fit warps"),
    (dict(tiles=3), ValueError, "does not use tiles"),
])
def test_bad_options_are_named(kwargs, exc, word):
    args = problem(6, 5, 16, False, "bf16")
    kwargs = {"precision": "bf16", **kwargs}
    with pytest.raises(exc, match=word):
        backward(*args, kernel="tensor_core", **kwargs)


def test_large_d_is_refused():
    # (float32 without a precision runs 3xTF32 now: tests/test_tc_backward_tf32.py)
    big = problem(3, 3, 129, False, "fp16")
    with pytest.raises(ValueError, match="at most 128"):
        backward(*big, kernel="tensor_core")


@pytest.mark.slow
def test_wrong_lse_is_caught_with_16_bit_tolerances():
    q, k, v, o, lse, do = problem(10, 12, 16, False, "fp16")
    with pytest.raises(ValueError, match="lse does not match"):
        backward(q, k, v, o, lse + np.float32(0.5), do, kernel="tensor_core")


@pytest.mark.slow
def test_wrong_o_is_caught_and_a_shifted_lse_too():
    """fp16 inputs are exact: the row sums of P and dS are checked at float32 tolerance, so
    an lse off by 0.05 or the o of other inputs is refused (the fp32 kernels' hardening
    tests, tests/test_hardening.py, on a float16 problem)."""
    q, k, v, o, lse, do = problem(11, 13, 16, True, "fp16", seed=2)
    backward(q, k, v, o, lse, do, kernel="tensor_core", causal=True)      # right: fine
    with pytest.raises(ValueError, match="lse does not match"):
        backward(q, k, v, o, lse + np.float32(0.05), do, kernel="tensor_core", causal=True)
    with pytest.raises(ValueError, match="o does not match"):
        backward(q, k, v, o[:, ::-1].copy(), lse, do, kernel="tensor_core", causal=True)


@pytest.mark.slow
def test_float16_gradient_overflow_is_named():
    """Equal value rows make dS = P (dP - D) = 0, while dv = sum_i P_ij do_i reaches
    ~4e5 in fp32: it does not fit the float16 output. With other v, dS itself passes
    65504 where the kernel rounds it to float16: named as a float16 overflow."""
    q, k, v, o, lse, _ = problem(12, 12, 16, True, "fp16", seed=4)
    v1 = np.ones_like(v)
    big = np.full(o.shape, 6e4, np.float16)
    with pytest.raises(ValueError, match="do not fit float16"):
        backward(q, k, v1, np.ones_like(o), lse, big, kernel="tensor_core", causal=True)
    with pytest.raises(ValueError, match="overflow float16"):
        backward(q, k, v, o, lse, big, kernel="tensor_core", causal=True)


def test_registered_once_with_its_options():
    spec = BACKWARD["tensor_core"]
    assert {"precision", "deterministic", "pipeline"} <= set(spec.options)
    assert spec.compute({}, np.float16) == "float32"      # float16 inputs are exact
    assert spec.compute({"precision": "bf16"}, np.float32) == "bfloat16"


def test_default_tiles_fit_every_head_dim_on_the_h200():
    from flashcourse.limits import PRESETS
    for d in range(1, 129):
        t = tcb.choose_tiles(d, PRESETS["H200"])
        cfg = tcb.plan("fp16", d, t["warps"], t["block_q"], False, True, False,
                       t["kv_regs"], t["q_block_k"], 0, t["pipeline"])
        assert cfg.shared_bytes <= PRESETS["H200"].smem_per_block_optin


# --------------------------------------------------------------------------------------
# ldmatrix / cp.async: numpy models vs the mma fragment maps, and the simulator twins
# --------------------------------------------------------------------------------------

def _tile_words(tile16: np.ndarray, pad: int = 4) -> tuple:
    """(rows, 2w) uint16 -> flat uint32 words, rows of w words padded by `pad`; stride."""
    rows, cols = tile16.shape
    stride = cols // 2 + pad
    words = np.zeros(rows * stride, np.uint32)
    packed = tile16[:, 0::2].astype(np.uint32) | (tile16[:, 1::2].astype(np.uint32) << 16)
    for r in range(rows):
        words[r * stride:r * stride + cols // 2] = packed[r]
    return words, stride


def test_ldmatrix_trans_of_a_k_major_tile_is_the_mma_b_fragment():
    """B stored with k along the rows (dO_i for dV += P^T dO): .trans gives b0, b1 of
    two n8 tiles; without .trans the lanes get the wrong elements."""
    tile = np.random.default_rng(0).integers(0, 2 ** 16, (16, 16)).astype(np.uint16)  # (k, n)
    words, stride = _tile_words(tile)
    wrong = 0
    for lane in range(32):
        got = smem_ops.ld_bt_model(words, 0, stride, lane)
        want = smem_ops.b_fragment_of(tile[:, :8], lane) + smem_ops.b_fragment_of(tile[:, 8:],
                                                                                  lane)
        assert got == want, lane
        wrong += smem_ops.ld_b_model(words, 0, stride, lane) != want
    assert wrong > 0


def test_ld_at_of_a_k_major_tile_is_the_mma_a_fragment_in_order():
    """A stored with k along the rows (dS^T for dQ += dS K): ld_at (.trans, tiles 1 and 2
    of ld_bt swapped) gives a0, a1, a2, a3 in the mma's order; ld_bt gives them as
    a0, a2, a1, a3, which is not the fragment."""
    a = np.random.default_rng(4).integers(0, 2 ** 16, (16, 16)).astype(np.uint16)  # (m, k)
    words, stride = _tile_words(np.ascontiguousarray(a.T))                   # rows = k
    wrong = 0
    for lane in range(32):
        want = smem_ops.a_fragment_of(a, lane)
        assert smem_ops.ld_at_model(words, 0, stride, lane) == want, lane
        b = smem_ops.ld_bt_model(words, 0, stride, lane)
        assert (b[0], b[2], b[1], b[3]) == want
        wrong += b != want
    assert wrong > 0


def test_ldmatrix_of_an_n_major_tile_is_the_mma_b_fragment():
    """B stored with n along the rows (Q_i for S^T = K Q^T): plain ldmatrix gives it."""
    stored = np.random.default_rng(1).integers(0, 2 ** 16, (16, 16)).astype(np.uint16)  # (n, k)
    words, stride = _tile_words(stored)
    for lane in range(32):
        got = smem_ops.ld_b_model(words, 0, stride, lane)
        want = (smem_ops.b_fragment_of(stored[:8].T, lane)
                + smem_ops.b_fragment_of(stored[8:].T, lane))
        assert got == want, lane


def test_simulator_twins_match_the_models():
    ops = smem_ops.ops(True)
    ld_b, ld_bt, ld_at, cp16 = ops["ld_b"], ops["ld_bt"], ops["ld_at"], ops["cp16"]
    tile = np.random.default_rng(2).integers(0, 2 ** 16, (16, 16)).astype(np.uint16)
    words, stride = _tile_words(tile)
    g = np.arange(2 * 3 * 8, dtype=np.uint32).reshape(2, 3, 8)

    @cuda.jit
    def probe(src, out, g, copied):
        sm = cuda.shared.array(256, uint32)
        lane = cuda.threadIdx.x
        for i in range(lane, src.size, 32):
            sm[i] = src[i]
        cuda.syncthreads()
        a = ld_b(sm, 0, stride, lane)
        b = ld_bt(sm, 0, stride, lane)
        c = ld_at(sm, 0, stride, lane)
        for i in range(4):
            out[lane, i] = a[i]
            out[lane, 4 + i] = b[i]
            out[lane, 8 + i] = c[i]
        if lane == 0:
            cp16(sm, 200, g, (1 * 3 + 2) * 8 + 4, 16)   # g[1, 2, 4:8] of the (2, 3, 8) words
            cp16(sm, 204, g, (1 * 3 + 2) * 8, 0)
            for i in range(8):
                copied[i] = sm[200 + i]

    out = np.zeros((32, 12), np.uint32)
    copied = np.zeros(8, np.uint32)
    probe[1, 32](words, out, g.reshape(-1), copied)
    for lane in range(32):
        assert tuple(out[lane, :4]) == smem_ops.ld_b_model(words, 0, stride, lane)
        assert tuple(out[lane, 4:8]) == smem_ops.ld_bt_model(words, 0, stride, lane)
        assert tuple(out[lane, 8:]) == smem_ops.ld_at_model(words, 0, stride, lane)
    assert list(copied[:4]) == list(g[1, 2, 4:8]) and not copied[4:].any()


@pytest.mark.slow
@pytest.mark.parametrize("d", [5, 40, 64])
def test_prepass_layouts_agree(d):
    """tc_backward_passes.PREPASS: the D pre-pass as one warp per row (coalesced; the sums added by
    shuffles, the default, or through shared memory) or one thread per row gives the same
    L = lse log2(e) and, to rounding, the same D = rowsum(dO o O) (float64 on the same
    rounded values); padded rows (Tq = 37 of LD_ROWS) hold L = +inf, D = 0; a row with
    lse = -inf gets L = +inf; dQ is zeroed."""
    tq, bh = 37, 2
    rng = np.random.default_rng(d)
    o, do = (rng.standard_normal((bh, tq, d)).astype(np.float16) for _ in range(2))
    lse = rng.standard_normal((bh, tq)).astype(np.float32)
    lse[1, 3] = -np.inf
    want = (o.astype(np.float64) * do.astype(np.float64)).sum(-1)
    tqp = -(-tq // tcb.LD_ROWS) * tcb.LD_ROWS
    got = {}
    for how in ("warp_shfl", "warp_rows", "thread_rows"):
        with build_flags(passes, passes.pass_kernels.cache_clear, PREPASS=how):
            delta, _, _, _, rows = passes.pass_kernels()
            ld = cuda.to_device(np.full((2, bh, tqp), np.nan, np.float32))
            dq = cuda.to_device(np.ones((bh, tq, d), np.float32))
            sums = cuda.to_device(np.zeros((bh, tq), np.float32))
            delta[(-(-tqp // rows), bh), passes.PASS_THREADS](
                cuda.to_device(o), cuda.to_device(do), cuda.to_device(lse), ld, dq,
                np.int32(1), np.int32(tq), np.int32(d), sums, sums, np.int32(0))
            got[how] = ld.copy_to_host()
            assert not dq.copy_to_host().any(), how
    for how, ld in got.items():
        assert np.allclose(ld[1, :, :tq], want, rtol=1e-5, atol=1e-5), how
        assert (ld[1, :, tq:] == 0).all() and np.isposinf(ld[0, :, tq:]).all(), how
        assert np.isposinf(ld[0, 1, 3]), how
        finite = np.isfinite(lse)
        assert np.allclose(ld[0, :, :tq][finite], lse[finite] * np.log2(np.e), rtol=1e-6), how
    assert np.array_equal(got["warp_rows"][0], got["thread_rows"][0])
    assert np.array_equal(got["warp_shfl"][0], got["thread_rows"][0])


@pytest.mark.slow
def test_bf16_one_key_cancels():
    """One key: P = 1, o = v, so dS = dP - D = dO . v - dO . o must vanish. D comes from
    the bf16-rounded dO the tensor cores see; from the float32 dO it would leave
    ~2^-9 |dO||v| in dS, and dq, dk would be far from their exact 0."""
    rng = np.random.default_rng(11)
    q, k, v, do = (rng.standard_normal((1, t, 16)).astype(np.float32) for t in (9, 1, 1, 9))
    dev = [cuda.to_device(a) for a in (q, k, v, do)]
    o, lse = forward(*dev[:3], kernel="tensor_core", precision="bf16")
    dq, dk, dv = (g.copy_to_host() for g in backward(dev[0], dev[1], dev[2], o, lse, dev[3],
                                                      kernel="tensor_core", precision="bf16"))
    scale = np.abs(dv).max()
    assert np.abs(dq).max() <= 1e-6 * scale and np.abs(dk).max() <= 1e-6 * scale


def _bits(a):
    """float32 -> bf16 bit patterns (uint16), rounded half to even (as the kernels round)."""
    return (round_bf16(a).view(np.uint32) >> 16).astype(np.uint16)


def _from_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.slow
@pytest.mark.parametrize("d", [16, 24])               # native, and padded on the device
def test_bf16_bit_arrays_match_the_float32_path(d, request):
    """uint16 device arrays of bf16 bit patterns (forward and backward, no conversion):
    o and the gradients come back as bf16 bits, bit-equal to the float32 arrays'
    precision="bf16" results rounded to bf16 (the same rounded inputs and D, the same
    kernels; the float32 path's accuracy is tested above)."""
    if d == 24:       # the GPU's pre-pass of bf16 bits, at d = 24 (padded)
        request.getfixturevalue("gpu_prepass")
    rng = np.random.default_rng(5)
    q, k, v, do = (rng.standard_normal((1, t, d)).astype(np.float32) for t in (19, 23, 23, 19))
    f32 = [cuda.to_device(a) for a in (q, k, v, do)]
    bits = [cuda.to_device(_bits(a)) for a in (q, k, v, do)]
    o_f, lse_f = forward(*f32[:3], kernel="tensor_core", precision="bf16", causal=True)
    o_b, lse_b = forward(*bits[:3], kernel="tensor_core", causal=True)
    assert np.dtype(o_b.dtype) == np.uint16
    np.testing.assert_array_equal(o_b.copy_to_host(), _bits(o_f.copy_to_host()))
    got_f = backward(*f32[:3], o_f, lse_f, f32[3], kernel="tensor_core", precision="bf16",
                     causal=True)
    got_b = backward(*bits[:3], o_b, lse_b, bits[3], kernel="tensor_core", causal=True)
    for gf, gb in zip(got_f, got_b):
        assert np.dtype(gb.dtype) == np.uint16
        # the float32 path rounds o and dO to bf16 for D too: the same D, the same kernels
        np.testing.assert_array_equal(gb.copy_to_host(), _bits(gf.copy_to_host()))
    with pytest.raises(ValueError, match="check=True checks floating-point arrays"):
        backward(*bits[:3], o_b, lse_b, bits[3], kernel="tensor_core", check=True)
    with pytest.raises(ValueError, match="takes float16 arrays"):
        backward(*bits[:3], o_b, lse_b, bits[3], kernel="tensor_core", precision="fp16")


@pytest.mark.slow
@pytest.mark.parametrize("precision,d,deterministic", [("fp16", 20, False),
                                                       ("bf16", 16, False),
                                                       ("fp16", 16, True)])
def test_16_bit_dk_dv_from_the_kernel_equal_the_cast_path(precision, d, deterministic):
    """tc_backward.OUT16: the key-major kernel writes dK, dV in the output dtype itself
    (two 16-bit values per store, rounded as cvt.rn rounds) instead of float32 arrays that
    a cast pass rounds afterwards: the same bits, also on a ragged causal tile with
    Tq != Tk and a padded d."""
    q, k, v, o, lse, do = problem(21, 18, d, True, "fp16", seed=d)
    if precision == "bf16":                    # bf16 bit patterns in and out
        q, k, v, o, do = (_bits(a.astype(np.float32)) for a in (q, k, v, o, do))
    dev = [cuda.to_device(a) for a in (q, k, v, o, lse, do)]
    got = {}
    for out16 in (True, False):
        with build_flags(tcb, tcb.kernels.cache_clear, OUT16=out16):
            got[out16] = [g.copy_to_host() for g in backward(
                *dev, kernel="tensor_core", causal=True, deterministic=deterministic)]
    for a, b in zip(got[True], got[False]):
        assert a.dtype == b.dtype == q.dtype
        np.testing.assert_array_equal(a.view(np.uint16), b.view(np.uint16))
        assert np.abs(a.view(np.uint16).astype(np.int64)).sum() > 0


def test_16_bit_outputs_need_an_even_d():
    """out16 (dK, dV written as words of two 16-bit values) is refused by name for an odd d
    and for 3xtf32; run_heads takes the float32 arrays and casts there (odd d is tested
    against the reference above)."""
    with pytest.raises(ValueError, match="out16"):
        tcb.plan("fp16", 5, 1, 16, simulator=True, out16=True)
    with pytest.raises(ValueError, match="out16"):
        tcb.plan("3xtf32", 16, 1, 16, simulator=True, kv_regs=False, out16=True)


@pytest.mark.parametrize("bits", [False, True])
def test_pair_casts_round_as_the_one_value_casts(bits):
    """tc_backward_passes.CAST_PAIRS: the float32 -> fp16 (bf16 bits) cast of the gradients, two
    values per thread packed into one word, gives the bits of the one-value cast (numpy's
    float16 rounding; the bf16 rounding of the forward's conversion): ties to even, float16
    overflow to inf, subnormals, signed zeros; an odd count takes the one-value kernel."""
    rng = np.random.default_rng(3)
    x = np.concatenate([rng.standard_normal(301) * 10.0 ** rng.integers(-9, 6, 301),
                        [65504.0, 65520.0, 1e6, -1e6, 0.0, -0.0, 6e-8, 1 + 2.0 ** -11,
                         1 + 3 * 2.0 ** -11, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8]])
    x = x.astype(np.float32)
    want = _bits(x) if bits else x.astype(np.float16).view(np.uint16)
    for pairs in (True, False):
        for n in (len(x), len(x) - 1):        # even: the pairs kernel; odd: one value each
            dst = cuda.device_array(n, np.uint16 if bits else np.float16)
            with build_flags(passes, lambda: None, CAST_PAIRS=pairs):
                passes.cast(cuda.to_device(x[:n]), dst, bits=bits)
            np.testing.assert_array_equal(dst.copy_to_host().view(np.uint16), want[:n])


@pytest.mark.slow
@pytest.mark.parametrize("causal,precision", [(False, "fp16"), (True, "fp16"),
                                              (True, "3xtf32")])
def test_dq_by_pair_reductions_equals_one_by_one(causal, precision):
    """tc_backward_kernels_async.DQ_RED: a block's dQ tile added two neighbouring columns
    per red.global.add.v2.f32 (the tiles inside Tq with d = D) gives the dQ of one
    reduction per value (the simulator's twin adds the pair as two atomics: what this
    checks is the pairing of values and indices), beside the edge tiles (Tq = 24 of
    Br = 16: one full query block, one ragged) that still add one by one; in both kernels
    that add dQ this way."""
    from flashcourse.cuda.gradients import tc_backward_kernels_async as v2
    q, k, v, o, lse, do = problem(24, 20, 16, causal, "fp16", seed=9)
    tol = 1e-3
    if precision == "3xtf32":                  # float32 arrays: the 3xTF32 kernel
        q, k, v, do = (a.astype(np.float32) for a in (q, k, v, do))
        o, lse = reference.attention(*(a.astype(np.float64) for a in (q, k, v)),
                                     causal=causal)
        o, lse = o.astype(np.float32), lse.astype(np.float32)
        tol = 1e-5
    got = {}
    for how in ("v2", "scalar"):
        with build_flags(v2, tcb.kernels.cache_clear, DQ_RED=how):
            got[how] = [g for g in backward(q, k, v, o, lse, do, kernel="tensor_core",
                                            causal=causal)]
    for a, b in zip(got["v2"], got["scalar"]):
        np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=0,
                                   atol=tol * float(np.abs(b).max()))
    if precision == "3xtf32":                  # fp32 accuracy: the float64 gradients
        want = reference.attention_backward(*(a.astype(np.float64) for a in (q, k, v, do)),
                                            causal=causal)[0]
        assert rel_err(got["v2"][0], want) < 1e-5
    else:
        want = model(q, k, v, o, lse, do, causal, "fp16")[0]
        assert rel_err(got["v2"][0], want) < TOL_MODEL["fp16"] + tol
