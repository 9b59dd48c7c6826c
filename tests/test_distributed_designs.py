"""flashcourse.distributed.designs (bytes sent and held per rank) and demo (the designs run
on local gloo processes, reassembled)."""

import importlib.util

import numpy as np
import pytest

from flashcourse import reference
from flashcourse.distributed import designs as D

SHAPE = dict(heads=32, kv_heads=8, d=128, element_bytes=2)


def test_ring_and_allgather_send_all_other_kv_once():
    n, w = 131_072, 8
    kv_bytes = 2 * n * 8 * 128 * 2                            # all of K and V
    for design in ("ring", "allgather"):
        assert D.comm_bytes_per_rank(design, n, w, **SHAPE) == kv_bytes * (w - 1) / w


def test_ulysses_counts_its_two_all_to_alls_by_hand():
    # 4 ranks, H = H_kv = 4: each rank holds n/4 rows of 4 heads; it sends 3 of its 4 heads'
    # rows for Q, K, V and (back) for O: 4 tensors x 3/4 x (n/4) x 4 heads x d x e
    n, d, e = 1000, 64, 4
    got = D.comm_bytes_per_rank("ulysses", n, 4, heads=4, kv_heads=4, d=d, element_bytes=e)
    assert got == 4 * 0.75 * (n / 4) * 4 * d * e


def test_ulysses_limits_and_gqa_copies():
    with pytest.raises(ValueError, match="divide heads"):
        D.comm_bytes_per_rank("ulysses", 1024, 64, **SHAPE)          # 64 ranks > 32 heads
    assert D.kv_heads_per_rank(8, 16) == 1                             # a KV head copied
    assert D.kv_heads_per_rank(8, 4) == 2
    with pytest.raises(ValueError):
        D.kv_heads_per_rank(6, 4)
    with pytest.raises(ValueError, match="design"):
        D.held_bytes_per_rank("tree", 1024, 4, **SHAPE)


def test_held_bytes_order():
    """The all-gather holds all of K and V; the ring two blocks; Ulysses a head shard."""
    n, w = 131_072, 8
    held = {x: D.held_bytes_per_rank(x, n, w, **SHAPE) for x in D.DESIGNS}
    assert held["allgather"] > held["ring"] > held["ulysses"]
    assert held["allgather"] >= 2 * n * 8 * 128 * 2


def _has(module):
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.slow                 # spawns two processes that import torch: about 20 s
@pytest.mark.xdist_group("gloo")
@pytest.mark.skipif(not (_has("torch") and _has("flashcourse.distributed.ring")),
                    reason="needs PyTorch and flashcourse.distributed's ring")
def test_demo_runs_every_design_on_two_processes():
    from flashcourse.distributed.demo import run_designs
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 2, 13, 8)) for _ in range(3))
    o_ref, lse_ref = reference.attention(q, k, v, causal=True)
    results = run_designs(D.DESIGNS, q, k, v, world=2, causal=True, layout="zigzag")
    for design, (o, lse) in results.items():
        np.testing.assert_allclose(o, o_ref, atol=1e-9, err_msg=design)
        np.testing.assert_allclose(lse, lse_ref, atol=1e-9, err_msg=design)


def test_demo_refuses_an_unknown_design():
    from flashcourse.distributed.demo import run_designs
    with pytest.raises(ValueError, match="design"):
        run_designs(["tree"], np.zeros((1, 1, 4, 2)), np.zeros((1, 1, 4, 2)),
                    np.zeros((1, 1, 4, 2)))


def test_notebook_16_ulysses_row_and_memory_claims_match_the_model():
    """Notebook 16's table writes Ulysses with h_kv (one whole K/V head once w > H_kv), as
    `designs` counts it and as its printed w = 32 column shows; and it does not say Ulysses
    holds the least there, where the ring's two blocks are smaller."""
    import json
    from pathlib import Path
    nb = json.loads((Path(__file__).resolve().parents[1] / "notebooks"
                     / "16_context_parallelism.ipynb").read_text())
    text = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    n = 131_072
    for w in (4, 8, 32):
        h_kv = max(SHAPE["kv_heads"] // w, 1)
        rows, de = n / w, SHAPE["d"] * SHAPE["element_bytes"]
        assert D.comm_bytes_per_rank("ulysses", n, w, **SHAPE) == (
            (w - 1) * rows * de * (2 * SHAPE["heads"] / w + 2 * h_kv))
        assert D.held_bytes_per_rank("ulysses", n, w, **SHAPE) == (
            n * de * (SHAPE["heads"] / w + 2 * h_kv))
    assert "2 h_{kv}" in text and "\\frac{2 H_{kv}}{w}\\right)$ (Q, K, V in" not in text
    ring, uly = (D.held_bytes_per_rank(x, n, 32, **SHAPE) / 1e6 for x in ("ring", "ulysses"))
    assert ring < uly and f"({uly:.0f} MB)" in text and f"({ring:.0f} MB)" in text
    assert "Ulysses holds the least, but" not in text


def test_sizes_may_be_numpy_integers():
    """n from a numpy computation (np.int64) is an int like any other."""
    got = D.comm_bytes_per_rank("ring", np.int64(131_072), np.int64(8), **SHAPE)
    assert got == D.comm_bytes_per_rank("ring", 131_072, 8, **SHAPE)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        D.comm_bytes_per_rank("ring", 1.5, 8, **SHAPE)
