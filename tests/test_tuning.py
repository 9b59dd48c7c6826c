"""Tuning: occupancy maths, launch limits, enumeration, results, widget, CPU path
(flashcourse.limits, configs, sweep, results, measured_traffic, widgets.tuning).

Everything here runs without a GPU: the occupancy numbers are checked by hand against
the CUDA occupancy calculator's rules for compute capability 9.0 (H100/H200 limits:
65,536 registers, 228 KiB shared memory, 64 warps and 32 blocks per SM).
"""

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from flashcourse import configs, limits, results, sweep, timing
from flashcourse import measured_traffic as mt
from flashcourse.cuda.common import _launch
from flashcourse.cuda.cuda_core import flash
from flashcourse.traffic import attention_flops, dense_traffic, tiled_traffic
from flashcourse.widgets.tuning import tuning_report

H = limits.H200_LIMITS


# ---------------------------------------------------------------------------
# occupancy: hand-checked examples
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("threads, regs, smem, blocks, limiter", [
    # 8 warps x ceil(64*32, 256)=2048 regs/warp = 16,384 regs/block -> 65,536/16,384 = 4
    (256, 64, 0, 4, "registers"),
    # 128 regs: 4096/warp x 8 warps = 32,768 -> 2 blocks
    (256, 128, 0, 2, "registers"),
    # 255 regs round up to 8192/warp (256-register units): 8 warps -> 1 block
    (256, 255, 0, 1, "registers"),
    # shared: ceil(70,144 + 1,024 reserved, 128) = 71,168 B; 233,472 / 71,168 = 3.28 -> 3
    (128, 32, 70144, 3, "shared memory"),
    # 48 KiB: (49,152 + 1,024) = 50,176 B -> 4.65 -> 4
    (256, 32, 49152, 4, "shared memory"),
    # 64 threads = 2 warps: 64 warps / 2 = 32 blocks, equal to the 32-block cap
    (64, 16, 0, 32, "threads (warps)"),
    # 1024 threads = 32 warps -> 2 blocks by warps; regs 32: 1024/warp x 32 = 32,768 -> 2
    (1024, 32, 0, 2, "registers"),
    # 96 threads = 3 warps (a partial warp costs a whole one): 64 // 3 = 21
    (96, 16, 0, 21, "threads (warps)"),
])
def test_occupancy_hand_checked(threads, regs, smem, blocks, limiter):
    occ = limits.occupancy(threads, smem, H, regs_per_thread=regs)
    assert occ.blocks_per_sm == blocks
    assert occ.limiter == limiter
    warps = -(-threads // 32)
    assert occ.warps_per_sm == blocks * warps
    assert occ.fraction == pytest.approx(blocks * warps / 64)
    assert limiter in occ.describe()


def test_occupancy_without_registers_skips_that_limit():
    occ = limits.occupancy(256, 70144, H, regs_per_thread=None)
    assert occ.by_resource["registers"] is None
    assert occ.blocks_per_sm == 3 and occ.limiter == "shared memory"


@pytest.mark.parametrize("kwargs, limit, asked, available", [
    (dict(threads=2048, shared_bytes=0), "threads per block", 2048, 1024),
    (dict(threads=256, shared_bytes=240000), "shared memory per block (opt-in)", 240000, 232448),
    (dict(threads=256, shared_bytes=50000, optin=False),
     "shared memory per block (without opt-in)", 50000, 49152),
    (dict(threads=256, shared_bytes=0, regs_per_thread=300), "registers per thread", 300, 255),
    # 255 regs -> 8192 per warp x 32 warps = 262,144 > 65,536
    (dict(threads=1024, shared_bytes=0, regs_per_thread=255), "registers per block",
     262144, 65536),
])
def test_launch_errors_name_limit_asked_available(kwargs, limit, asked, available):
    with pytest.raises(limits.LaunchError) as info:
        limits.check_launch(limits=H, **kwargs)
    err = info.value
    assert (err.limit, err.asked, err.available) == (limit, asked, available)
    msg = str(err)
    assert limit in msg and f"{asked:,}" in msg and f"{available:,}" in msg
    with pytest.raises(ValueError):          # a LaunchError is a ValueError
        limits.occupancy(limits=H, **{"regs_per_thread": None, **kwargs})


def test_occupancy_rejects_bad_threads():
    with pytest.raises(TypeError, match="threads"):
        limits.occupancy(2.5, 0, H)
    with pytest.raises(ValueError, match="threads"):
        limits.occupancy(0, 0, H)


# ---------------------------------------------------------------------------
# configurations of the flash kernel
# ---------------------------------------------------------------------------

def test_make_config_uses_the_kernel_plan():
    cfg = configs.make_config(64, 64, 256, 4, 64)
    plan = flash.FlashConfig(64, 64, 256, 4, 64, True)
    assert cfg.shared_bytes == plan.shared_bytes
    assert (cfg.micro_q, cfg.micro_k, cfg.micro_d) == (plan.tm, plan.tn, plan.td) == (4, 4, 4)
    assert cfg.key() == (64, 64, 256, 4, None)
    assert configs.make_config(64, 64, 256, 4, 64, unroll=2).key() == (64, 64, 256, 4, 2)
    with pytest.raises(ValueError, match="unroll"):
        configs.make_config(64, 64, 256, 4, 64, unroll=0)


def test_bad_shape_names_the_argument():
    with pytest.raises(ValueError, match="threads"):
        configs.make_config(64, 64, 100, 4, 64)
    with pytest.raises(ValueError, match="tm"):
        configs.make_config(64, 64, 256, 3, 64)


def test_square_tm_and_valid_tms():
    tms = configs.valid_tms(64, 64, 256, 64)
    assert tms and all(64 % tm == 0 for tm in tms)
    tm = configs.square_tm(64, 64, 256, 64)
    assert tm in tms
    mq, mk, _, _ = configs.kernel_plan(64, 64, 256, tm, 64)
    # no other valid tm gives a squarer micro-tile
    for other in tms:
        oq, ok, _, _ = configs.kernel_plan(64, 64, 256, other, 64)
        assert abs(math.log(mq / mk)) <= abs(math.log(oq / ok)) + 1e-12


def test_enumeration_with_h200_limits_and_fake_small_limits():
    ok, rej = configs.enumerate_configs(64, H)
    assert ok and all(c.shared_bytes <= H.smem_per_block_optin for c in ok)
    # a device without the opt-in (48 KiB per block) and only 128 threads per block
    small = replace(H, name="fake", smem_per_block_optin=49152, max_threads_per_block=128)
    ok2, rej2 = configs.enumerate_configs(64, small)
    assert ok2, "some configurations must still fit"
    assert all(c.shared_bytes <= 49152 and c.threads <= 128 for c in ok2)
    reasons = [r for _, r in rej2]
    smem = [r for r in reasons if "shared memory" in r]
    thr = [r for r in reasons if "threads per block" in r]
    assert smem and thr
    assert all("asked" in r and "available 49,152 bytes" in r for r in smem)
    assert all("available 1,024" not in r for r in thr) and all("available 128" in r for r in thr)
    assert len(ok2) + len(rej2) >= len(ok)


def test_enumeration_applies_register_counts():
    regs = {c.key(): 255 for c in configs.enumerate_configs(64, H, threads=(256,))[0]}
    # 255 regs x 256 threads = 8192/warp x 8 warps = 65,536: exactly one block fits ...
    ok, _ = configs.enumerate_configs(64, H, threads=(256,), regs=regs)
    assert ok and all(limits.occupancy(256, c.shared_bytes, H, regs_per_thread=255).blocks_per_sm
                      == 1 for c in ok)
    # ... but not on a device with half the register file per block
    half = replace(H, max_regs_per_block=32768)
    ok, rej = configs.enumerate_configs(64, half, threads=(256,), regs=regs)
    assert not ok
    assert rej and all("registers per block" in r and "asked 65,536" in r
                       and "available 32,768" in r for _, r in rej)


def test_default_config_is_launchable():
    for d in (64, 128):
        key = flash.untuned_config(d)
        cfg = configs.make_config(*key, d)
        limits.check_launch(cfg.threads, cfg.shared_bytes, H)


def test_optin_failure_is_explained():
    class Broken:
        def compile(self, sig):
            raise AttributeError("no _codelibrary")

    with pytest.raises(_launch.SharedMemoryOptInError, match="private API"):
        _launch.set_max_dynamic_shared_bytes(Broken(), (), 100_000)
    _launch.set_max_dynamic_shared_bytes(Broken(), (), 1000)   # <= 48 KiB: nothing to do


# ---------------------------------------------------------------------------
# sweep machinery with a fake runner (no GPU)
# ---------------------------------------------------------------------------

def _fake_runner(cfg, n, bh):
    if cfg.block_q == 32:
        raise RuntimeError("does not compile")

    def fn():
        return None

    fn.config = replace(cfg, regs_per_thread=64)
    return fn, lambda: 1e-7


def _fake_timer(fn, warmup, repeats):
    return [2.0, 1.0, 3.0]                     # median 2 ms


def test_sweep_rows_and_errors():
    cfgs = [configs.make_config(32, 32, 128, 4, 64), configs.make_config(64, 64, 256, 4, 64)]
    rows = sweep.sweep(cfgs, [256], runner=_fake_runner, timer=_fake_timer, batch_heads=2,
                   progress=False, limits=H)
    assert [r["status"] for r in rows] == ["error", "ok"]
    assert "does not compile" in rows[0]["error"]
    ok = rows[1]
    assert ok["median_ms"] == 2.0 and ok["regs_per_thread"] == 64
    assert ok["tflops"] == pytest.approx(attention_flops(256, 256, 64) * 2 / 2e-3 / 1e12)
    assert ok["blocks_per_sm"] == 3 and ok["limiter"] == "shared memory"


def test_wrong_result_is_an_error_row_and_never_timed():
    def runner(cfg, n, bh):
        return (lambda: None), (lambda: 0.5)

    def timer(fn, warmup, repeats):
        raise AssertionError("a wrong kernel was timed")
    row = sweep.time_config(configs.make_config(64, 64, 256, 4, 64), 128, runner=runner,
                            timer=timer)
    assert row["status"] == "error" and "wrong result" in row["error"]
    assert row["median_ms"] is None


def _row(d, n, key, tflops):
    bq, bk, t, tm = key
    return {"head_dim": d, "seq_len": n, "block_q": bq, "block_k": bk, "threads": t, "tm": tm,
            "median_ms": 1.0, "tflops": tflops, "status": "ok"}


def test_best_never_slower_than_default():
    dflt = (64, 64, 256, 4)
    a, b = (128, 64, 256, 8), (32, 64, 128, 4)
    rows = [_row(64, 4096, dflt, 10.0), _row(64, 16384, dflt, 10.0),
            _row(64, 4096, a, 20.0), _row(64, 16384, a, 9.0),     # faster on average, slower at 16k
            _row(64, 4096, b, 11.0), _row(64, 16384, b, 10.5),
            _row(64, 4096, (128, 128, 256, 8), 30.0)]             # never timed at 16k
    best = sweep.best_by_head_dim(rows, {"64": dict(zip(("block_q", "block_k", "threads", "tm"),
                                                     dflt))})["64"]
    assert (best["block_q"], best["block_k"], best["threads"], best["tm"]) == b
    assert best["default_tflops"] == {"4096": 10.0, "16384": 10.0}
    assert best["speedup"] == pytest.approx(math.sqrt(11.0 * 10.5) / 10.0)


# ---------------------------------------------------------------------------
# recorded results: schema, loaders, tuned_config
# ---------------------------------------------------------------------------

def _sweep_doc():
    rows = [_row(64, 4096, (64, 64, 256, 4), 12.0), _row(64, 16384, (64, 64, 256, 4), 13.0)]
    return {"schema": results.SWEEP_SCHEMA, "environment": {"gpu": "NVIDIA H200", "date": "x"},
            "limits": H.to_dict(), "problem": {"batch_heads": 32}, "default": {},
            "rows": rows, "best": {"64": {"block_q": 64, "block_k": 64, "threads": 256,
                                          "tm": 4}}}


def test_sweep_loader_and_tuned_config(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps(_sweep_doc()))
    assert results.load_sweep(path)["rows"][0]["tflops"] == 12.0
    assert results.tuned_config(64, path) == {"block_q": 64, "block_k": 64, "threads": 256,
                                              "tm": 4, "unroll": None}
    assert results.tuned_config(128, path) is None
    assert results.tuned_config(64, path, gpu_name="NVIDIA A100") is None
    assert results.load_sweep(tmp_path / "missing.json") is None
    assert limits.DeviceLimits.from_dict(_sweep_doc()["limits"]) == H


@pytest.mark.parametrize("drop", ["rows", "schema"])
def test_sweep_schema_errors(drop):
    doc = _sweep_doc()
    del doc[drop]
    with pytest.raises(results.ResultsError, match=f"'{drop}' is a required property"):
        results.validate(doc, "sweep")
    doc = _sweep_doc()
    del doc["rows"][0]["tm"]
    with pytest.raises(results.ResultsError, match="at rows/0: 'tm' is a required property"):
        results.validate(doc, "sweep")


@pytest.mark.parametrize("text, match", [
    ("{not json", "not valid JSON"),
    ('{"schema": "flashcourse.tuning.sweep/1"}', "'environment' is a required property"),
    ("other schema", "at schema: 'flashcourse.tuning.sweep/1' was expected"),
])
def test_tuned_config_fails_loudly_on_a_broken_file(tmp_path, text, match):
    if text == "other schema":
        text = json.dumps({**_sweep_doc(), "schema": "other/1"})
    path = tmp_path / "h200_tuning_sweep.json"
    path.write_text(text)
    with pytest.raises(results.ResultsError, match=match) as err:
        results.tuned_config(64, path)
    assert str(path) in str(err.value)                  # names the file


def test_every_recorded_results_file_validates():
    """Each JSON file in benchmarks/results/ has a kind and matches its schema."""
    files = sorted(results.RECORDED_DIR.glob("*.json"))
    assert files
    for path in files:
        assert results.load(path) is not None, path


def test_committed_results_match_the_schema():
    """The recorded H200 files (when committed) load, and the tuned default is never
    slower than the untuned one in the same run."""
    sweep = results.load_sweep()
    traffic = results.load_traffic()
    if sweep is None and traffic is None:
        pytest.skip("no recorded GPU results committed yet")
    if sweep is not None:
        assert "H200" in sweep["environment"]["gpu"]
        for b in sweep["best"].values():
            for n, tf in b["tflops"].items():
                assert tf >= b["default_tflops"][n]
    if traffic is not None:
        assert traffic["runs"] and all(r["model_bytes"] > 0 for r in traffic["runs"])


# ---------------------------------------------------------------------------
# measured traffic: ncu CSV parsing, model join, explanations
# ---------------------------------------------------------------------------

_HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream",'
           '"Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit",'
           '"Metric Value"')
_KERNELS = [  # (ID, kernel name, metric, unit, value) as ncu --csv prints them
    (0, "cudapy::ncu_begin(Array<float>)", "dram__bytes_read.sum", "byte", "0"),
    (1, "flash_q64_k64_t256_m4_d64", "dram__bytes_read.sum", "byte", "1,048,576"),
    (1, "flash_q64_k64_t256_m4_d64", "dram__bytes_write.sum", "Kbyte", "2"),
    (1, "flash_q64_k64_t256_m4_d64", "lts__t_bytes.sum", "byte", "5000000"),
    (1, "flash_q64_k64_t256_m4_d64", "gpu__time_duration.sum", "nsecond", "2500000"),
    (2, "cudapy::ncu_end(Array<float>)", "dram__bytes_read.sum", "byte", "0"),
    (3, "warmup_kernel", "dram__bytes_read.sum", "byte", "999"),
    (4, "cudapy::ncu_begin(Array<float>)", "dram__bytes_read.sum", "byte", "0"),
    (5, "gemm", "dram__bytes_read.sum", "byte", "100"),
    (6, "softmax", "dram__bytes_read.sum", "byte", "50"),
    (7, "cudapy::ncu_end(Array<float>)", "dram__bytes_read.sum", "byte", "0"),
]
NCU_CSV = "\n".join(
    ["==PROF== Connected to process 1 (python3)",
     '==PROF== Profiling "ncu_begin": 0%....100% - 1 pass', _HEADER]
    + [f'"{i}","1","python3","h","{name}","1","7","(1, 1, 1)","(1, 1, 1)","0","9.0",'
       f'"Command line profiler metrics","{metric}","{unit}","{value}"'
       for i, name, metric, unit, value in _KERNELS])


def test_parse_ncu_csv_groups_and_sums():
    kernels = mt.parse_ncu_csv(NCU_CSV)
    assert len(kernels) == 8
    assert kernels[1]["metrics"]["dram__bytes_read.sum"] == 1048576          # "1,048,576"
    assert kernels[1]["metrics"]["dram__bytes_write.sum"] == 2000             # 2 Kbyte
    groups = mt.split_by_marker(kernels)
    assert [[k["kernel"] for k in g] for g in groups] == [
        ["flash_q64_k64_t256_m4_d64"], ["gemm", "softmax"]]                  # warm-up dropped
    s = mt.sum_metrics(groups[0])
    assert s["dram_bytes"] == 1048576 + 2000 and s["l2_bytes"] == 5e6
    assert s["time_ms"] == pytest.approx(2.5)
    assert mt.sum_metrics(groups[1])["dram_bytes"] == 150
    assert mt.parse_ncu_csv("no csv here") == []


NCU_TEXT = """==PROF== Disconnected from process 1
  hopper_overlap_fp16_wg3_k64_d128[v14,cw51](Array<unsigned int, 1, C>) (22, 32, 1)x(384, 1, 1)
    Section: GPU Speed Of Light Throughput
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    Elapsed Cycles                cycle    1,487,826
    L2 Cache Throughput               %        67.83
    SM Active Cycles              cycle 1,320,185.78
    Issued Warp Per Scheduler                   0.36
    OPT   Memory is more heavily utilized than Compute: Look at the Memory Workload 2
  other_kernel(int) (1, 1, 1)x(32, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Duration                         us         4.10
"""


def test_parse_ncu_text_reads_each_launch_and_its_rows():
    k = mt.parse_ncu_text(NCU_TEXT)
    assert [x["kernel"] for x in k] == ["hopper_overlap_fp16_wg3_k64_d128", "other_kernel"]
    assert k[0]["metrics"] == {"Elapsed Cycles": 1487826.0, "L2 Cache Throughput": 67.83,
                               "SM Active Cycles": 1320185.78,
                               "Issued Warp Per Scheduler": 0.36}
    assert k[1]["metrics"] == {"Duration": 4.1}
    assert mt.parse_ncu_text("no report here") == []


def test_model_bytes_match_the_io_model():
    assert mt.model_bytes("dense", 1000, 48, 3) == 3 * dense_traffic(
        1000, 1000, 48, bytes_per_element=4, bytes_per_score=4).total_bytes
    assert mt.model_bytes("flash", 1000, 48, 3, block_q=64, block_k=32) == 3 * tiled_traffic(
        1000, 1000, 48, 64, 32, bytes_per_element=4).total_bytes
    assert mt.kv_bytes(4096, 64, 16) == 32 * 2**20


def test_l2_aware_estimate_by_hand():
    # d=64, Br=64 (default tile, 3 blocks/SM by shared memory): resident = 3 x 132 = 396
    small = mt.l2_aware_dram_bytes(4096, 64, 16, 64, 64, 256, 4, H)
    assert small["resident_blocks"] == 396 and small["waves_per_head"] == 1
    n = 4096
    assert small["bytes"] == 16 * (2 * n * 64 * 4 + 4 * n + 2 * n * 64 * 4)
    big = mt.l2_aware_dram_bytes(262144, 64, 1, 64, 64, 256, 4, H)   # K+V = 128 MiB > 60 MiB
    assert not big["kv_fits"] and big["waves_per_head"] == math.ceil(4096 / 396)
    n = 262144
    assert big["bytes"] == 2 * n * 64 * 4 + 4 * n + 2 * n * 64 * 4 * 11


def test_explanations_cover_every_band():
    run = {"impl": "flash", "seq_len": 4096, "head_dim": 64, "heads": 16,
           "dram_ratio": 0.02, "l2_ratio": 1.0}
    assert "L2 serves" in mt.explain_ratio(run, H.l2_bytes, "dram")
    assert "within" in mt.explain_ratio(run, H.l2_bytes, "l2")
    run.update(impl="dense", dram_ratio=1.9, l2_ratio=5.0)
    assert mt.explain_ratio(run, H.l2_bytes, "dram").startswith("above")
    assert "tile" in mt.explain_ratio(run, H.l2_bytes, "l2")
    run["dram_ratio"] = None
    assert mt.explain_ratio(run, H.l2_bytes, "dram") == "no measurement"


# ---------------------------------------------------------------------------
# widget and the CPU tuning path
# ---------------------------------------------------------------------------

def test_tuning_report_valid_and_invalid_settings():
    ok = tuning_report(64, 64, 256, 4, 64, 4096, measure=False, limits=H)
    assert "occupancy" in ok and "shared memory" in ok and "Cannot" not in ok
    assert "70,144 B" in ok                                   # the kernel's own footprint
    with pytest.raises(ValueError, match="available 232,448"):
        tuning_report(128, 128, 128, 2, 256, 4096, measure=False, limits=H)
    with pytest.raises(ValueError, match="threads"):
        tuning_report(64, 64, 100, 4, 64, 4096, measure=False, limits=H)
    with pytest.raises(ValueError, match="at most 1,024 threads"):
        tuning_report(64, 64, 2048, 4, 64, 4096, measure=False, limits=H)


def test_cpu_tuning_path_tiny():
    """Real timings of flashcourse.cpu.forward at a tiny size; output vs float64 reference
    (fp32 inputs: relative error < 1e-5)."""
    t = sweep.cpu_time(16, 32, 48, 24, batch_heads=1, repeats=2)
    assert t["median_ms"] > 0 and t["gflops"] > 0
    assert t["rel_err"] < 1e-5
    rows = sweep.cpu_sweep((16, 32), seq_len=40, head_dim=8, progress=False)
    assert len(rows) == 4 and all(r["rel_err"] < 1e-5 for r in rows)
    html = tuning_report(16, 32, 128, 4, 64, 1024, measure=True, cpu_seq_len=40, limits=H)
    assert "flashcourse.cpu.forward" in html and "GFLOP/s" in html


def test_heatmap_grid_and_plot():
    rows = [_row(64, 4096, (32, 32, 128, 4), 5.0), _row(64, 4096, (32, 32, 256, 2), 6.0),
            _row(64, 4096, (64, 32, 256, 4), 7.0),
            {**_row(64, 4096, (64, 64, 256, 4), None), "status": "error"}]
    bqs, bks, grid, thr = sweep.heatmap_grid(rows, 64, 4096)
    assert bqs == [32, 64] and bks == [32, 64]
    assert grid[0, 0] == 6.0 and thr[0, 0] == 256
    assert np.isnan(grid[1, 1]) and np.isnan(grid[0, 1])
    from flashcourse.plots import tuning as tuning_plots
    ax = tuning_plots.plot_heatmap(rows, 64, 4096)
    assert ax.get_xlabel().startswith("block_k")


def test_time_host_budget():
    times = timing.time_host(lambda: None, warmup=0, repeats=4)
    assert len(times) == 4 and all(t >= 0 for t in times)
    slow = timing.time_host(lambda: sum(range(10000)), warmup=0, repeats=100, budget_s=0.0)
    assert len(slow) == 1


def _load_benchmark(name):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, results.ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ncu_driver_joins_measurements_with_the_model():
    """benchmarks/ncu_traffic.join on the synthetic CSV: groups matched to the target's
    manifest in order, model bytes and ratios attached, reasons given."""
    ncu = _load_benchmark("ncu_traffic")
    target = _load_benchmark("ncu_target")
    flash = {"name": "flash-N4096-q64k64", **target.CONFIGS["flash-N4096-q64k64"],
             "status": "ok", "bracketed": True, "regs_per_thread": 64}
    dense = {"name": "cuda-dense-N1024", **target.CONFIGS["cuda-dense-N1024"],
             "status": "ok", "bracketed": True}
    skipped = {"name": "torch-math-N1024", "impl": "torch-math", "status": "error",
               "bracketed": False}
    runs = ncu.join(mt.parse_ncu_csv(NCU_CSV), [flash, skipped, dense], "all", H.l2_bytes, H)
    assert [r["name"] for r in runs] == ["flash-N4096-q64k64", "cuda-dense-N1024"]
    f, d = runs
    assert f["dram_bytes"] == 1048576 + 2000 and f["n_kernels"] == 1
    assert f["model_bytes"] == mt.model_bytes("flash", 4096, 64, 16, block_q=64, block_k=64)
    assert f["dram_ratio"] == pytest.approx(f["dram_bytes"] / f["model_bytes"])
    assert f["l2_aware_dram_bytes"] > 0 and f["waves_per_head"] >= 1
    assert f["dram_reason"].startswith("below")
    assert d["n_kernels"] == 2 and d["dram_bytes"] == 150
    assert set(target.CONFIGS) >= {"cuda-dense-N4096", "torch-math-N4096",
                                   "torch-efficient-N4096", "flash-N262144-h1-q64k64"}
    # every flash configuration of the target is launchable on an H200
    for c in target.CONFIGS.values():
        if c["impl"] == "flash":
            cfg = configs.make_config(c["block_q"], c["block_k"], c["threads"], c["tm"],
                                      c["head_dim"])
            limits.check_launch(cfg.threads, cfg.shared_bytes, H)


def test_host_inputs_are_cached_and_deterministic():
    a = sweep.host_inputs(2, 16, 8)
    b = sweep.host_inputs(2, 16, 8)
    assert a is b and a[0].shape == (2, 16, 8) and a[0].dtype == np.float32
    assert not np.array_equal(a[0], a[1])                  # q, k, v differ
    c = sweep.host_inputs(2, 16, 8, seed=1)
    assert not np.array_equal(a[0], c[0])


def test_limits_from_the_simulated_device_default_to_hopper():
    from flashcourse.gpu import using_simulator
    if not using_simulator():
        pytest.skip("a real GPU: limits come from it")
    lim = limits.DeviceLimits.from_device()
    assert "simulated" in lim.name
    assert lim.smem_per_block_optin == H.smem_per_block_optin
    assert lim.max_threads_per_block == 1024
