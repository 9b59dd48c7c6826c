"""flashcourse.distributed (issue 55): context parallelism.

The numpy parts (shards, the merge, the time model) are tested here without PyTorch; the
multi-process tests (ring, all-gather, Ulysses on gloo) skip without it.
"""

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from flashcourse import decode, reference
from flashcourse.distributed import model, shards
from flashcourse.distributed.merge import merge_sigmoid


# ---------------------------------------------------------------------------
# shards (numpy only)
# ---------------------------------------------------------------------------

LAYOUT_NAMES = st.sampled_from(["zigzag", "contiguous"])


@given(world=st.integers(1, 8), extra=st.integers(0, 60), layout=LAYOUT_NAMES)
def test_every_position_is_on_exactly_one_rank(world, extra, layout):
    n = shards.LAYOUTS[layout] * world + extra
    layout_ranges = shards.layout_shards(n, world, layout)
    assert len(layout_ranges) == world
    idx = np.concatenate([shards.rank_indices(r) for r in layout_ranges])
    assert np.array_equal(np.sort(idx), np.arange(n))
    sizes = [b - a for r in layout_ranges for a, b in r]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


@given(world=st.integers(1, 6), extra=st.integers(0, 40))
def test_shard_then_unshard_is_the_identity(world, extra):
    n = 2 * world + extra
    x = np.arange(3 * n * 2, dtype=np.float64).reshape(3, n, 2)
    layout = shards.zigzag_shards(n, world)
    parts = [shards.shard(x, r) for r in layout]
    assert [p.shape[1] for p in parts] == [len(shards.rank_indices(r)) for r in layout]
    assert np.array_equal(parts[0], x[:, shards.rank_indices(layout[0])])
    assert np.array_equal(shards.unshard(parts, layout), x)


def test_zigzag_holds_chunk_r_and_its_mirror():
    assert shards.zigzag_shards(37, 2) == [[(0, 10), (28, 37)], [(10, 19), (19, 28)]]
    assert shards.contiguous_shards(37, 2) == [[(0, 19)], [(19, 37)]]


def _brute_pairs(n, world, layout):
    ranks = [shards.rank_indices(r) for r in shards.layout_shards(n, world, layout)]
    out = np.zeros((world, world), dtype=np.int64)
    for r in range(world):
        for s in range(world):
            kv = ranks[shards.ring_source(r, s, world)]
            out[r, s] = int((kv[None, :] <= ranks[r][:, None]).sum())
    return out


@given(world=st.integers(1, 6), extra=st.integers(0, 50), layout=LAYOUT_NAMES)
def test_causal_pairs_counts_the_visible_pairs(world, extra, layout):
    n = 2 * world + extra
    pairs = shards.causal_pairs(n, world, layout)
    assert np.array_equal(pairs, _brute_pairs(n, world, layout))
    assert pairs.sum() == n * (n + 1) // 2                         # the whole causal triangle
    assert shards.causal_pairs(n, world, layout, causal=False).sum() == n * n


@given(world=st.integers(1, 6), extra=st.integers(0, 50), layout=LAYOUT_NAMES)
def test_step_pairs_add_up_to_causal_pairs(world, extra, layout):
    n = 2 * world + extra
    size = dict(enumerate(b - a for a, b in shards.chunk_bounds(n, shards.LAYOUTS[layout]
                                                                 * world)))
    work = {"full": lambda q, k: size[q] * size[k],
            "diagonal": lambda q, k: size[q] * (size[q] + 1) // 2, "hidden": lambda q, k: 0}
    pairs = shards.causal_pairs(n, world, layout)
    for r in range(world):
        for s in range(world):
            steps = shards.step_pairs(r, s, world, layout)
            assert sum(work[kind](q, k) for q, k, kind in steps) == pairs[r, s]
    assert all(kind == "full" for *_, kind in shards.step_pairs(0, 0, world, layout,
                                                               causal=False))


def test_step_pairs_of_zigzag_rank_0():
    assert shards.step_pairs(0, 0, 2) == [(0, 0, "diagonal"), (0, 3, "hidden"),
                                          (3, 0, "full"), (3, 3, "diagonal")]
    # step 1: the block of rank 1 (chunks 1, 2): rank 0's late chunk sees all of it
    assert shards.step_pairs(0, 1, 2) == [(0, 1, "hidden"), (0, 2, "hidden"),
                                          (3, 1, "full"), (3, 2, "full")]


@given(world=st.integers(2, 8), extra=st.integers(0, 200))
def test_zigzag_balances_causal_work_within_one_chunk(world, extra):
    n = 2 * world + extra
    chunk = -(-n // (2 * world))                                   # the longest chunk
    work = shards.causal_pairs(n, world, "zigzag").sum(axis=1)
    # one chunk's worth: the pairs of one chunk row against the sequence
    assert work.max() - work.min() <= chunk * chunk + 2 * chunk * world, work
    contiguous = shards.causal_pairs(n, world, "contiguous").sum(axis=1)
    assert work.max() <= contiguous.max()


def test_zigzag_is_far_better_balanced_than_contiguous():
    zz = shards.causal_pairs(4096, 4, "zigzag").sum(axis=1)
    cont = shards.causal_pairs(4096, 4, "contiguous").sum(axis=1)
    assert zz.max() / zz.min() < 1.01
    assert cont.max() / cont.min() > 6


@pytest.mark.parametrize("call, match", [
    (lambda: shards.zigzag_shards(7, 4), "n .*at least"),
    (lambda: shards.contiguous_shards(10, 0), "world must be >= 1"),
    (lambda: shards.layout_shards(10, 2, "ring"), "layout must be one of"),
    (lambda: shards.chunk_bounds(2.5, 2), "n must be an int"),
    (lambda: shards.shard(np.zeros((4, 10, 2)), [(0, 20)]), "ranges must lie within the 10"),
    (lambda: model.min_hidden_shard(element_bytes=0), "element_bytes must be a positive"),
    (lambda: model.min_hidden_shard(link_bytes_per_s=-1.0), "link_bytes_per_s must be"),
])
def test_shards_reject_bad_input(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# ---------------------------------------------------------------------------
# merge (numpy; torch below)
# ---------------------------------------------------------------------------

def _split_states(rng, tq, tk, d, split, causal):
    q, k, v = (rng.standard_normal((2, t, d)) for t in (tq, tk, tk))
    o, lse = reference.attention(q, k, v, causal=causal)
    mask = np.zeros((tq, tk), dtype=bool)
    mask[:, :split] = True
    if causal:
        mask &= np.arange(tk)[None, :] <= np.arange(tq)[:, None] + tk - tq
    parts = []
    for m in (mask, ~mask & (np.arange(tk)[None, :] <= np.arange(tq)[:, None] + tk - tq
                             if causal else ~mask)):
        o_p, lse_p = reference.attention_with_mask(q, k, v, m, scale=1 / np.sqrt(d))
        parts.append((o_p, lse_p))
    return (o, lse), parts


@given(tk=st.integers(2, 30), tq=st.integers(1, 30), d=st.integers(1, 7),
       frac=st.floats(0, 1), causal=st.booleans(), seed=st.integers(0, 2**31))
def test_merge_sigmoid_equals_attention_over_the_union(tk, tq, d, frac, causal, seed):
    rng = np.random.default_rng(seed)
    split = int(round(frac * tk))
    (o, lse), ((o_a, lse_a), (o_b, lse_b)) = _split_states(rng, tq, tk, d, split, causal)
    for got_o, got_lse in (merge_sigmoid(o_a, lse_a, o_b, lse_b),
                           merge_sigmoid(o_b, lse_b, o_a, lse_a)):
        assert np.all(np.isfinite(got_o))
        np.testing.assert_allclose(got_o, o, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(got_lse, lse, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(merge_sigmoid(o_a, lse_a, o_b, lse_b)[0],
                               decode.merge(o_a, lse_a, o_b, lse_b)[0], rtol=1e-12, atol=1e-13)


def test_merge_sigmoid_empty_rows_take_the_other_state():
    ninf = -np.inf
    o_a = np.array([[0.0, 0.0], [1.0, 2.0], [0.0, 0.0], [1.0, 1.0]])
    lse_a = np.array([ninf, 0.5, ninf, 0.0])
    o_b = np.array([[3.0, 4.0], [0.0, 0.0], [0.0, 0.0], [3.0, 3.0]])
    lse_b = np.array([1.5, ninf, ninf, 0.0])
    with np.errstate(all="raise"):
        o, lse = merge_sigmoid(o_a, lse_a, o_b, lse_b)
    assert np.array_equal(o, [[3, 4], [1, 2], [0, 0], [2, 2]])
    assert np.array_equal(lse, [1.5, 0.5, ninf, np.log(2.0)])


def test_merge_sigmoid_names_the_mismatched_argument():
    with pytest.raises(ValueError, match="o_b"):
        merge_sigmoid(np.zeros((3, 2)), np.zeros(3), np.zeros((4, 2)), np.zeros(3))
    with pytest.raises(ValueError, match="o_a and o_b"):
        merge_sigmoid(np.zeros((3, 2)), np.zeros(3), np.zeros((3, 1)), np.zeros(3))


# ---------------------------------------------------------------------------
# tiled.backward(partial_keys=True): one ring step's share of the gradients
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("causal", [False, True])
def test_tiled_backward_partial_keys_shares_add_up(causal):
    from flashcourse import tiled
    rng = np.random.default_rng(7)
    q, k, v, do = (rng.standard_normal((2, 13, 5)) for _ in range(4))
    o, lse = reference.attention(q, k, v, causal=causal)
    dq, dk, dv = reference.attention_backward(q, k, v, do, causal=causal)
    # the keys cut at 6. Causal, as a ring step does it: queries 6..12 see keys 0..5
    # fully (no mask) and keys 6..12 under the square causal mask
    if causal:
        rows = slice(6, 13)
        parts = [tiled.backward(q[:, rows], k[:, :6], v[:, :6], o[:, rows], lse[:, rows],
                                do[:, rows], block_q=4, block_k=4, partial_keys=True),
                 tiled.backward(q[:, rows], k[:, 6:], v[:, 6:], o[:, rows], lse[:, rows],
                                do[:, rows], block_q=4, block_k=4, causal=True,
                                partial_keys=True)]
        np.testing.assert_allclose(parts[0][0] + parts[1][0], dq[:, rows], rtol=1e-12,
                                   atol=1e-13)
        np.testing.assert_allclose(parts[1][1], dk[:, 6:], rtol=1e-12, atol=1e-13)
        return
    parts = [tiled.backward(q, k[:, a:b], v[:, a:b], o, lse, do, block_q=4, block_k=4,
                            partial_keys=True) for a, b in ((0, 6), (6, 13))]
    np.testing.assert_allclose(parts[0][0] + parts[1][0], dq, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.concatenate([parts[0][1], parts[1][1]], axis=1), dk,
                               rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(np.concatenate([parts[0][2], parts[1][2]], axis=1), dv,
                               rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="lse does not match"):
        tiled.backward(q, k[:, :6], v[:, :6], o, lse, do)       # the default checks


# ---------------------------------------------------------------------------
# the time model
# ---------------------------------------------------------------------------

def test_ring_model_units_and_hiding():
    # non-causal, B H = 1, d = 64, 2-byte elements, 1e12 FLOP/s, 1e9 B/s, 4 ranks of 1000
    r = model.ring_step_times(4000, 64, 4, element_bytes=2, flops_per_s=1e12,
                              link_bytes_per_s=1e9, causal=False, layout="contiguous")
    np.testing.assert_allclose(r["compute_s"], 4 * 1000 * 1000 * 64 / 1e12)   # 256 us
    np.testing.assert_allclose(r["link_s"], [2 * 1000 * 64 * 2 / 1e9] * 3 + [0])  # 256 us
    assert r["hidden"].all()
    assert model.min_hidden_shard(element_bytes=2, flops_per_s=1e12, link_bytes_per_s=1e9) == 1000
    slow = model.ring_step_times(4000, 64, 4, flops_per_s=1e12, link_bytes_per_s=0.5e9,
                                 causal=False)
    assert not slow["hidden"][:3].any() and slow["hidden"][3]
    assert slow["total_s"] < slow["serial_s"]
    np.testing.assert_allclose(slow["total_s"], slow["link_s"].sum() + slow["compute_s"][-1])


def test_ring_model_rejects_bad_units():
    with pytest.raises(ValueError, match="link_bytes_per_s"):
        model.ring_step_times(64, 8, 2, link_bytes_per_s=0)
    with pytest.raises(ValueError, match="d must be"):
        model.ring_step_times(64, 0, 2)


def test_numpy_parts_import_without_torch():
    code = ("import sys; import flashcourse, flashcourse.distributed; "
            "from flashcourse.distributed import shards, model, merge; "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------
# the designs on gloo processes (need PyTorch)
# ---------------------------------------------------------------------------

DESIGNS = ("ring", "gather", "ulysses")
#: (name, (B, H, N, d)): ragged (N not divisible by 2 world, odd d) and a small even one
SHAPES = {"ragged": (1, 4, 37, 5), "batched": (2, 4, 16, 3)}
CASES = [(shape, causal, design, layout) for shape in SHAPES for causal in (False, True)
         for design in DESIGNS for layout in ("zigzag", "contiguous")]


def _problem(name):
    rng = np.random.default_rng(sum(map(ord, name)))
    return tuple(rng.standard_normal(SHAPES[name]) for _ in range(4))     # q, k, v, do


def _designs():
    from flashcourse.distributed import gather, ring, ulysses
    return {"ring": (ring.ring_forward, ring.ring_backward),
            "gather": (gather.gather_forward, gather.gather_backward),
            "ulysses": (ulysses.ulysses_forward, ulysses.ulysses_backward)}


def _local(x, world, rank, layout):
    import torch
    ranges = shards.layout_shards(x.shape[-2], world, layout)[rank]
    return torch.from_numpy(shards.shard(x, ranges)).contiguous()


def _error(call):
    try:
        call()
    except Exception as exc:                       # noqa: BLE001 (the test reads it)
        return type(exc).__name__, str(exc)
    return None


def _bad_inputs(rank, world):
    """The error (type name, message) of each bad call, on this rank."""
    import torch
    from flashcourse.distributed import gather, ring, ulysses
    q, k, v, do = (_local(x, world, rank, "zigzag") for x in _problem("ragged"))
    o, lse = ring.ring_forward(q, k, v, causal=True)
    odd_heads = q[:, :3].contiguous()
    short = q[..., :-3, :].contiguous() if rank == 0 else q     # [16, 18] of 34
    return {
        "ulysses_heads": _error(lambda: ulysses.ulysses_forward(odd_heads, odd_heads, odd_heads)),
        "wrong_shard": _error(lambda: ring.ring_forward(short, short, short)),
        "gather_wrong_shard": _error(lambda: gather.gather_forward(short, short, short)),
        "non_contiguous": _error(lambda: ring.ring_forward(
            q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v)),
        "k_dtype": _error(lambda: ring.ring_forward(q, k.float(), v)),
        "v_shape": _error(lambda: gather.gather_forward(q, k, v[..., :2].contiguous())),
        "layout": _error(lambda: ring.ring_forward(q, k, v, layout="zig")),
        "kernel": _error(lambda: ulysses.ulysses_forward(q, k, v, kernel="cuda")),
        "lse_shape": _error(lambda: ring.ring_backward(q, k, v, o, lse[..., :-1], do)),
        "do_tensor": _error(lambda: ring.ring_backward(q, k, v, o, lse, do.numpy())),
        "q_dims": _error(lambda: ring.ring_forward(q[0], k[0], v[0])),
        "q_int": _error(lambda: ring.ring_forward(q.long(), k.long(), v.long())),
        "not_initialised_ok": torch.distributed.is_initialized(),
    }


class _LoggingKernel:
    """The numpy kernel, logging each call (a plug-in kernel: any object with these)."""

    def __init__(self, log):
        from flashcourse.distributed.kernels import NumpyKernel
        self.inner, self.log = NumpyKernel(), log

    def forward(self, *args, **kw):
        self.log.append("compute")
        return self.inner.forward(*args, **kw)

    def backward(self, *args, **kw):
        self.log.append("compute")
        return self.inner.backward(*args, **kw)


def _event_order(rank, world):
    """The ring's events on this rank: "send" (a ring_pass started), "wait" (its
    handles waited for), "compute" (a kernel call); forward then backward."""
    from flashcourse.distributed import comm, ring
    log = []
    real_pass, real_wait = comm.ring_pass, comm.wait_all

    def logged_pass(*args, **kw):
        log.append("send")
        return real_pass(*args, **kw)

    def logged_wait(handles):
        if handles:
            log.append("wait")
        return real_wait(handles)

    comm.ring_pass, comm.wait_all = logged_pass, logged_wait
    try:
        q, k, v, do = (_local(x, world, rank, "zigzag") for x in _problem("batched"))
        o, lse = ring.ring_forward(q, k, v, kernel=_LoggingKernel(log))
        log.append("|")
        ring.ring_backward(q, k, v, o, lse, do, kernel=_LoggingKernel(log))
    finally:
        comm.ring_pass, comm.wait_all = real_pass, real_wait
    return " ".join(log)


def _autograd_grads(rank, world):
    """q.grad, k.grad, v.grad of sum(o * do) through autograd.attention, per design."""
    from flashcourse.distributed import autograd
    out = {}
    for design in DESIGNS:
        q, k, v, do = (_local(x, world, rank, "zigzag") for x in _problem("ragged"))
        for x in (q, k, v):
            x.requires_grad_(True)
        o = autograd.attention(q, k, v, design=design, causal=True)
        (o * do).sum().backward()
        out[design] = [x.detach().numpy() for x in (o, q.grad, k.grad, v.grad)]
    return out


def _listening_addresses():
    """The local addresses this process listens on (TCP, IPv4 and IPv6), from /proc
    (Linux); None elsewhere."""
    import os
    if not os.path.isdir("/proc/self/fd"):
        return None
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:          # LISTEN, ours
                    hex_addr = cols[1].split(":")[0]
                    raw = bytes.fromhex(hex_addr)
                    if len(raw) == 4:
                        found.append(".".join(str(b) for b in raw[::-1]))
                    else:                                           # 4 little-endian words
                        words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]
                        found.append(b"".join(words).hex())
    return found


def _run_cases(rank, world, cases, kernel_cases):
    """Every case's (o, lse, dq, dk, dv) shard on this rank, and the bad-input errors."""
    designs = _designs()
    out = {}
    for case in cases + kernel_cases:
        shape, causal, design, layout = case[:4]
        kernel = case[4] if len(case) > 4 else "numpy"
        q, k, v, do = (_local(x, world, rank, layout) for x in _problem(shape))
        forward, backward = designs[design]
        o, lse = forward(q, k, v, causal=causal, layout=layout, kernel=kernel)
        grads = backward(q, k, v, o, lse, do, causal=causal, layout=layout, kernel=kernel)
        out[case] = [x.numpy() for x in (o, lse, *grads)]
    for design, (forward, backward) in designs.items():     # float32 in: float32 kernels
        q, k, v, do = (_local(x, world, rank, "zigzag").float() for x in _problem("ragged"))
        o, lse = forward(q, k, v, causal=True)
        grads = backward(q, k, v, o, lse, do, causal=True)
        out[("float32", design)] = [x.numpy() for x in (o, lse, *grads)]
    out["autograd"] = _autograd_grads(rank, world)
    out["bad"] = _bad_inputs(rank, world)
    out["listening"] = _listening_addresses()
    out["order"] = _event_order(rank, world)
    return out


@pytest.fixture(scope="module", params=[2, 4], ids=["world2", "world4"])
def gloo_results(request):
    pytest.importorskip("torch")
    from flashcourse.distributed import launch
    world = request.param
    return world, launch.run(world, _run_cases, CASES, [], timeout_s=240)


def _gathered(results, world, case):
    layout = shards.layout_shards(SHAPES[case[0]][2], world, case[3])
    per_rank = [r[case] for r in results]
    return [shards.unshard([p[i] for p in per_rank], layout, axis=-1 if i == 1 else -2)
            for i in range(5)]


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def _check_case(results, world, case):
    q, k, v, do = _problem(case[0])
    o, lse = reference.attention(q, k, v, causal=case[1])
    want = (o, lse, *reference.attention_backward(q, k, v, do, causal=case[1]))
    got = _gathered(results, world, case)
    for name, g, w in zip(("o", "lse", "dq", "dk", "dv"), got, want):
        assert g.dtype == np.float64 and g.shape == w.shape, name
        assert _rel(g, w) <= 1e-12, f"{name}: relative error {_rel(g, w):.2e}"


@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_designs_match_single_process_attention(gloo_results, case):
    _check_case(gloo_results[1], gloo_results[0], case)


@pytest.mark.slow          # each process compiles (or loads) the Numba kernel: 12-36 s measured
@pytest.mark.xdist_group("gloo")
def test_ring_with_the_numba_kernel():
    pytest.importorskip("torch")
    from flashcourse.distributed import launch
    case = ("ragged", True, "ring", "zigzag", "numba")
    results = launch.run(2, _run_cases, [], [case], timeout_s=300)
    _check_case(results, 2, case)


@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("design", DESIGNS)
def test_designs_run_in_float32(gloo_results, design):
    world, results = gloo_results
    q, k, v, do = (x.astype(np.float32) for x in _problem("ragged"))
    o, lse = reference.attention(q, k, v, causal=True)
    want = (o, lse, *reference.attention_backward(q, k, v, do, causal=True))
    layout = shards.zigzag_shards(37, world)
    for i, (name, w) in enumerate(zip(("o", "lse", "dq", "dk", "dv"), want)):
        parts = [r[("float32", design)][i] for r in results]
        assert parts[0].dtype == np.float32, name
        g = shards.unshard(parts, layout, axis=-1 if i == 1 else -2)
        assert _rel(g, w) <= 1e-5, f"{name}: relative error {_rel(g, w):.2e}"


@pytest.mark.xdist_group("gloo")
@pytest.mark.parametrize("design", DESIGNS)
def test_autograd_attention_gives_the_gradients(gloo_results, design):
    world, results = gloo_results
    q, k, v, do = _problem("ragged")
    want = (reference.attention(q, k, v, causal=True)[0],
            *reference.attention_backward(q, k, v, do, causal=True))
    layout = shards.zigzag_shards(37, world)
    for i, (name, w) in enumerate(zip(("o", "dq", "dk", "dv"), want)):
        g = shards.unshard([r["autograd"][design][i] for r in results], layout)
        assert _rel(g, w) <= 1e-12, f"{name}: relative error {_rel(g, w):.2e}"


@pytest.mark.xdist_group("gloo")
def test_designs_reject_bad_input_naming_the_argument(gloo_results):
    world, results = gloo_results
    expected = {
        "ulysses_heads": ("ValueError", r"H=3 heads.*world size %d" % world),
        "wrong_shard": ("ValueError", r"T_local per rank .* do not fit the zigzag layout"),
        "gather_wrong_shard": ("ValueError", r"do not fit the zigzag layout"),
        "non_contiguous": ("ValueError", r"^q must be contiguous"),
        "k_dtype": ("ValueError", r"^k must have q's dtype"),
        "v_shape": ("ValueError", r"^v must have shape"),
        "layout": ("ValueError", r"^layout must be one of"),
        "kernel": ("ValueError", r"^kernel must be one of"),
        "lse_shape": ("ValueError", r"^lse must have shape"),
        "do_tensor": ("TypeError", r"^do must be a torch.Tensor"),
        "q_dims": ("ValueError", r"^q must be \(B, H, T_local, d\)"),
        "q_int": ("ValueError", r"^q must be float32 or float64"),
    }
    import re
    for rank, res in enumerate(results):
        bad = res["bad"]
        assert bad.pop("not_initialised_ok") is True
        assert set(bad) == set(expected)
        for name, (kind, pattern) in expected.items():
            assert bad[name] is not None, f"rank {rank}: {name} raised nothing"
            assert bad[name][0] == kind and re.search(pattern, bad[name][1]), (rank, bad[name])


@pytest.mark.xdist_group("gloo")
def test_ring_sends_the_next_block_before_computing_on_this_one(gloo_results):
    world, results = gloo_results
    # non-causal: one kernel call per step. Forward: each step but the last starts the
    # K/V pass, computes, then waits. Backward: the K/V pass, compute, wait for the
    # accumulators that came with this block (none at step 0), send them on, wait K/V;
    # after the last step one more hop brings dk, dv home.
    forward = " ".join(["send compute wait"] * (world - 1) + ["compute"])
    backward = " ".join(["send compute send wait"]
                        + ["send compute wait send wait"] * (world - 2)
                        + ["compute wait send", "wait"])
    for res in results:
        assert res["order"] == f"{forward} | {backward}"


@pytest.mark.xdist_group("gloo")
def test_ranks_listen_on_the_loopback_only(gloo_results):
    world, results = gloo_results
    loopback = {"127.0.0.1", "00000000000000000000000000000001",        # ::1
                "0000000000000000ffff00007f000001"}                      # ::ffff:127.0.0.1
    for rank, res in enumerate(results):
        if res["listening"] is None:
            pytest.skip("no /proc here")
        assert res["listening"], f"rank {rank}: no listening socket found"
        assert set(res["listening"]) <= loopback, (rank, res["listening"])


def _fails_on_rank_0_while_1_waits(rank, world):
    import torch
    if rank == 0:
        raise ArithmeticError("boom before the collective")
    torch.distributed.barrier()                    # waits for rank 0, which never comes
    return rank


def _hangs_on_rank_1(rank, world):
    import time
    if rank == 1:
        time.sleep(60)
    return rank


@pytest.mark.xdist_group("gloo")
def test_launch_names_a_rank_that_failed_while_another_waits_for_it():
    pytest.importorskip("torch")
    from flashcourse.distributed import launch
    with pytest.raises(RuntimeError, match=r"rank\(s\) \[0(, 1)?\] of 2 (.|\n)*boom before"):
        launch.run(2, _fails_on_rank_0_while_1_waits, grace_s=2)


@pytest.mark.xdist_group("gloo")
def test_launch_stops_a_hung_run():
    pytest.importorskip("torch")
    from flashcourse.distributed import launch
    import time
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"rank\(s\) \[(0, )?1\] of 2 did not finish"):
        launch.run(2, _hangs_on_rank_1, timeout_s=5)
    assert time.monotonic() - t0 < 20


def test_launch_rejects_bad_arguments():
    pytest.importorskip("torch")
    from flashcourse.distributed import launch
    with pytest.raises(ValueError, match="world_size"):
        launch.run(0, _hangs_on_rank_1)
    with pytest.raises(TypeError, match="fn must be callable"):
        launch.run(2, "not a function")


def test_design_outside_a_process_group_says_how_to_start_one():
    torch = pytest.importorskip("torch")
    if torch.distributed.is_initialized():
        pytest.skip("a process group is already initialised here")
    from flashcourse.distributed import ring
    x = torch.zeros(1, 1, 4, 2, dtype=torch.float64)
    with pytest.raises(RuntimeError, match="launch.run"):
        ring.ring_forward(x, x, x)


def test_merge_sigmoid_on_tensors_matches_numpy_and_keeps_empty_rows():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    o_a, o_b = rng.standard_normal((2, 5, 3))
    lse_a, lse_b = rng.standard_normal((2, 5)) * 30
    lse_a[1] = lse_b[2] = -np.inf
    o_a[1] = o_b[2] = 0
    lse_a[4] = lse_b[4] = -np.inf
    o_a[4] = o_b[4] = 0
    want_o, want_lse = merge_sigmoid(o_a, lse_a, o_b, lse_b)
    got_o, got_lse = merge_sigmoid(*(torch.from_numpy(x) for x in (o_a, lse_a, o_b, lse_b)))
    assert got_o.dtype == torch.float64 and not torch.isnan(got_o).any()
    np.testing.assert_allclose(got_o.numpy(), want_o, rtol=1e-14, atol=1e-15)
    np.testing.assert_array_equal(got_lse.numpy(), want_lse)
    np.testing.assert_array_equal(got_o.numpy()[[1, 2, 4]], np.stack([o_b[1], o_a[2], 0 * o_a[4]]))
    half_o, half_lse = merge_sigmoid(*(torch.from_numpy(x).half() for x in (o_a, lse_a, o_b,
                                                                             lse_b)))
    assert half_o.dtype == half_lse.dtype == torch.float32


def test_torch_modules_say_how_to_install_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from flashcourse.distributed import ring\n"
            "try:\n    ring.ring_forward(None, None, None)\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert "needs PyTorch: pip install -r requirements-train.txt" in out
