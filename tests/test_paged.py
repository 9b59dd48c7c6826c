"""Paged KV-cache decoding: the numpy model (flashcourse.paged_cache), the device's work
list, and the kernels on the simulator (flashcourse.cuda.paged_decode, decoding/paged.py).

Tolerances against the float64 reference (`paged_cache.paged_reference`): float32 1e-5
relative; float16 inputs: the error of o at most 2x that of the same decode computed in
float32 from the same rounded inputs (`decode.split_kv_forward`) and rounded to float16,
plus 1e-6; lse 1e-5. Paged against the contiguous `cuda.decode` on the gathered cache: bit
for bit where both cut the keys into the same splits.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import decode, paged_cache as pc
from flashcourse.cuda import decode as cuda_decode
from flashcourse.cuda import paged_decode
from flashcourse.cuda.decoding import paged
from flashcourse.cuda.decoding.paged_kernels import seq_items, work_item
from helpers import rel_err

ROOT = Path(__file__).resolve().parents[1]


def pool(rng, num_pages, hkv, ps, d, dtype=np.float32, scale=1.0):
    k = (rng.standard_normal((num_pages, hkv, ps, d)) * scale).astype(dtype)
    v = rng.standard_normal((num_pages, hkv, ps, d)).astype(dtype)
    return k, v


def shuffled_table(rng, lens, ps, num_pages, width):
    """Each sequence's pages drawn without repeats from a shuffled pool (non-contiguous,
    non-monotone); unused entries -1."""
    order = rng.permutation(num_pages)
    table = np.full((len(lens), width), -1, np.int32)
    at = 0
    for b, n in enumerate(lens):
        need = pc.pages_for(n, ps)
        table[b, :need] = order[at:at + need]
        at += need
    assert at <= num_pages
    return table


def check_against_reference(q, kp, vp, bt, lens, o, lse, causal):
    o_ref, lse_ref = pc.paged_reference(q, kp, vp, bt, lens, causal=causal)
    fin = np.isfinite(lse_ref)
    assert np.array_equal(np.isneginf(lse), ~fin), "rows with no visible key: lse = -inf"
    assert np.all(o[~fin] == 0)
    assert rel_err(lse[fin], lse_ref[fin]) <= 1e-5
    if q.dtype == np.float32:
        assert rel_err(o, o_ref) <= 1e-5
        return
    # float16: within 2x of the same decode in float32 on the rounded inputs
    o32 = np.zeros(q.shape, np.float16)
    for b, n in enumerate(lens.tolist()):
        k = pc.gather(kp, bt, b, n)[None].astype(np.float32)
        v = pc.gather(vp, bt, b, n)[None].astype(np.float32)
        o32[b] = decode.split_kv_forward(q[b:b + 1].astype(np.float32), k, v,
                                         causal=causal)[0][0].astype(np.float16)
    e32 = np.abs(o32.astype(np.float64) - o_ref).max()
    assert np.abs(o.astype(np.float64) - o_ref).max() <= 2 * e32 + 1e-6


# ---------------------------------------------------------------------------------------
# The numpy model
# ---------------------------------------------------------------------------------------

def test_token_address_is_the_block_table_formula():
    table = np.array([[5, 2, 9], [0, 7, 3]], np.int32)
    assert pc.token_address(table, 1, 0, 16) == (0, 0)
    assert pc.token_address(table, 0, 15, 16) == (5, 15)
    assert pc.token_address(table, 0, 16, 16) == (2, 0)        # the page boundary
    assert pc.token_address(table, 1, 47, 16) == (3, 15)
    page, slot = pc.token_address(table, 0, np.arange(30, 34), 16)
    assert page.tolist() == [2, 2, 9, 9] and slot.tolist() == [14, 15, 0, 1]


@given(page_size=st.sampled_from([16, 32]), hkv=st.integers(1, 3), d=st.integers(1, 5),
       chunks=st.lists(st.integers(1, 40), min_size=1, max_size=5), seed=st.integers(0, 99))
def test_append_then_gather_is_the_concatenation(page_size, hkv, d, chunks, seed):
    rng = np.random.default_rng(seed)
    total = sum(chunks)
    cache = pc.PagedKVCache(num_pages=2 * pc.pages_for(total, page_size) + 1, heads_kv=hkv,
                            page_size=page_size, head_dim=d, max_seqs=2,
                            max_pages_per_seq=pc.pages_for(total, page_size))
    cache.append(1, *(rng.standard_normal((2, hkv, 3, d))))    # another sequence between
    ks, vs = [], []
    for n in chunks:
        k, v = rng.standard_normal((2, hkv, n, d))
        cache.append(0, k, v)
        ks.append(k)
        vs.append(v)
    k, v = cache.gather(0)
    assert np.array_equal(k, np.concatenate(ks, axis=1))
    assert np.array_equal(v, np.concatenate(vs, axis=1))
    assert cache.seq_lens[0] == total
    used = cache.block_table[0, :pc.pages_for(total, page_size)]
    assert len(set(used.tolist())) == used.size                 # no page twice


def test_fork_shares_pages_and_copies_on_write(rng):
    cache = pc.PagedKVCache(8, 1, 16, 4, max_seqs=2, max_pages_per_seq=4)
    k, v = rng.standard_normal((2, 1, 20, 4))
    cache.append(0, k, v)
    cache.fork(0, 1)
    assert np.array_equal(cache.block_table[1, :2], cache.block_table[0, :2])
    assert cache.refs[cache.block_table[0, :2]].tolist() == [2, 2]
    k2, v2 = rng.standard_normal((2, 1, 15, 4))
    cache.append(1, k2, v2)            # writes into the shared second page: copied first
    assert cache.block_table[1, 0] == cache.block_table[0, 0]          # prefix shared
    assert cache.block_table[1, 1] != cache.block_table[0, 1]          # copied
    assert np.array_equal(cache.gather(0)[0], k)                       # src untouched
    assert np.array_equal(cache.gather(1)[0], np.concatenate([k, k2], axis=1))
    free = len(cache.free)
    cache.release(0)
    assert len(cache.free) == free + 1          # page 0 is still used by sequence 1
    cache.release(1)
    assert len(cache.free) == 8 and not cache.refs.any()


def test_write_tokens_crosses_pages(rng):
    kp, vp = np.zeros((2, 4, 1, 16, 3))
    table = np.array([[2, 0, 3]], np.int32)
    k_new, v_new = rng.standard_normal((2, 1, 1, 5, 3))
    lens = pc.write_tokens(kp, vp, table, np.array([14], np.int32), k_new, v_new)
    assert lens.tolist() == [19]
    assert np.array_equal(kp[2, 0, 14:16], k_new[0, 0, :2])
    assert np.array_equal(kp[0, 0, 0:3], k_new[0, 0, 2:])
    assert np.array_equal(pc.gather(vp, table, 0, 19)[:, 14:], v_new[0])


def test_pool_full_and_bad_cache_use():
    cache = pc.PagedKVCache(1, 1, 16, 2, max_seqs=1, max_pages_per_seq=2)
    cache.append(0, np.zeros((1, 16, 2)), np.zeros((1, 16, 2)))
    with pytest.raises(MemoryError, match="pages are all in use"):
        cache.append(0, np.zeros((1, 1, 2)), np.zeros((1, 1, 2)))
    with pytest.raises(ValueError, match="k_new must have shape"):
        cache.append(0, np.zeros((2, 1, 2)), np.zeros((2, 1, 2)))
    with pytest.raises(ValueError, match="page_size"):
        pc.PagedKVCache(4, 1, 24, 2, max_seqs=1, max_pages_per_seq=2)


def good_inputs(rng):
    kp, vp = pool(rng, 6, 2, 16, 8)
    q = rng.standard_normal((2, 4, 1, 8)).astype(np.float32)
    bt = np.array([[1, 4, -1], [0, 2, 5]], np.int32)
    return q, kp, vp, bt, np.array([20, 40], np.int32)


@pytest.mark.parametrize("change,exc,match", [
    (lambda a: a.update(block_table=a["block_table"].astype(np.int64)), TypeError,
     "block_table must have dtype int32"),
    (lambda a: a.update(seq_lens=a["seq_lens"].astype(np.int64)), TypeError,
     "seq_lens must have dtype int32"),
    (lambda a: a["seq_lens"].__setitem__(1, 0), ValueError, r"seq_lens\[1\] = 0"),
    (lambda a: a["seq_lens"].__setitem__(0, -3), ValueError, r"seq_lens\[0\] = -3"),
    (lambda a: a["seq_lens"].__setitem__(0, 49), ValueError, "table is too short"),
    (lambda a: a["block_table"].__setitem__((1, 2), 6), ValueError,
     r"block_table\[1, 2\] = 6 is not a page of the pool"),
    (lambda a: a["block_table"].__setitem__((0, 0), -1), ValueError,
     r"block_table\[0, 0\] = -1"),
    (lambda a: a.update(block_table=a["block_table"][:1]), ValueError,
     "block_table must have shape"),
    (lambda a: a.update(seq_lens=a["seq_lens"][:, None]), ValueError,
     "seq_lens must have shape"),
    (lambda a: a.update(v_pages=a["v_pages"][:5]), ValueError,
     "v_pages must have the shape of k_pages"),
    (lambda a: a.update(k_pages=a["k_pages"][:, :, :12], v_pages=a["v_pages"][:, :, :12]),
     ValueError, "page_size = k_pages.shape"),
    (lambda a: a.update(q=a["q"][..., :4]), ValueError, "head dim d"),
    (lambda a: a.update(q=a["q"][:, :3]), ValueError, "multiple of the key/value heads"),
    (lambda a: a.update(k_pages=a["k_pages"][0]), ValueError, "k_pages must have 4"),
    (lambda a: a.update(block_table=a["block_table"].tolist()), TypeError,
     "block_table must be a numpy int32 array"),
])
def test_bad_inputs_are_named(rng, change, exc, match):
    q, kp, vp, bt, lens = good_inputs(rng)
    args = {"q": q, "k_pages": kp, "v_pages": vp, "block_table": bt, "seq_lens": lens}
    change(args)
    with pytest.raises(exc, match=match):
        pc.paged_reference(**args)
    with pytest.raises(exc, match=match):         # the GPU call checks before any launch
        paged_decode(**args)


# ---------------------------------------------------------------------------------------
# The work list
# ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("ps,lens,target", [
    (16, [1, 17, 300, 64, 33], 7), (64, [5000, 64, 1, 129], 40), (16, [16] * 4, 3),
    (256, [70000, 1, 256, 257], 12), (32, [0, 40, -5, 10**6], 5)])
def test_work_list_covers_every_key_once(ps, lens, target):
    lens = np.array(lens, np.int32)
    width = 300
    min_pages = max(1, 64 // ps)
    host = paged.items(lens, ps, width, target, min_pages)
    device = []                                     # the kernels' rule, block by block
    for x in range(target + lens.size):
        b, k0, k1, slot = work_item(lens, x, ps, width, target, min_pages)
        if b >= 0:
            device.append((b, k0, k1, slot))
        else:                                       # every later block is empty too
            assert all(work_item(lens, y, ps, width, target, min_pages)[0] < 0
                       for y in range(x, target + lens.size))
            break
    assert device == host
    sizes = [k1 - k0 for _, k0, k1, _ in host]
    full = sizes[:len([1 for b, k0, k1, _ in host if (k1 - k0) == max(sizes)])]
    assert full == sorted(full, reverse=True)       # the longest items go first
    for b, n in enumerate(lens.tolist()):
        n = min(max(n, 0), width * ps)
        mine = sorted((k0, k1, slot) for bb, k0, k1, slot in host if bb == b)
        keys = [k for k0, k1, _ in mine for k in range(k0, k1)]
        assert keys == list(range(n))               # every key once, in order
        first, count = seq_items(lens, b, ps, width, target, min_pages)
        assert [s for _, _, s in mine] == list(range(first, first + count))
        assert all(k0 % ps == 0 for k0, _, _ in mine)            # items start on a page
    assert len(host) <= target + lens.size          # the plan's capacity


def test_heuristic_splits_a_ragged_batch_finer_than_one_wave():
    lens = np.linspace(1024, 131072, 32).astype(np.int64)
    t = paged.choose_target(lens, 64, 2048, 8, 1, sms=132, blocks_per_sm=4)
    model = {k: paged.simulated_finish(lens, 64, 2048, k, 1, 8, 528) for k in (66, t)}
    assert t > 66 and model[t] < 0.8 * model[66]
    # equal lengths: about the contiguous decode's splits
    assert paged.choose_target(np.full(4, 16384), 64, 256, 8, 1, sms=132) <= 4 * 32


def test_simulated_schedule_deals_every_block_once_without_overlap():
    """The heuristic's model block by block (notebook 11b draws it): each item's Hkv x row
    blocks blocks appear once, in launch order, with its keys + the fixed cost; no slot
    runs two blocks at once; a block starts when the earliest slot frees; the finish is
    simulated_finish's."""
    lens = np.array([3000, 9000, 1200, 20000, 500, 64])
    ps, width, target, heads_blocks, slots = 64, 400, 11, 2, 6
    sched = paged.simulated_schedule(lens, ps, width, target, 1, heads_blocks, slots)
    work = paged.items(lens, ps, width, target, 1)
    assert len(sched) == heads_blocks * len(work)
    for n, (slot, start, end, b) in enumerate(sched):
        item = work[n // heads_blocks]
        assert b == item[0] and end - start == item[2] - item[1] + paged.BLOCK_OVERHEAD_KEYS
        assert 0 <= slot < slots
    for s in range(slots):
        mine = sorted((st, en) for sl, st, en, _ in sched if sl == s)
        assert all(a[1] <= b_[0] for a, b_ in zip(mine, mine[1:]))
    starts = [st for _, st, _, _ in sched]
    assert starts == sorted(starts)                    # first free slot, in launch order
    assert max(e for _, _, e, _ in sched) == paged.simulated_finish(
        lens, ps, width, target, 1, heads_blocks, slots)
    assert paged.simulated_finish(np.zeros(2, int), ps, width, 4, 1, 1, 3) == 0


# ---------------------------------------------------------------------------------------
# The kernels (simulator)
# ---------------------------------------------------------------------------------------

CASES = [
    # hq, hkv, tq, d, page_size, lens, causal, dtype, kernel
    (2, 2, 1, 8, 16, [37, 1, 16], False, np.float32, None),     # length 1, one full page
    (4, 1, 4, 8, 32, [70, 3], True, np.float32, None),          # G = 4, Tq = 4, Tq > L
    (8, 1, 1, 5, 16, [50, 17], True, np.float32, None),         # G = 8, odd d
    (2, 1, 1, 8, 64, [130, 64], False, np.float16, None),
    (4, 2, 4, 16, 16, [45, 20], True, np.float16, "tensor_core"),
    (8, 1, 1, 16, 32, [33], False, np.float16, "tensor_core"),
]


@pytest.mark.parametrize("hq,hkv,tq,d,ps,lens,causal,dtype,kernel", CASES)
def test_paged_decode_matches_reference(rng, hq, hkv, tq, d, ps, lens, causal, dtype,
                                        kernel):
    lens = np.array(lens, np.int32)
    width = pc.pages_for(int(lens.max()), ps) + 1
    num_pages = sum(pc.pages_for(n, ps) for n in lens.tolist()) + 2
    kp, vp = pool(rng, num_pages, hkv, ps, d, dtype)
    bt = shuffled_table(rng, lens, ps, num_pages, width)
    q = rng.standard_normal((lens.size, hq, tq, d)).astype(dtype)
    kw = {} if kernel is None else {"kernel": kernel}
    o, lse = paged_decode(q, kp, vp, bt, lens, causal=causal, target_items=3, **kw)
    assert o.dtype == dtype and o.shape == q.shape
    check_against_reference(q, kp, vp, bt, lens, o, lse, causal)


def test_shared_prefix_pages_and_extreme_values(rng):
    ps, d = 16, 8
    kp, vp = pool(rng, 6, 1, ps, d, scale=30.0)                 # scores up to ~1e3
    bt = np.array([[4, 1, 0], [4, 1, 5]], np.int32)             # common 32-token prefix
    lens = np.array([40, 47], np.int32)
    q = (rng.standard_normal((2, 2, 1, d)) * 30).astype(np.float32)
    o, lse = paged_decode(q, kp, vp, bt, lens, target_items=2)
    check_against_reference(q, kp, vp, bt, lens, o, lse, False)
    assert np.abs(lse).max() > 500
    vp[1, 0, 3] = 1e30                                          # huge v in the prefix
    o, lse = paged_decode(q, kp, vp, bt, lens, target_items=2)
    check_against_reference(q, kp, vp, bt, lens, o, lse, False)


def test_paged_equals_contiguous_decode_bit_for_bit(rng):
    """Page 64 = block_k 64 and target = B x num_splits: the same key ranges, the same
    split kernel, so the same bits; ragged lengths: within float32 rounding."""
    b, hq, hkv, d, ps, n = 2, 2, 1, 8, 64, 150
    kp, vp = pool(rng, 8, hkv, ps, d)
    bt = shuffled_table(rng, [n, n], ps, 8, 3)
    lens = np.array([n, n], np.int32)
    q = rng.standard_normal((b, hq, 1, d)).astype(np.float32)
    o, lse = paged_decode(q, kp, vp, bt, lens, target_items=b * 2)
    k = np.stack([pc.gather(kp, bt, i, n) for i in range(b)])
    v = np.stack([pc.gather(vp, bt, i, n) for i in range(b)])
    o_c, lse_c = cuda_decode(q, k, v, num_splits=2, block_k=64)
    assert np.array_equal(o, o_c) and np.array_equal(lse, lse_c)
    lens = np.array([n, 77], np.int32)                          # ragged: per sequence
    o, lse = paged_decode(q, kp, vp, bt, lens, target_items=3)
    for i, m in enumerate(lens.tolist()):
        o_c, lse_c = cuda_decode(q[i:i + 1], pc.gather(kp, bt, i, m)[None],
                                 pc.gather(vp, bt, i, m)[None], num_splits=1)
        assert rel_err(o[i], o_c[0]) <= 2e-6 and rel_err(lse[i], lse_c[0]) <= 2e-6


def test_append_kernel_equals_numpy_append(rng):
    from numba import cuda
    kp, vp = pool(rng, 5, 2, 16, 8, np.float16)
    bt = np.array([[3, 0, 4], [1, 2, -1]], np.int32)
    lens = np.array([14, 3], np.int32)                          # 14 + 5 crosses a page
    k_new, v_new = (rng.standard_normal((2, 2, 2, 5, 8)).astype(np.float16))
    want_k, want_v = kp.copy(), vp.copy()
    pc.write_tokens(want_k, want_v, bt, lens, k_new, v_new)
    dk, dv = cuda.to_device(kp), cuda.to_device(vp)
    paged.append(dk, dv, cuda.to_device(bt), cuda.to_device(lens), cuda.to_device(k_new),
                 cuda.to_device(v_new))
    assert np.array_equal(dk.copy_to_host(), want_k)
    assert np.array_equal(dv.copy_to_host(), want_v)


def test_one_plan_runs_over_changing_lengths(rng):
    """plan/run: the grid and workspaces fixed once; the lengths change on the device
    only (as between replays of a CUDA graph); items past a length are empty."""
    from numba import cuda
    b, hq, hkv, tq, d, ps, width = 2, 2, 1, 2, 8, 16, 4
    kp, vp = pool(rng, 8, hkv, ps, d)
    bt = shuffled_table(rng, [64, 64], ps, 8, width)
    q = rng.standard_normal((b, hq, tq, d)).astype(np.float32)
    plan = paged.paged_decode_plan(b, hq, hkv, d, ps, width, tq=tq, dtype=np.float32,
                                   causal=True, target_items=4)
    dq, dk, dv, dbt = (cuda.to_device(x) for x in (q, kp, vp, bt))
    dlens = cuda.to_device(np.zeros(b, np.int32))
    out = (cuda.device_array((b, hq, tq, d), np.float32), cuda.device_array((b, hq, tq),
                                                                            np.float32))
    grids = set()
    for lens in ([64, 1], [5, 40], [33, 64]):
        lens = np.array(lens, np.int32)
        dlens.copy_to_device(lens)
        paged.run(plan, dq, dk, dv, dbt, dlens, out)
        grids.add(plan.grid)
        check_against_reference(q, kp, vp, bt, lens, out[0].copy_to_host(),
                                out[1].copy_to_host(), True)
    assert grids == {(hkv, 1, 4 + b)}


def test_device_inputs_and_check(rng):
    from numba import cuda
    q, kp, vp, bt, lens = good_inputs(rng)
    o, lse = paged_decode(cuda.to_device(q), cuda.to_device(kp), cuda.to_device(vp),
                          cuda.to_device(bt), cuda.to_device(lens), check=True)
    check_against_reference(q, kp, vp, bt, lens, o.copy_to_host(), lse.copy_to_host(),
                            False)
    bad = bt.copy()
    bad[1, 1] = 99
    with pytest.raises(ValueError, match="not a page of the pool"):
        paged_decode(cuda.to_device(q), cuda.to_device(kp), cuda.to_device(vp),
                     cuda.to_device(bad), cuda.to_device(lens), check=True)


def test_benchmark_refuses_without_gpu_and_smoke_runs():
    script = ROOT / "benchmarks" / "gpu_paged.py"
    r = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                       text=True, cwd=ROOT, timeout=120)
    assert r.returncode != 0 and "GPU" in (r.stderr + r.stdout)
    r = subprocess.run([sys.executable, str(script), "--simulator-smoke"],
                       capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "check:" in r.stdout and "FAILED" not in r.stdout


def test_contiguous_tensor_core_decode_after_the_shared_body(rng):
    """The contiguous tensor-core split kernel through `split_tc_body`: several KV heads and
    a last tile past Tk (a parameter once shadowed by a loop variable broke exactly this:
    every tile after the first of heads h > 0)."""
    from flashcourse import reference
    q, k, v = (rng.standard_normal((1, hkv, t, 16)).astype(np.float16)
               for hkv, t in ((3, 1), (3, 45), (3, 45)))
    o, lse = cuda_decode(q, k, v, kernel="tensor_core", num_splits=1)
    o_ref, lse_ref = reference.attention(q, k, v)
    assert rel_err(lse, lse_ref) <= 1e-5 and rel_err(o, o_ref) <= 2e-2


@pytest.mark.parametrize("options", [dict(unroll=2, warps=2), dict(unroll=4, warps=1)])
def test_a_step_across_several_pages(rng, options):
    """A step of the CUDA-core kernel (unroll x warps x keys per warp keys) larger than a
    page: its keys' pages, read from the block table one step ahead of their loads, come
    from several pages of a shuffled table (and the last step's from past the item)."""
    hq, hkv, d, ps = 2, 1, 8, 16
    lens = np.array([83, 16, 50], np.int32)
    width = pc.pages_for(int(lens.max()), ps) + 1
    num_pages = sum(pc.pages_for(n, ps) for n in lens.tolist()) + 2
    kp, vp = pool(rng, num_pages, hkv, ps, d, np.float32)
    bt = shuffled_table(rng, lens, ps, num_pages, width)
    q = rng.standard_normal((lens.size, hq, 1, d)).astype(np.float32)
    o, lse = paged_decode(q, kp, vp, bt, lens, target_items=2, kernel="cuda_cores",
                          **options)
    check_against_reference(q, kp, vp, bt, lens, o, lse, False)
