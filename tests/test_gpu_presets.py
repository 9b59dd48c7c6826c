"""Any CUDA GPU, any head dim: every kernel's default configuration, chosen from a GPU's
limits, launches within those limits on every preset for every d in 1..256.

Pure: no GPU and no simulator run here (only the configuration arithmetic), so it is
fast. The launch rules are re-derived below from the preset's raw numbers (threads per
block, shared memory per block with the 48 KiB rule without opt-in, registers per block
in 256-register allocation units per warp, grid dimensions) instead of calling
`flashcourse.limits.check_launch`, so a kernel that chose a configuration by a wrong rule
fails here. Registers per thread: as recorded on the H200 where the results hold them,
else 255, the most the compiler may give a thread (a bound no compiled kernel exceeds).
"""

from dataclasses import replace

import pytest

from flashcourse import gpus
from flashcourse.cuda.gradients import backward_kernels as bk
from flashcourse.cuda.cuda_core import flash, textbook
from flashcourse.cuda.registry import BACKWARD, FORWARD
from flashcourse.geometry import ceil_div
from flashcourse.limits import (MIN_RESIDENT_WARPS, PRESETS, DeviceLimits, Launch, LaunchError,
                               get_preset, occupancy, pick_config)

KERNELS = [(k.direction, k) for k in list(FORWARD.values()) + list(BACKWARD.values())]
KERNEL_IDS = [f"{d}-{k.name}" for d, k in KERNELS]
HEAD_DIMS = range(1, 257)
#: (Tq, Tk, B*H): one position, a ragged Tq != Tk, a long sequence
SHAPES = [(1, 1, 1), (77, 300, 3), (16384, 16384, 32)]
KiB = 1024


def fits(launch: Launch, lim: DeviceLimits) -> list:
    """The limits `launch` exceeds on `lim` (empty when it fits), by the CUDA rules."""
    bad = []
    if launch.threads > lim.max_threads_per_block:
        bad.append("threads per block")
    cap = lim.smem_per_block_optin if launch.optin else lim.smem_per_block
    if launch.shared_bytes > cap:
        bad.append("shared memory per block")
    regs = launch.regs_per_thread or 255
    warps = ceil_div(launch.threads, 32)
    if regs > lim.max_regs_per_thread or \
            ceil_div(regs * 32, 256) * 256 * warps > lim.max_regs_per_block:
        bad.append("registers")
    if any(g > m for g, m in zip(launch.grid, lim.max_grid)) or min(launch.grid) < 1:
        bad.append("grid")
    return bad


def allowed_refusal(kernel, d, lim, exc) -> bool:
    """The refusals a kernel may give on a preset, each naming what the GPU lacks (any
    other refusal fails the test below): the tensor-core kernel needs compute capability
    8.0 (mma.sync with bf16/tf32; fp16 m16n8k16) and supports d <= 128; the hopper kernel
    needs exactly 9.0 (wgmma) and supports d <= 128."""
    if kernel.name == "hopper":
        from flashcourse.cuda.hopper.host import CAPABILITY, MAX_HEAD_DIM
        if lim.compute_capability != CAPABILITY:
            cc = "{}.{}".format(*lim.compute_capability)
            return (isinstance(exc, RuntimeError) and f"compute capability {cc}" in str(exc)
                    and "9.0" in str(exc))
        if d > MAX_HEAD_DIM:
            return isinstance(exc, ValueError) and f"at most {MAX_HEAD_DIM}" in str(exc)
    if kernel.name == "tensor_core":
        from flashcourse.cuda.tensor_core.host import MAX_HEAD_DIM
        if lim.compute_capability < (8, 0):
            cc = "{}.{}".format(*lim.compute_capability)
            return isinstance(exc, RuntimeError) and f"compute capability {cc}" in str(exc)
        if d > MAX_HEAD_DIM:
            return isinstance(exc, ValueError) and f"at most {MAX_HEAD_DIM}" in str(exc)
    return False


# ---------------------------------------------------------------------------
# The presets carry the published numbers
# ---------------------------------------------------------------------------

def test_every_gpu_has_a_preset_with_its_compute_capability():
    assert set(PRESETS) == set(gpus.GPUS) == {
        "T4", "A10G", "L4", "RTX 3090", "RTX 4090", "A100 40GB", "A100 80GB", "H100 SXM",
        "H200"}
    for name, lim in PRESETS.items():
        g = gpus.GPUS[name]
        assert lim.compute_capability == g.compute_capability
        assert lim.sm_count == g.sms and lim.l2_bytes == g.l2_bytes and g.source
        assert lim.model == g.device_name
        assert lim.smem_per_block <= lim.smem_per_block_optin <= lim.smem_per_sm
        assert lim.smem_per_block_optin + lim.smem_reserved_per_block <= lim.smem_per_sm


@pytest.mark.parametrize("name, cc, optin_kib, per_sm_kib, threads_sm, blocks_sm, sms", [
    ("T4", (7, 5), 64, 64, 1024, 16, 40),
    ("A10G", (8, 6), 99, 100, 1536, 16, 80),
    ("L4", (8, 9), 99, 100, 1536, 24, 58),
    ("RTX 3090", (8, 6), 99, 100, 1536, 16, 82),
    ("RTX 4090", (8, 9), 99, 100, 1536, 24, 128),
    ("A100 40GB", (8, 0), 163, 164, 2048, 32, 108),
    ("H100 SXM", (9, 0), 227, 228, 2048, 32, 132),
    ("H200", (9, 0), 227, 228, 2048, 32, 132),
])
def test_preset_numbers(name, cc, optin_kib, per_sm_kib, threads_sm, blocks_sm, sms):
    """The Programming Guide's per-CC table and the datasheets' SM counts."""
    lim = get_preset(name)
    assert lim.compute_capability == cc and lim.sm_arch == "sm_{}{}".format(*cc)
    assert (lim.smem_per_block_optin, lim.smem_per_sm) == (optin_kib * KiB, per_sm_kib * KiB)
    assert (lim.max_threads_per_sm, lim.max_blocks_per_sm, lim.sm_count) == \
        (threads_sm, blocks_sm, sms)
    assert (lim.max_threads_per_block, lim.regs_per_sm, lim.max_regs_per_block,
            lim.max_regs_per_thread, lim.smem_per_block) == (1024, 65536, 65536, 255, 48 * KiB)


def test_h200_preset_matches_what_the_h200_reported():
    """The recorded sweep stores the limits the H200 itself reported."""
    from flashcourse.results import recorded_limits
    rec, pre = recorded_limits(), PRESETS["H200"]
    for f in ("sm_count", "smem_per_sm", "smem_per_block", "smem_per_block_optin",
              "max_threads_per_block", "max_threads_per_sm", "regs_per_sm", "l2_bytes"):
        assert getattr(rec, f) == getattr(pre, f), f
    assert rec.name == pre.model == "NVIDIA H200"


def test_unknown_preset_and_compute_capability_are_named():
    with pytest.raises(ValueError, match="gpu must be one of"):
        get_preset("B200")
    with pytest.raises(ValueError, match="compute_capability"):
        gpus.compute_capability((6, 1))


# ---------------------------------------------------------------------------
# Every kernel, every preset, every d: its default launches fit
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("direction, kernel", KERNELS, ids=KERNEL_IDS)
def test_every_kernel_launches_within_every_preset(direction, kernel):
    problems = []
    for name, lim in PRESETS.items():
        for d in HEAD_DIMS:
            for tq, tk, bh in SHAPES:
                try:
                    launches = kernel.launches(d, tq, tk, bh, lim)
                except NotImplementedError:
                    pytest.fail(f"{direction} kernel {kernel.name!r} registers no `launches` "
                                "(flashcourse.cuda.registry): say which launches its "
                                "default configuration makes on a GPU with given limits")
                except (LaunchError, ValueError, RuntimeError) as exc:
                    if not allowed_refusal(kernel, d, lim, exc):
                        problems.append(f"{name} d={d} Tq={tq}: refused: {exc}")
                    continue
                assert launches, kernel.name
                for one in launches:
                    bad = fits(one, lim)
                    if bad:
                        problems.append(f"{name} d={d} Tq={tq}: {one} exceeds {bad}")
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize("module, precision", [
    ("tensor_core.host", "fp16"), ("tensor_core.host", "bf16"), ("tensor_core.host", "3xtf32"),
    ("tensor_core.host", "tf32"), ("gradients.tc_backward", "fp16"),
    ("gradients.tc_backward", "3xtf32")])
def test_every_tensor_core_precision_launches_within_every_preset(module, precision):
    """The registry's check above runs one precision per direction (float32 forward:
    3xTF32; backward: fp16's tiles); each precision chooses its own tiles (the backward's
    fp16 and bf16 share one layout), and each must fit every GPU of compute capability
    8.0 or newer."""
    from importlib import import_module
    mod = import_module(f"flashcourse.cuda.{module}")
    problems = []
    for name, lim in PRESETS.items():
        if lim.compute_capability < (8, 0):
            continue
        for d in range(1, mod.MAX_HEAD_DIM + 1):
            for one in mod.launches(d, 4096, 4096, 32, lim, precision=precision):
                bad = fits(one, lim)
                if bad:
                    problems.append(f"{name} d={d}: {one} exceeds {bad}")
    assert not problems, "\n".join(problems[:10])


def test_the_tensor_core_kernel_refuses_below_sm80_naming_the_compute_capability():
    tc = FORWARD["tensor_core"]
    with pytest.raises(RuntimeError, match=r"compute capability 8\.0 or newer.*T4 \(preset\)"
                                           r"\) has compute capability 7\.5"):
        tc.launches(64, 128, 128, 1, PRESETS["T4"])
    for name in ("A10G", "L4", "RTX 3090", "RTX 4090", "A100 40GB", "H100 SXM", "H200"):
        (one,) = tc.launches(64, 4096, 4096, 32, PRESETS[name])
        assert not fits(one, PRESETS[name])
    with pytest.raises(ValueError, match="at most 128"):
        tc.launches(129, 128, 128, 1, PRESETS["H200"])


def test_a_launch_error_names_the_limit_and_the_amounts():
    exc = LaunchError("shared memory per block (opt-in)", 70_000, 65_536, "bytes", "x")
    assert "shared memory per block (opt-in) exceeded, asked 70,000 bytes, available " \
        "65,536 bytes" in str(exc)


def _warps(threads, shared, lim):
    try:
        return occupancy(threads, shared, lim).warps_per_sm
    except LaunchError:
        return None                                   # does not launch at all


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("d", [1, 64, 100, 128, 200, 256])
def test_backward_tiles_are_the_first_good_candidate(name, d):
    """The chosen tiles are not shrunk further than needed: every candidate before them
    in the preference order does not launch, keeps too many floats per thread, or keeps
    fewer than MIN_RESIDENT_WARPS warps per SM (only allowed when no candidate does)."""
    lim = PRESETS[name]
    tiles = bk.choose_tiles(d, lim)
    order = (bk.measured_tiles(d),) + bk.FALLBACK_TILES
    ok = [t for t in order if bk.micro_floats(bk.layout(d, *t)) <= bk.MAX_MICRO_FLOATS
          and _warps(bk.layout(d, *t).threads, bk.layout(d, *t).shared_bytes, lim)]
    busy = [t for t in ok if _warps(bk.layout(d, *t).threads, bk.layout(d, *t).shared_bytes,
                                    lim) >= MIN_RESIDENT_WARPS]
    assert tiles == (busy or ok)[0]


@pytest.mark.parametrize("name", sorted(PRESETS))
@pytest.mark.parametrize("d", [1, 64, 100, 128, 200, 256])
def test_flash_config_is_the_first_good_candidate(name, d):
    lim = PRESETS[name]
    chosen = flash.default_config(d, lim)
    order = list(flash._candidates(d, flash._tuned_key(d, lim.model)))
    cfgs = [flash.layout(d, *c, shuffle=True) for c in order]
    ok = [c for c, cfg in zip(order, cfgs) if flash.micro_floats(cfg) <= flash.MAX_MICRO_FLOATS
          and _warps(cfg.threads, cfg.shared_bytes, lim)]
    busy = [c for c, cfg in zip(order, cfgs) if c in ok
            and _warps(cfg.threads, cfg.shared_bytes, lim) >= MIN_RESIDENT_WARPS]
    assert chosen == (busy or ok)[0]


def test_pick_config_prefers_enough_resident_warps_then_any_that_fits():
    t4 = PRESETS["T4"]                                # 64 KiB per SM and per block
    # 40 KiB x 128 threads: 1 block = 4 warps; 20 KiB x 128 threads: 3 blocks = 12 warps
    assert pick_config([("a", 128, 40 * KiB), ("b", 128, 20 * KiB)], t4, "k") == "b"
    assert pick_config([("x", 128, 70 * KiB), ("a", 128, 40 * KiB)], t4, "k") == "a"
    with pytest.raises(LaunchError, match="k on T4 .preset.: no configuration fits: "
                                          "cannot launch: shared memory per block"):
        pick_config([("x", 128, 70 * KiB)], t4, "k")


def test_h200_backward_at_d256_no_longer_refuses():
    """The default tiles at d = 256 needed 296,960 B of shared memory (more than the H200's
    232,448 B): the tiles are now chosen from the limits."""
    old = bk.layout(256, 64, 64, 16, 16)
    assert old.shared_bytes == 296_960 > PRESETS["H200"].smem_per_block_optin
    for kernel in ("fast", "fast_two_pass"):
        for one in BACKWARD[kernel].launches(256, 4096, 4096, 32, PRESETS["H200"]):
            assert not fits(one, PRESETS["H200"])
    assert bk.choose_tiles(256, PRESETS["H200"]) == (64, 32, 16, 16)


def test_the_tuned_h200_choice_only_where_the_model_matches():
    """The recorded H200 sweep's choice (512 threads at d = 128) is used on the H200 only;
    an A100 (whose 163 KiB could not hold it anyway) gets a configuration from its limits."""
    from flashcourse.results import tuned_config
    tuned = tuned_config(128, gpu_name="NVIDIA H200")
    assert tuned is not None
    key = (tuned["block_q"], tuned["block_k"], tuned["threads"], tuned["tm"])
    assert flash.default_config(128, PRESETS["H200"]) == key
    assert flash.default_config(128, PRESETS["H100 SXM"]) == flash.untuned_config(128)
    a100 = PRESETS["A100 40GB"]
    assert flash.layout(128, *key, shuffle=True).shared_bytes > a100.smem_per_block_optin
    assert flash.choose_config(128, a100, tuned=key) != key      # a tuned one that cannot fit
    assert flash.default_unroll(128, PRESETS["H100 SXM"]) == flash.UNTUNED_UNROLL


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_smaller_gpus_get_smaller_tiles_not_refusals(name):
    """At d = 64 the untuned flash tiles (107,008 B) exceed 99 KiB: CC 8.6/8.9 and the T4
    get smaller tiles; A100, H100, H200 keep them."""
    lim = PRESETS[name]
    untuned = flash.layout(64, *flash.untuned_config(64), shuffle=True)
    chosen = flash.layout(64, *flash.default_config(64, lim), shuffle=True)
    assert chosen.shared_bytes <= lim.smem_per_block_optin
    if untuned.shared_bytes <= lim.smem_per_block_optin:
        assert (chosen.block_q, chosen.block_k) == (untuned.block_q, untuned.block_k)
    else:
        assert lim.compute_capability < (8, 0) or lim.compute_capability in ((8, 6), (8, 9))
        assert chosen.shared_bytes < untuned.shared_bytes


def test_textbook_tile_shrinks_on_a_t4_at_d256():
    t4 = PRESETS["T4"]
    assert textbook.shared_bytes(32, 256) == 69_632 > t4.smem_per_block_optin
    assert textbook.choose_block(256, t4) == 16
    assert textbook.choose_block(256, PRESETS["A10G"]) == 32


# ---------------------------------------------------------------------------
# Refusals name the limit
# ---------------------------------------------------------------------------

TINY = replace(PRESETS["T4"], name="tiny (8 KiB shared memory)", smem_per_block=8 * KiB,
               smem_per_block_optin=8 * KiB, smem_per_sm=8 * KiB)


@pytest.mark.parametrize("call", [
    lambda: flash.choose_config(256, TINY),
    lambda: bk.choose_tiles(256, TINY),
    lambda: textbook.choose_block(256, TINY),
    lambda: FORWARD["flash"].launches(256, 64, 64, 1, TINY),
    lambda: BACKWARD["fast"].launches(256, 64, 64, 1, TINY),
], ids=["flash", "backward", "textbook", "flash-registry", "fast-registry"])
def test_nothing_fits_is_refused_naming_shared_memory(call):
    with pytest.raises(LaunchError, match=r"shared memory per block \(opt-in\) exceeded, "
                                          r"asked [\d,]+ bytes, available 8,192 bytes"):
        call()


def test_a_grid_too_tall_is_refused_naming_the_grid():
    """Dense puts Tq / 16 score tiles on the grid's y axis (at most 65,535 blocks)."""
    h200 = PRESETS["H200"]
    ok = FORWARD["dense"].launches(64, 65535 * 16, 64, 1, h200)
    assert all(not fits(one, h200) for one in ok)
    too_tall = FORWARD["dense"].launches(64, 65535 * 16 + 1, 64, 1, h200)
    assert fits(too_tall[0], h200) == ["grid"]
    with pytest.raises(LaunchError, match="grid y dimension exceeded, asked 65,536 blocks"):
        too_tall[0].check(h200)


def test_unknown_registers_count_as_255():
    """A 512-thread block fits only with known registers: 255 x 512 > 65,536."""
    h200 = PRESETS["H200"]
    Launch("k", (1, 1), 256, 0).check(h200)                       # 255 x 256 = 65,280
    Launch("k", (1, 1), 512, 0, regs_per_thread=64).check(h200)
    with pytest.raises(LaunchError, match="registers per block exceeded"):
        Launch("k", (1, 1), 512, 0).check(h200)


def test_without_optin_48_kib_is_the_limit():
    h200 = PRESETS["H200"]
    with pytest.raises(LaunchError, match=r"shared memory per block \(without opt-in\)"):
        Launch("k", (1, 1), 128, 48 * KiB + 1, optin=False).check(h200)
    Launch("k", (1, 1), 128, 48 * KiB + 1, optin=True).check(h200)


def test_simple_backward_goes_to_d256_and_names_the_limit_beyond():
    BACKWARD["simple"].launches(256, 8, 8, 1, PRESETS["T4"])
    with pytest.raises(ValueError, match="d <= 256"):
        BACKWARD["simple"].launches(257, 8, 8, 1, PRESETS["T4"])


def test_readme_table_is_the_code_s():
    """The README's "Which GPUs" table is `configs.preset_table()` (regenerate it if not)."""
    from pathlib import Path

    from flashcourse.configs import preset_table
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    start = readme.index("<!-- PRESET-TABLE")
    body = readme[readme.index("\n", start) + 1:readme.index("<!-- /PRESET-TABLE -->")]
    assert body.strip() == preset_table().strip(), \
        "README's preset table is stale: paste flashcourse.configs.preset_table() there"
    assert textbook.choose_block(240, PRESETS["T4"]) == 32      # the README's "from d = 241"
    assert textbook.choose_block(241, PRESETS["T4"]) == 16


def test_default_launches_lists_every_kernel_or_its_refusal():
    from flashcourse.configs import default_launches
    got = default_launches(PRESETS["T4"], 256)
    assert set(got) == {(k.direction, k.name) for _, k in KERNELS}
    assert isinstance(got.pop(("forward", "tensor_core")), RuntimeError)   # CC 7.5
    assert isinstance(got.pop(("backward", "tensor_core")), RuntimeError)  # mma.sync: 8.0
    assert isinstance(got.pop(("forward", "hopper")), RuntimeError)        # wgmma: 9.0 only
    assert isinstance(got.pop(("backward", "hopper")), RuntimeError)
    assert all(isinstance(v, tuple) and v for v in got.values())
    refused = default_launches(TINY, 256)
    assert isinstance(refused["forward", "flash"], LaunchError)
    assert isinstance(refused["forward", "dense"], tuple)        # 2,176 B static tiles fit


def test_a_device_starts_from_the_table_of_its_compute_capability(monkeypatch):
    """`DeviceLimits.from_device` on a GPU: what the device reports wins; what it does not
    report comes from its compute capability's row (here an sm_86 card that reports only
    its name, CC and SM count), and the tuned H200 choice does not apply to it."""
    from types import SimpleNamespace

    import flashcourse.gpu
    monkeypatch.setattr(flashcourse.gpu, "using_simulator", lambda: False)
    dev = SimpleNamespace(name=b"NVIDIA GeForce RTX 3090", compute_capability=(8, 6),
                          MULTIPROCESSOR_COUNT=82, MAX_GRID_DIM_Y=65535)
    lim = DeviceLimits.from_device(dev)
    assert (lim.name, lim.model, lim.sm_count, lim.sm_arch) == \
        ("NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 3090", 82, "sm_86")
    assert (lim.smem_per_block_optin, lim.max_threads_per_sm, lim.max_blocks_per_sm) == \
        (99 * KiB, 1536, 16)
    assert flash.default_config(64, lim) == flash.default_config(64, PRESETS["RTX 3090"])
