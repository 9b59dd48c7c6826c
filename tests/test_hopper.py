"""The Hopper (wgmma) forward without a GPU: its refusals, its configurations, and the numpy
models of what its threads copy where and what wgmma reads back through its descriptors.

The kernel itself needs an H100/H200 (benchmarks/gpu_hopper.py checks it there against float64
and PyTorch flash; benchmarks/results/h200_hopper.json). What can go wrong in the layout
without running it is checked here: every 16-byte copy of Q, K_j and V_j lands where the
descriptors the kernel builds (from `HopperConfig.kmajor_lbo_sbo` / `v_lbo_sbo`) make wgmma
read that element, for every warpgroup and k16 step.
"""
from __future__ import annotations

import numpy as np
import pytest

import flashcourse  # noqa: F401  (simulator before numba)
from flashcourse import limits, results
from flashcourse.cuda.hopper import host as hopper
from flashcourse.cuda.hopper import wgmma_layouts as W
from flashcourse.cuda.registry import FORWARD

CONFIGS = [hopper.HopperConfig(p, wg, bk, d, pipeline=pipe)
           for p in ("fp16", "bf16") for d in (16, 64, 128) for wg in (1, 2, 3, 4)
           for bk in (64, 128)
           for pipe in ("serial", "overlap", "specialised", "producer", "pingpong")
           if not (pipe in ("specialised", "producer", "pingpong") and wg == 4)
           and not (pipe == "pingpong" and wg == 1)]


def test_the_kernel_is_registered_once_with_its_options():
    k = FORWARD["hopper"]
    assert set(k.options) == {"precision", "warpgroups", "block_k", "pipeline", "splits",
                              "skip_masked", "order", "lazy_rescale"}
    assert np.float16 in k.dtypes and np.uint16 in k.dtypes
    assert k.simulator                 # wgmma's twins (ptx/wgmma.py) run it there


@pytest.mark.parametrize("name", sorted(limits.PRESETS))
def test_every_gpu_but_compute_capability_9_is_refused_by_name(name):
    lim = limits.PRESETS[name]
    if tuple(lim.compute_capability) == hopper.CAPABILITY:
        (launch,) = hopper.launches(128, 4096, 4096, 32, lim)
        assert launch.threads == 384 and launch.regs_per_thread == 168
        return
    cc = "{}.{}".format(*lim.compute_capability)
    with pytest.raises(RuntimeError, match=rf"compute capability 9\.0.*{cc}"):
        hopper.check_capability(lim)


@pytest.mark.parametrize("kw, match", [
    ({"precision": "3xtf32"}, "precision"), ({"warpgroups": 5}, "warpgroups"),
    ({"block_k": 72}, "block_k"), ({"block_k": 512}, "block_k"), ({"d": 136}, "at most 128"),
    ({"pipeline": "tma"}, "pipeline")])
def test_bad_configurations_name_the_argument(kw, match):
    args = {"precision": "fp16", "d": 64, "warpgroups": 2, "block_k": 64, **kw}
    pipe = args.pop("pipeline", "overlap")
    with pytest.raises(ValueError, match=match):
        hopper.plan(args["precision"], args["d"], args["warpgroups"], args["block_k"],
                    pipeline=pipe)


@pytest.mark.parametrize("flag", ["skip_masked", "lazy_rescale", "v_swap", "negative_scale"])
def test_boolean_options_accept_booleans_only(flag):
    """issue 50: a truthy string such as "no" was taken as True."""
    with pytest.raises(TypeError, match=f"^{flag} must be True or False"):
        hopper.plan("fp16", 64, 2, 64, **{flag: "no"})
    assert getattr(hopper.plan("fp16", 64, 2, 64, **{flag: np.False_}), flag) is False


def test_the_defaults_fit_the_register_file_under_their_launch_bound():
    for d in (16, 64, 128):
        wg, bk, pipe = hopper.default_tiles(d)
        cfg = hopper.plan("fp16", d, wg, bk, pipeline=pipe, negative_scale=False)
        regs = hopper.launch_bound_registers(cfg.threads, limits.PRESETS["H200"])
        assert regs * cfg.threads <= 65536
        assert cfg.shared_bytes <= limits.PRESETS["H200"].smem_per_block_optin


def test_shared_memory_holds_q_and_two_buffers_of_k_and_v():
    cfg = hopper.HopperConfig("fp16", 3, 64, 128)
    q, k, v, buf, end = cfg.offsets()
    assert (q, k, v) == (0, 192 * 64, 192 * 64 + 64 * 64)          # 32-bit words
    assert buf == 2 * 64 * 64 and end == k + 2 * buf
    assert cfg.shared_bytes == 2 * (192 * 128 + 4 * 64 * 128)      # bytes: fp16 elements
    v3 = hopper.HopperConfig("fp16", 2, 64, 128, pipeline="specialised")
    assert v3.threads == 2 * 128 + 32 and v3.stages == 3
    assert v3.offsets()[-1] == 128 * 64 + 3 * 2 * 64 * 64          # Q, then 3 stages
    assert v3.shared_bytes == 4 * v3.offsets()[-1] + 6 * 8          # + 6 mbarriers of 8 B
    with pytest.raises(ValueError, match="specialised"):
        hopper.plan("fp16", 64, 4, 64, pipeline="specialised")


@pytest.mark.parametrize("wg", (1, 2, 3))
def test_setmaxnreg_moves_registers_to_the_consumers_within_the_block_pool(wg):
    """Versions 4 and 5: a producer warpgroup of 128 threads; after setmaxnreg the block's
    registers (128 per warpgroup x count) still fit the block's own pool (threads x the
    launch bound's registers: setmaxnreg moves registers within the CTA, and an increase
    the pool cannot meet waits for ever), the counts are multiples of 8 in setmaxnreg's
    24..256, and the consumers hold more than the launch bound gives every thread."""
    for pipe in ("producer", "pingpong"):
        if pipe == "pingpong" and wg == 1:
            with pytest.raises(ValueError, match="at least 2"):
                hopper.plan("fp16", 64, wg, 64, pipeline=pipe)
            continue
        cfg = hopper.plan("fp16", 128, wg, 64, pipeline=pipe)
        assert cfg.threads == 128 * (wg + 1) and cfg.producer_threads == 128
        assert cfg.stages == 3
        producer, consumers = cfg.setmaxnreg()
        assert all(r % 8 == 0 and 24 <= r <= 256 for r in (producer, consumers))
        bound = hopper.launch_bound_registers(cfg.threads, limits.PRESETS["H200"])
        assert 128 * (wg * consumers + producer) <= cfg.threads * bound
        assert producer < bound < consumers or consumers == 240
    with pytest.raises(ValueError, match="at most 3"):
        hopper.plan("fp16", 64, 4, 64, pipeline="producer")


@pytest.mark.parametrize("cfg", CONFIGS[:24], ids=str)
def test_every_copy_lands_once_where_its_layout_puts_it(cfg):
    D = cfg.head_dim
    for tile, rows in (("q", cfg.block_q), ("k", cfg.block_k), ("v", cfg.block_k)):
        plan = hopper.copy_plan(cfg, tile)
        thread, row, chunk, off = plan.T
        assert len(plan) == rows * D // 8 and thread.max() < cfg.threads
        assert sorted(zip(row, chunk)) == [(r, c) for r in range(rows) for c in range(D // 8)]
        assert len(set(off)) == len(off) and off.min() == 0 and off.max() == rows * D * 2 - 16
        want = (W.interleaved_mnmajor(row, 8 * chunk, cfg.block_k) if tile == "v"
                else W.interleaved_kmajor(row, 8 * chunk, D))
        np.testing.assert_array_equal(off, want)
        # in each slot, threads 8i..8i+7 write one core matrix's 128 contiguous bytes (no
        # bank conflict), a different one for each i
        for e0 in range(0, len(plan), 8):
            group = plan[e0:e0 + 8]
            assert list(group[:, 0]) == list(range(group[0, 0], group[0, 0] + 8))
            assert list(group[:, 3] - group[0, 3]) == list(range(0, 128, 16))


@pytest.mark.parametrize("cfg", CONFIGS[::5], ids=str)
def test_the_descriptors_read_back_what_the_copies_wrote(cfg):
    """S = Q K^T reads, per warpgroup w and k16 step kk, Q rows 64 w.. and K_j from
    descriptors with the kernel's (LBO, SBO) starting 256 kk bytes in; O += P V reads V_j
    MN-major from 256 kp bytes in. The model of the hardware's read (operand_address) must
    find every element where the copy plan put it."""
    D, BC = cfg.head_dim, cfg.block_k
    lbo, sbo = cfg.kmajor_lbo_sbo()
    m, k = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    for wg in range(cfg.warpgroups):
        for kk in range(D // 16):
            desc = W.descriptor(wg * 64 * D * 2 + 256 * kk, lbo, sbo)
            np.testing.assert_array_equal(W.operand_address(desc, m, k),
                                          W.interleaved_kmajor(64 * wg + m, 16 * kk + k, D))
    n, k = np.meshgrid(np.arange(BC), np.arange(16), indexing="ij")
    for kk in range(D // 16):
        desc = W.descriptor(256 * kk, lbo, sbo)
        np.testing.assert_array_equal(W.operand_address(desc, n, k),
                                      W.interleaved_kmajor(n, 16 * kk + k, D))
    vlbo, vsbo = cfg.v_lbo_sbo()
    n, k = np.meshgrid(np.arange(D), np.arange(16), indexing="ij")
    for kp in range(BC // 16):
        desc = W.descriptor(256 * kp, vlbo, vsbo)
        np.testing.assert_array_equal(W.operand_address(desc, n, k, mn_major=True),
                                      W.interleaved_mnmajor(16 * kp + k, n, BC))


def test_the_probe_layout_is_the_one_the_model_rejects():
    """v_swap (the benchmark's layout probe, which measured 1.3 relative error on an H200)
    exchanges V's strides: the model must not read V back correctly then."""
    cfg = hopper.HopperConfig("fp16", 1, 64, 64, v_swap=True)
    n, k = np.meshgrid(np.arange(64), np.arange(16), indexing="ij")
    desc = W.descriptor(0, *cfg.v_lbo_sbo())
    assert not np.array_equal(W.operand_address(desc, n, k, mn_major=True),
                              W.interleaved_mnmajor(k, n, 64))


def test_operand_address_refuses_a_swizzled_descriptor():
    with pytest.raises(ValueError, match="no-swizzle"):
        W.operand_address(W.descriptor(1024, 16, 1024, swizzle=128), 0, 0)


def test_the_recorded_runs_of_versions_3_to_5_passed_their_checks_and_sanitizers():
    """results/h200_hopper_v45_variants.json: every tile of versions 3-5 checked on every
    shape against float64 (outputs poisoned first) and timed beside version 2, same run;
    the sanitizer logs of all five versions end with no error and no hazard."""
    doc = results.load_hopper(results.RESULTS_DIR / "h200_hopper_v45_variants.json")
    assert doc is not None and doc["env"]["gpu"].startswith("NVIDIA H")
    assert all(c["ok"] for c in doc["checks"])
    checked = {(c["pipeline"], c["warpgroups"], c["block_k"]) for c in doc["checks"]
               if "pipeline" in c}
    timed = {(v["pipeline"], v["warpgroups"], v["block_k"]) for v in doc["variants"]}
    assert {p for p, *_ in timed} == {"overlap", "specialised", "producer", "pingpong"}
    assert timed <= checked
    for tool, summary in (("memcheck", "ERROR SUMMARY: 0 errors"),
                          ("racecheck", "RACECHECK SUMMARY: 0 hazards")):
        text = (results.RESULTS_DIR / f"h200_hopper_v45_sanitizer_{tool}.txt").read_text()
        assert summary in text
        assert all(f"sanitize {p} {pipe}" in text for p in ("fp16", "bf16")
                   for pipe in ("serial", "overlap", "specialised", "producer", "pingpong"))


def test_the_recorded_run_passed_its_checks_and_holds_every_point():
    doc = results.load_hopper()
    assert doc is not None and doc["env"]["gpu"].startswith("NVIDIA H")
    assert doc["checks"] and all(c["ok"] for c in doc["checks"])
    assert doc["errors"] and all(e["ours_o"] <= 2 * e["torch_flash_o"] + 1e-4
                                 for e in doc["errors"])
    points = {(r["n"], r["d"], r["causal"]) for r in doc["bench"]}
    assert points == {(n, d, c) for n in (4096, 8192, 16384) for d in (64, 128)
                      for c in (False, True)}
    for r in doc["bench"]:
        assert r["fp16_ratio"] == pytest.approx(r["torch_flash_fp16_ms"] / r["hopper_fp16_ms"])
