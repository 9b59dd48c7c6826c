"""Bad input to the library's public functions (review round 19 c).

Each row is one input a learner could pass that gave a NaN, a row that looks masked, a
silent broadcast, a hang, or a traceback from deep inside numpy (ZeroDivisionError,
AttributeError, IndexError, numpy's AxisError or "negative dimensions"): each is now a
TypeError or ValueError (MemoryError for a copy too large) whose message names the
argument. Ids are the findings of REVIEW_2026-12-07_round19_c.md.
"""

import numpy as np
import pytest

from flashcourse import configs, decode, fa2_work, geometry, kv_cache, limits, paged_cache
from flashcourse import printing, reference
from flashcourse.distributed import designs, merge, shards
from flashcourse.fp8 import attention as fp8_attention
from flashcourse.fp8 import codes, kv, scaling
from flashcourse.variants import block_mask, cost, library
from flashcourse.variants import reference as variants_reference
from flashcourse.widgets import paged_pool, readouts

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((1, 2, 1, 4))
K = RNG.standard_normal((1, 2, 8, 4))
O = RNG.standard_normal((1, 2, 1, 4))
L = RNG.standard_normal((1, 2, 1))
NAN_L = np.where(np.arange(2)[None, :, None] == 0, np.nan, L)
PARTS_O = np.stack([O, O])
PARTS_L = np.stack([L, L])


def _cache():
    c = paged_cache.PagedKVCache(4, 2, 16, 4, 2, 2, dtype=np.float32)
    c.append(0, K[0].astype(np.float32), K[0].astype(np.float32))
    return c


CACHE = _cache()

ROWS = [
    # M1 decode.merge: a broadcast of heads, an lse of another shape, NaN lse -> masked row
    ("M1", lambda: decode.merge(O, L, O[:, :1], L[:, :1]), ValueError, "o_b must have the shape"),
    ("M1", lambda: decode.merge(O, L.reshape(-1), O, L), ValueError, "lse_a must have shape"),
    ("M1", lambda: decode.merge(O, NAN_L, O, L), ValueError, "lse_a contains NaN"),
    ("M1", lambda: decode.merge(O, L, O + 1j, L), TypeError, "o_b must hold real numbers"),
    ("M1", lambda: decode.merge(None, L, O, L), TypeError, "o_a must hold real numbers"),
    ("M1", lambda: decode.combine(PARTS_O, np.stack([NAN_L, L])), ValueError,
     "lse_parts contains NaN"),
    ("M1", lambda: decode.combine(PARTS_O * np.inf, PARTS_L), ValueError,
     "o_parts contains NaN or inf"),
    # M2 decode.merge_tree: no shape check (a (16,) o_parts and a (4,) lse accepted)
    ("M2", lambda: decode.merge_tree(np.ones(16), np.ones(4)), ValueError, "o_parts must have"),
    ("M2", lambda: decode.merge_tree(PARTS_O, PARTS_L[:, :, :1]), ValueError,
     "lse_parts must have shape"),
    ("M2", lambda: decode.merge_tree(PARTS_O, PARTS_L, merge_fn=3), TypeError, "merge_fn"),
    # M3 decode.expand_kv: numpy's AxisError / OverflowError
    ("M3", lambda: decode.expand_kv(np.ones(8), 2), ValueError, "x must have"),
    ("M3", lambda: decode.expand_kv(None, 2), TypeError, "x must be a numpy array"),
    ("M3", lambda: decode.expand_kv(K, 10 ** 30), MemoryError, "group"),
    # M4 decode.split_partial: AttributeError, numpy einsum, zero-size reduction
    ("M4", lambda: decode.split_partial(Q, K[..., :3], K[..., :3], 0, 4), ValueError,
     "head dim"),
    ("M4", lambda: decode.split_partial(Q, K, K, -1, 4), ValueError, "k0 must be"),
    ("M4", lambda: decode.split_partial(Q, K, K, 0, 10 ** 30), ValueError, "k1 must be"),
    ("M4", lambda: decode.split_partial(Q, K, K, 0, 4, block_k=0), ValueError, "block_k"),
    ("M4", lambda: decode.split_partial([1], K, K, 0, 4), TypeError, "q must be"),
    # M5 reference.online_update / merge_states / softmax_jacobian
    ("M5", lambda: reference.online_update(reference.EMPTY_STATE, float("nan")), ValueError,
     "x must not be NaN"),
    ("M5", lambda: reference.online_update(reference.SoftmaxState(1.0, 1.0), np.inf),
     ValueError, "x must not be NaN or \\+inf"),
    ("M5", lambda: reference.online_update(None, 1.0), TypeError, "state must be"),
    ("M5", lambda: reference.online_update(reference.EMPTY_STATE, "1"), TypeError,
     "x must be a real number"),
    ("M5", lambda: reference.merge_states(None, reference.EMPTY_STATE), TypeError,
     "a must be a SoftmaxState"),
    ("M5", lambda: reference.merge_states(reference.SoftmaxState(0.0, -1.0),
                                          reference.EMPTY_STATE), ValueError, "a.l must"),
    ("M5", lambda: reference.softmax_jacobian(np.array([0.5, np.nan])), ValueError, "p_row"),
    ("M5", lambda: reference.softmax_jacobian(np.array([0.5j, 0.5])), TypeError, "p_row"),
    # M6 geometry helpers: ZeroDivisionError, a hang, numpy's dimension errors, NaN
    ("M6", lambda: geometry.ceil_div(7, 0), ValueError, "b must be a positive integer"),
    ("M6", lambda: geometry.ceil_div(float("nan"), 2), TypeError, "a must be an integer"),
    ("M6", lambda: geometry.floor_sum(4, float("nan"), 1, 0), TypeError, "m must be"),
    ("M6", lambda: geometry.floor_sum(4, 3, float("nan"), 0), TypeError, "a must be"),
    ("M6", lambda: geometry.causal_block_sums(8, 8, 0, 4, True), ValueError, "block_q"),
    ("M6", lambda: geometry.causal_offset(float("nan"), 8), TypeError, "t_query"),
    ("M6", lambda: geometry.visible_mask(-1, 8, True), ValueError, "t_query"),
    ("M6", lambda: geometry.visible_mask(8, 8, True, q0=2.5), TypeError, "q0"),
    ("M6", lambda: geometry.tile_visibility(0, 4, 0, 4, 8, None, True), TypeError, "t_key"),
    ("M6", lambda: geometry.tile_visibility(0, 4, 0, 4, 8, 8, "yes"), TypeError, "causal"),
    # M7 gpu / model arguments: AttributeError
    ("M7", lambda: fa2_work.tile_time_s(64, 64, 64, gpu=None), TypeError, "gpu must be"),
    ("M7", lambda: fa2_work.exp_share_of_matmul(64, 3), TypeError, "gpu must be"),
    ("M7", lambda: fa2_work.recompute_vs_read_s(64, 64, 64, None), TypeError, "gpu must be"),
    ("M7", lambda: kv_cache.kv_cache_readout(model=None), TypeError, "model must be"),
    ("M7", lambda: kv_cache.kv_cache_readout(gpu=3), TypeError, "gpu must be"),
    ("M7", lambda: limits.occupancy(128, 1000, 3), TypeError, "limits must be"),
    ("M7", lambda: limits.check_launch(128, "64", "H200"), TypeError, "shared_bytes"),
    # M8 distributed: ZeroDivisionError, NaN, AttributeError, deep numpy TypeErrors
    ("M8", lambda: designs.kv_heads_per_rank(8, 0), ValueError, "world"),
    ("M8", lambda: shards.ring_source(0, 1, 0), ValueError, "world"),
    ("M8", lambda: shards.ring_source(float("nan"), 1, 2), TypeError, "rank"),
    ("M8", lambda: shards.ring_source(3, 1, 2), ValueError, "rank must be below world"),
    ("M8", lambda: shards.step_pairs(0, 0, 0), ValueError, "world"),
    ("M8", lambda: shards.pair_kind("1", 0), TypeError, "q_chunk"),
    ("M8", lambda: shards.shard(None, [(0, 4)]), TypeError, "x must be"),
    ("M8", lambda: shards.shard(K, [(0, 4)], axis=5), ValueError, "axis must be"),
    ("M8", lambda: merge.merge_sigmoid(O, NAN_L, O, L), ValueError, "lse_a contains NaN"),
    ("M8", lambda: merge.merge_sigmoid(O, L.astype(complex), O, L), TypeError, "lse_a"),
    ("M8", lambda: merge.merge_sigmoid([1.0], L, O, L), TypeError, "o_a must be"),
    ("m1", lambda: merge.merge_sigmoid(O, L[:, :, :0], O, L), ValueError,
     "lse_a must have the shape o_a.shape"),
    # M9 printing: negative amounts read as 'none', NaN as 'nanx', textwrap's errors, hang
    ("M9", lambda: printing.compare(-1.0, 2.0), ValueError, "ours must be"),
    ("M9", lambda: printing.compare(1.0, float("nan")), ValueError, "theirs must be"),
    ("M9", lambda: printing.compare(1.0, 2.0, digits=-1), ValueError, "digits"),
    ("M9", lambda: printing.wrap_lines("x " * 80, width=0), ValueError, "width"),
    ("M9", lambda: printing.wrap_lines("x " * 80, width=float("nan")), TypeError, "width"),
    ("M9", lambda: printing.say("a", "b", sep=None), TypeError, "sep"),
    # M10 variants: a hang, numpy's seed and dimension errors, AttributeError
    ("M10", lambda: library.alibi_slopes(10 ** 30), ValueError, "num_heads"),
    ("M10", lambda: library.random_block_sparse(8, 8, 4, 4, seed=-1), ValueError, "seed"),
    ("M10", lambda: library.random_block_sparse(8, 8, 4, 4, seed=2.5), TypeError, "seed"),
    ("M10", lambda: library.random_block_sparse(10 ** 30, 8, 4, 4), ValueError, "t_query"),
    ("M10", lambda: block_mask.create_block_mask(None, None, None, 8, 8, 4, 4), TypeError,
     "mask_mod must be"),
    ("M10", lambda: block_mask.full_block_mask(10 ** 30, 8, 4, 4), ValueError, "t_query"),
    ("M10", lambda: block_mask.full_block_mask(8, 8, 0, 4), ValueError, "block_q"),
    ("M10", lambda: cost.tile_cost(block_mask.full_block_mask(8, 8, 4, 4), 10 ** 30),
     ValueError, "head_dim"),
    ("M10", lambda: variants_reference.reference_backward(
        K, K, K, np.full(K.shape, np.nan)), ValueError, "do contains NaN"),
    # M11 configs: NaN head_dim passed through kernel_plan
    ("M11", lambda: configs.kernel_plan(64, 64, 128, 2, float("nan")), TypeError, "head_dim"),
    ("M11", lambda: configs.valid_tms(64, 64, 128, 0), ValueError, "head_dim"),
    ("M11", lambda: configs.square_tm(64, 64, "128", 64), TypeError, "threads"),
    # M12 readouts and pools: numpy's seed and dimension errors, ZeroDivisionError
    ("M12", lambda: readouts.schedule_steps(16, 16, 8, 8, 8, seed=-1), ValueError, "seed"),
    ("M12", lambda: readouts.schedule_steps(16, 16, 10 ** 30, 8, 8), ValueError, "d "),
    ("M12", lambda: paged_pool.fill_pool([10, 20], 0, 64, 0, 16), ValueError, "page_size"),
    ("M12", lambda: paged_cache.PagedKVCache(4, 2, 16, 4, 2, 10 ** 30), ValueError,
     "max_pages_per_seq"),
    ("M12", lambda: paged_cache.PagedKVCache(4, 2, 16, 4, 2, 2, dtype="int8"), TypeError,
     "dtype"),
    ("M12", lambda: paged_cache.pages_for(10, 0), ValueError, "page_size"),
    ("M12", lambda: paged_cache.pages_for(float("nan"), 16), TypeError, "seq_len"),
    # M13 paged_cache.gather / page_map / slot_usage: IndexError, AttributeError, numpy
    ("M13", lambda: paged_cache.gather(None, CACHE.block_table, 0, 8), ValueError, "pages"),
    ("M13", lambda: paged_cache.gather(CACHE.k_pages, CACHE.block_table, 2.5, 8), TypeError,
     "b must be"),
    ("M13", lambda: paged_cache.gather(CACHE.k_pages, CACHE.block_table, 5, 8), ValueError,
     "b must be a row"),
    ("M13", lambda: paged_cache.gather(CACHE.k_pages, CACHE.block_table, 0, 10 ** 30),
     ValueError, "seq_len"),
    ("M13", lambda: paged_cache.gather(CACHE.k_pages, CACHE.block_table.astype(float), 0, 8),
     TypeError, "block_table"),
    ("M13", lambda: paged_cache.page_map(CACHE.block_table, CACHE.seq_lens, 16, 0),
     ValueError, "num_pages"),
    ("M13", lambda: paged_cache.page_map(CACHE.block_table[0], CACHE.seq_lens, 16, 4),
     TypeError, "block_table"),
    ("M13", lambda: paged_cache.slot_usage(CACHE.block_table, CACHE.seq_lens, 16, 4, -1),
     ValueError, "max_len"),
    # M14 fp8: NaN out of bytes_per_token, expand, dequantize_cache, rmse, quantize_p
    ("M14", lambda: kv.bytes_per_token(float("nan"), 2), TypeError, "d must be"),
    ("M14", lambda: kv.bytes_per_token(64, 2, tokens=0), ValueError, "tokens"),
    ("M14", lambda: scaling.expand(np.ones((1, 2)), -1, 8), ValueError, "tokens"),
    ("M14", lambda: scaling.expand(np.full((1, 2), np.nan), 4, 8), ValueError, "scale"),
    ("M14", lambda: scaling.expand(np.ones((1, 1)), 4, 8), ValueError, "cover t"),
    ("M14", lambda: kv.dequantize_cache(np.zeros(4, np.uint8), np.ones(1)), ValueError,
     "codes must have shape"),
    ("M14", lambda: kv.dequantize_cache(np.zeros((2, 4), np.uint8), np.array(np.nan)),
     ValueError, "scale"),
    ("M14", lambda: fp8_attention.rmse(np.array([np.nan]), np.array([1.0])), ValueError,
     "o must be"),
    ("M14", lambda: fp8_attention.quantize_p(np.array([np.nan])), ValueError, "p_tilde"),
    ("M14", lambda: fp8_attention.forward_dequantized(K, K, K, p_log2_offset=float("nan")),
     TypeError, "p_log2_offset"),
]


@pytest.mark.parametrize("finding,call,exc,words", ROWS,
                         ids=[f"{r[0]}-{i}" for i, r in enumerate(ROWS)])
def test_bad_input_is_an_error_naming_the_argument(finding, call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_the_checks_keep_valid_input_working():
    """The rows above refuse only what is wrong: the valid neighbours still work."""
    o, lse = decode.merge(O, L, O, np.full_like(L, -np.inf))       # an empty state
    assert np.allclose(o, O) and np.allclose(lse, L)
    o2, lse2, levels = decode.merge_tree(PARTS_O, PARTS_L)
    assert len(levels) == 2 and np.allclose(lse2, L + np.log(2))
    assert decode.expand_kv(K, 2).shape == (1, 4, 8, 4)
    assert geometry.ceil_div(-7, 2) == -3 and geometry.floor_sum(5, 3, -2, -1) == sum(
        (-2 * i - 1) // 3 for i in range(5))
    assert reference.online_update((0.0, 1.0), -np.inf) == (0.0, 1.0)
    assert printing.compare(0, 0) == "the same" and printing.compare(0, 2) == "none (less)"
    assert shards.ring_source(0, 1, 2) == 1 and designs.kv_heads_per_rank(2, 4) == 1
    assert paged_cache.pages_for(np.array([0, 17]), 16).tolist() == [0, 2]
    assert paged_cache.gather(CACHE.k_pages, CACHE.block_table, 0, 8).shape == (2, 8, 4)
    assert kv.bytes_per_token(64, 2, 16) == 2 * 2 * 64 + 2 * 2 * 4 / 16
    assert np.isnan(codes.value_table("e4m3")[0x7F])              # as the docstring says
    assert limits.occupancy(128, 1000, "H200").blocks_per_sm >= 1
