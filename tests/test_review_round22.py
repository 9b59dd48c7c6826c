"""Review round 22 (REVIEW_2026-12-08_round22.md): the simulator's warp functions, named
barriers, mbarriers and cp.async twin refuse what the GPU would not do, instead of
hanging, releasing early or copying from a misaligned address."""

import numpy as np
import pytest

import flashcourse  # noqa: F401  (simulator before numba)
from numba import cuda, uint32
from flashcourse.gpu import using_simulator

pytestmark = pytest.mark.skipif(not using_simulator(), reason="the simulator's twins")


def test_m1_shfl_xor_past_lane_31_keeps_its_own_value():
    """shfl.bfly: a source lane lane ^ mask past 31 gives the thread its own value (the
    twin took it mod 32, another lane's value)."""
    @cuda.jit
    def kernel(x, out):
        i = cuda.threadIdx.x
        out[i] = cuda.shfl_xor_sync(0xFFFFFFFF, x[i], 33)

    x = np.arange(32, dtype=np.int64)
    out = np.zeros(32, np.int64)
    kernel[1, 32](x, out)
    assert (out == x).all()


def test_m2_exchanges_with_other_masks_keep_their_own_table():
    """A lane woken late from one exchange gets that exchange's values, even when the
    others have already completed a later exchange that leaves it out of the mask."""
    @cuda.jit
    def kernel(out):
        i = cuda.threadIdx.x
        a = cuda.shfl_sync(0xFFFFFFFF, i + 100, 0)         # every lane: lane 0's 100
        b = i
        if i != 31:
            b = cuda.shfl_sync(0x7FFFFFFF, i + 200, 1)    # lanes 0..30 only: 201
        out[i, 0] = a
        out[i, 1] = b

    for _ in range(5):
        out = np.zeros((32, 2), np.int64)
        kernel[1, 32](out)
        assert (out[:, 0] == 100).all()
        assert (out[:31, 1] == 201).all() and out[31, 1] == 31


def _named_kernel(count_of):
    from flashcourse.cuda.ptx import wgmma
    NAMED = wgmma.mbarrier_ops()["named_barrier"]

    @cuda.jit
    def kernel(out):
        i = cuda.threadIdx.x
        seen = cuda.shared.array(1, uint32)
        if i == 0:
            seen[0] = 0
        cuda.syncthreads()
        if i < 64:
            NAMED(1, 64)                  # phase 1: two warps
        cuda.syncthreads()
        cuda.atomic.add(seen, 0, 1)
        NAMED(1, count_of(i))             # phase 2
        out[i] = seen[0]
    return kernel


@pytest.mark.parametrize("count,match", [(48, "multiple of 32"), (0, "multiple of 32")])
def test_m3_named_barrier_counts_whole_warps(count, match):
    from flashcourse.cuda.ptx import wgmma
    NAMED = wgmma.mbarrier_ops()["named_barrier"]

    @cuda.jit
    def kernel(out):
        NAMED(1, count)
        out[cuda.threadIdx.x] = 1

    with pytest.raises(ValueError, match=match):
        kernel[1, 64](np.zeros(64, np.int64))


def test_m3_named_barrier_id_is_one_of_16():
    from flashcourse.cuda.ptx import wgmma
    NAMED = wgmma.mbarrier_ops()["named_barrier"]

    @cuda.jit
    def kernel(out):
        NAMED(16, 32)
        out[cuda.threadIdx.x] = 1

    with pytest.raises(ValueError, match="0..15"):
        kernel[1, 32](np.zeros(32, np.int64))


def test_m3_named_barrier_takes_each_phases_count():
    """bar.sync 1, 64 by two warps, then bar.sync 1, 128 by all four: the second phase
    waits for all 128 threads (the twin kept the first count and let 64 through)."""
    for _ in range(3):
        out = np.zeros(128, np.int64)
        _named_kernel(lambda i: 128)[1, 128](out)
        assert (out == 128).all()


def test_m3_named_barrier_counts_differing_within_a_phase_are_named():
    with pytest.raises(RuntimeError, match="same count"):
        _named_kernel(lambda i: 128 if i < 64 else 96)[1, 128](np.zeros(128, np.int64))


def test_m4_mbarrier_wait_before_init_is_named_not_a_hang():
    from flashcourse.cuda.ptx import wgmma
    from flashcourse.cuda.ptx.smem_ops import sim_shared_address
    TRY = wgmma.mbarrier_ops()["try_wait"]

    @cuda.jit
    def kernel(out):
        sm = cuda.shared.array(4, uint32, alignment=16)
        while TRY(sim_shared_address(sm, 0), 0) == 0:
            pass
        out[0] = 1

    with pytest.raises(RuntimeError, match="before mbarrier.init"):
        kernel[1, 1](np.zeros(1, np.int64))


@pytest.mark.parametrize("src,dst,match", [(0, 1, "shared address"),
                                           (8, 0, "byte 8 of a global array")])
def test_m5_cp_async_from_or_to_a_misaligned_address_is_named(src, dst, match):
    from flashcourse.cuda.ptx.smem_ops import sim_intrinsics
    ins = sim_intrinsics()
    CP, GADDR, SADDR = ins["cp_async16_raw"], ins["global_address"], ins["shared_address"]

    @cuda.jit
    def kernel(g, out):
        sm = cuda.shared.array(16, uint32, alignment=16)
        CP(SADDR(sm, dst), GADDR(g, src), 16)
        out[0] = sm[dst]

    g = np.arange(64, dtype=np.uint8)
    with pytest.raises(RuntimeError, match=match):
        kernel[1, 1](g, np.zeros(1, np.int64))
    # aligned: the 16 bytes land
    @cuda.jit
    def good(g, out):
        sm = cuda.shared.array(16, uint32, alignment=16)
        CP(SADDR(sm, 4), GADDR(g, 16), 16)
        out[0] = sm[4]

    out = np.zeros(1, np.int64)
    good[1, 1](g, out)
    assert out[0] == int(np.arange(16, 20, dtype=np.uint8).view(np.uint32)[0])


def test_m6_hopper_backward_adds_the_unscaled_row_sums_of_ds(rng, monkeypatch):
    """The checked call's dsum is sum_j P_ij (dP_ij - D_i), before the softmax scale that
    dS takes for dQ and dK (the check's tolerance is set for that sum): with an o off
    by a known amount, dsum_i = rowsum(dO o (P V - o))_i. A kernel that summed the scaled
    dS passed every other test."""
    import flashcourse.cuda as fc
    from flashcourse import reference
    from flashcourse.cuda import backward

    tq, tk, d = 20, 30, 16
    q, k, v, do = (rng.standard_normal((1, t, d)).astype(np.float16)
                   for t in (tq, tk, tk, tq))
    q64, k64, v64, do64 = (x.astype(np.float64) for x in (q, k, v, do))
    o64, lse = reference.attention(q64, k64, v64)
    o = (o64 + 0.05 * rng.standard_normal(o64.shape)).astype(np.float16)
    seen = {}
    monkeypatch.setattr(fc, "o_rowsums", lambda dsum, *a, **kw: seen.setdefault("d", dsum))
    backward(q, k, v, o, lse.astype(np.float32), do, kernel="hopper")
    want = (do64 * (o64 - o.astype(np.float64))).sum(-1)
    got = seen["d"].reshape(want.shape)
    assert np.abs(got - want).max() < 2e-2 * np.abs(want).max()


def test_m7_an_address_past_a_shared_array_is_named_in_the_singular():
    from flashcourse.cuda.ptx.smem_ops import sim_intrinsics
    ins = sim_intrinsics()
    CP, GADDR, SADDR = ins["cp_async16_raw"], ins["global_address"], ins["shared_address"]

    @cuda.jit
    def kernel(g, out):
        sm = cuda.shared.array(4, uint32, alignment=16)
        CP(SADDR(sm, 4), GADDR(g, 0), 16)                # one past its 16 bytes
        out[0] = sm[0]

    with pytest.raises(RuntimeError, match="no shared array holds bytes"):
        kernel[1, 1](np.arange(16, dtype=np.uint8), np.zeros(1, np.int64))
