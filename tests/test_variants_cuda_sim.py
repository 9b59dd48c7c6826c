"""flashcourse.cuda.cuda_core.variants on the simulator (or a GPU): the variants forward against
the float64 reference, float32 within 1e-5 (helpers.TOL), tiny ragged shapes."""

import numpy as np
import pytest

from flashcourse.cuda.cuda_core import variants as cuda_variants
from flashcourse.variants import library as lib, reference as ref
from flashcourse.variants.block_mask import create_block_mask
from helpers import assert_close_to_reference, assert_kernels_cached_by_contents

TQ, TK = 11, 14


@pytest.mark.parametrize("case", ["none", "causal-softcap-sinks", "document-gqa",
                                  "window-alibi-empty-rows"])
def test_cuda_variants_forward_matches_the_reference(case):
    rng = np.random.default_rng(5)
    hkv = 1 if case == "document-gqa" else 2
    tq = 17 if case == "window-alibi-empty-rows" else TQ
    q = rng.standard_normal((1, 2, tq, 5)).astype(np.float32)
    k = rng.standard_normal((1, hkv, TK, 5)).astype(np.float32)
    v = rng.standard_normal((1, hkv, TK, 5)).astype(np.float32)
    mask_mod = score_mod = sinks = None
    if case == "causal-softcap-sinks":
        mask_mod, score_mod, sinks = lib.causal(tq, TK), lib.softcap(1.5), np.array([0.3, -1.0])
    elif case == "document-gqa":
        mask_mod = lib.document([0, 4, 11], [0, 6, 14])
    elif case == "window-alibi-empty-rows":               # Tq > Tk: the first rows see nothing
        mask_mod, score_mod = lib.sliding_window(3, tq, TK), lib.alibi(lib.alibi_slopes(2))
    bm = None if mask_mod is None else create_block_mask(mask_mod, None, None, tq, TK, 4, 8)
    o, lse = cuda_variants.forward(q, k, v, block_mask=bm, score_mod=score_mod, sinks=sinks,
                                   block_q=None if bm else 4, block_k=None if bm else 8)
    o_ref, lse_ref = ref.reference(q, k, v, mask_mod=mask_mod, score_mod=score_mod,
                                   sinks=sinks)
    assert o.dtype == np.float32 and lse.shape == (1, 2, tq)
    assert_close_to_reference(o, lse, o_ref, lse_ref, np.float32)


def test_cuda_variants_kernels_are_cached_by_contents():
    """Keyed (mask fingerprint, score fingerprint)."""
    assert_kernels_cached_by_contents(cuda_variants.forward, cuda_variants._KERNELS, 0, d=3,
                                      block=4)


def test_cuda_variants_refuses_a_large_head_dim():
    q = np.zeros((1, 1, 2, 257), np.float32)
    with pytest.raises(ValueError, match="head dim d must be at most 256"):
        cuda_variants.forward(q, q, q)
