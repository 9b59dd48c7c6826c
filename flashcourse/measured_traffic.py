"""Measured traffic: Nsight Compute's DRAM and L2 bytes beside the IO model, and why they differ.

`benchmarks/ncu_traffic.py` runs each configuration under `ncu` (`benchmarks/ncu_target.py`)
and joins the measurements with the model: `parse_ncu_csv`, `split_by_marker` and
`sum_metrics` read Nsight Compute's CSV; `model_bytes` is the two-level model of
`flashcourse.traffic`; `l2_aware_dram_bytes` a three-level estimate; `explain_ratio`
says in plain words why a measured/model ratio lies outside `RATIO_BAND`. The H200 study
is recorded in `benchmarks/results/h200_ncu_traffic.json`
(`flashcourse.results.load_traffic`); `print_traffic_table`, `plot_traffic_bars` and
`plot_dram_vs_kv` show it.
"""

from __future__ import annotations

from ._checks import check_block
from .configs import FP32, make_config
from .geometry import ceil_div
from .limits import DeviceLimits, occupancy
from .traffic import dense_traffic, tiled_traffic

NCU_METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "lts__t_bytes.sum",
               "gpu__time_duration.sum")

_UNIT_SCALE = {"byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
               "kibyte": 1024, "mibyte": 1024 ** 2, "gibyte": 1024 ** 3,
               "nsecond": 1e-9, "usecond": 1e-6, "msecond": 1e-3, "second": 1.0,
               "ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_ncu_csv(text: str) -> list:
    """Parse `ncu --csv` output (one row per kernel and metric) into one dict per kernel:
    {id, block, kernel, metrics {name: value in bytes or seconds}}. Lines outside the
    CSV (the program's own output, ==PROF== lines) are skipped; several concatenated ncu
    outputs are read as consecutive blocks (block = 0, 1, ...)."""
    import csv
    import io
    lines = text.splitlines()
    # several ncu runs may be concatenated: each header starts a new block of IDs
    blocks, current = [], None
    for ln in lines:
        if ln.startswith('"ID"'):
            current = [ln]
            blocks.append(current)
        elif current is not None and ln.startswith('"'):
            current.append(ln)
    kernels = {}
    records = ((b, rec) for b, block in enumerate(blocks)
               for rec in csv.DictReader(io.StringIO("\n".join(block))))
    for b, rec in records:
        try:
            kid = (b, int(rec["ID"]))
        except (KeyError, ValueError):
            continue
        k = kernels.setdefault(kid, {"id": kid[1], "block": b,
                                     "kernel": rec.get("Kernel Name", ""), "metrics": {}})
        name, unit = rec.get("Metric Name", ""), (rec.get("Metric Unit") or "").strip().lower()
        raw = (rec.get("Metric Value") or "").replace(",", "")
        try:
            value = float(raw)
        except ValueError:
            continue
        k["metrics"][name] = value * _UNIT_SCALE.get(unit, 1.0)
    return [kernels[i] for i in sorted(kernels)]


def parse_ncu_text(text: str) -> list:
    """Parse Nsight Compute's default (human-readable) report into one dict per profiled
    kernel launch: {kernel (the name up to "(" or "["), metrics {metric name: number}} from
    the sections' "name  [unit]  value" rows, values as printed (percent, cycles, us ...);
    rule text and ==PROF== lines are skipped."""
    import re
    row = re.compile(r"^ {4}(\S.*?) {2,}(?:(\S+) +)?([-\d,]*\.?\d+)$")
    out = []
    for ln in text.splitlines():
        if ln.startswith("  ") and not ln.startswith("   ") and "(" in ln:
            out.append({"kernel": re.split(r"[\[(]", ln.strip(), maxsplit=1)[0],
                        "metrics": {}})
            continue
        m = row.match(ln)
        if m and out:
            out[-1]["metrics"][m.group(1)] = float(m.group(3).replace(",", ""))
    return out


def split_by_marker(kernels: list, begin: str = "ncu_begin", end: str = "ncu_end") -> list:
    """Group the kernels of one ncu run by configuration: the kernels launched between
    a `begin` marker kernel and the next `end` marker (names containing those words)
    form one group; kernels outside any bracket (warm-ups, set-up) are dropped.
    Returns a list of lists of kernels, in launch order."""
    groups, current = [], None
    for k in kernels:
        name = k["kernel"]
        if begin in name:
            current = []
        elif end in name:
            if current is not None:
                groups.append(current)
            current = None
        elif current is not None:
            current.append(k)
    return groups


def sum_metrics(kernels: list) -> dict:
    """Totals over kernels: dram_bytes (read + write), dram_read, dram_write, l2_bytes,
    time_ms."""
    tot = {m: sum(k["metrics"].get(m, 0.0) for k in kernels) for m in NCU_METRICS}
    return {"dram_read": tot["dram__bytes_read.sum"],
            "dram_write": tot["dram__bytes_write.sum"],
            "dram_bytes": tot["dram__bytes_read.sum"] + tot["dram__bytes_write.sum"],
            "l2_bytes": tot["lts__t_bytes.sum"],
            "time_ms": tot["gpu__time_duration.sum"] * 1e3}


def model_bytes(impl: str, seq_len: int, head_dim: int, heads: int, *, block_q=None,
                block_k=None, bytes_per_element: int = FP32) -> int:
    """The two-level IO model's outer-memory bytes for one run of `impl` over `heads`
    heads (flashcourse.traffic): dense paths (Algorithm 0, S and P stored in fp32),
    tiled paths (fa2 order with the given tiles; PyTorch's efficient kernel is
    modelled with Br = Bc = 64)."""
    e = bytes_per_element
    if impl in ("dense", "torch-math"):
        t = dense_traffic(seq_len, seq_len, head_dim, bytes_per_element=e, bytes_per_score=e)
    else:
        br = block_q or 64
        bc = block_k or 64
        t = tiled_traffic(seq_len, seq_len, head_dim, br, bc, bytes_per_element=e)
    return t.total_bytes * heads


def kv_bytes(seq_len: int, head_dim: int, heads: int, bytes_per_element: int = FP32) -> int:
    """Bytes of K and V together over all heads: 2 x N x d x e x heads."""
    return 2 * seq_len * head_dim * bytes_per_element * heads


def kv_reads_from_dram(run: dict, bytes_per_element: int = FP32) -> float:
    """How many times K and V came from DRAM in a measured tiled run: (DRAM bytes minus
    one read of Q and one write of O and lse) / (K + V bytes). The two-level model says
    Tr = ceil(N / Br) times; 1 means L2 served every re-read."""
    n, d, h = run["seq_len"], run["head_dim"], run["heads"]
    once = h * (2 * n * d * bytes_per_element + 4 * n)
    return (run["dram_bytes"] - once) / kv_bytes(n, d, h, bytes_per_element)


def l2_aware_dram_bytes(seq_len: int, head_dim: int, heads: int, block_q: int, block_k: int,
                        threads: int, tm: int, limits: DeviceLimits, *,
                        regs_per_thread: int | None = None,
                        bytes_per_element: int = FP32) -> dict:
    """A three-level estimate (DRAM -> L2 -> SM) of the flash kernel's DRAM bytes.

    The two-level model charges K and V once per query block: Tr = ceil(N / Br) reads
    of 2 N d e bytes per head. On a GPU the blocks resident at the same time,
    R = blocks_per_SM x SMs of them, start together and walk through K and V in step,
    so one DRAM read of a K/V tile feeds all of them through L2. Blocks run in waves
    of R; a head's Tr blocks need W = ceil(Tr / R) waves. If one head's K and V
    (2 N d e bytes) fit in L2, later waves find them there too, so K and V come from
    DRAM once per head; if not, once per wave. Q is read and O, lse written once:

        DRAM ~ heads x [N d e (Q) + N d e + 4 N (O, lse) + 2 N d e x (1 if fits else W)]

    An estimate, not a law: blocks drift out of step, and L2 is shared with the
    other heads running at the same time. Returns {bytes, resident_blocks,
    waves_per_head, kv_per_head_bytes, kv_fits}.
    """
    n, d, h = (check_block(seq_len, "seq_len"), check_block(head_dim, "head_dim"),
               check_block(heads, "heads"))
    e = bytes_per_element
    cfg = make_config(block_q, block_k, threads, tm, d)
    occ = occupancy(threads, cfg.shared_bytes, limits, regs_per_thread=regs_per_thread)
    resident = occ.blocks_per_sm * limits.sm_count
    tr = ceil_div(n, block_q)
    waves = ceil_div(tr, resident)
    kv = 2 * n * d * e
    fits = kv <= limits.l2_bytes
    per_head = n * d * e + n * d * e + 4 * n + kv * (1 if fits else waves)
    return {"bytes": per_head * h, "resident_blocks": resident, "waves_per_head": waves,
            "kv_per_head_bytes": kv, "kv_fits": fits}


RATIO_BAND = (0.8, 1.25)


def explain_ratio(run: dict, l2_bytes: int, level: str = "dram") -> str:
    """A plain-words reason for a measured/model ratio (run["dram_ratio"] or
    run["l2_ratio"]) outside RATIO_BAND; says so when it is inside."""
    r = run.get(f"{level}_ratio")
    if r is None:
        return "no measurement"
    if RATIO_BAND[0] <= r <= RATIO_BAND[1]:
        return (f"within [{RATIO_BAND[0]}, {RATIO_BAND[1]}]: the two-level model predicts "
                f"the {'DRAM' if level == 'dram' else 'L2'} traffic")
    impl = run["impl"]
    kv = kv_bytes(run["seq_len"], run["head_dim"], run["heads"])
    kv_txt = (f"K+V of all heads = {kv / 2**20:.0f} MiB "
              f"{'fits in' if kv <= l2_bytes else 'exceeds'} the {l2_bytes / 2**20:.0f} MiB L2")
    tiled = impl in ("flash", "torch-efficient", "textbook")
    if level == "dram":
        if r < RATIO_BAND[0] and tiled:
            return ("below: the model counts K and V once per query block from outer memory, "
                    "but blocks resident at the same time read the same K/V tiles and L2 "
                    f"serves the repeats ({kv_txt}); DRAM sees K and V about once per head "
                    "(or once per wave of resident blocks when a head's K/V outgrow L2)")
        if r < RATIO_BAND[0]:
            return ("below: part of S/P written by one pass is still in L2 when the next "
                    "pass reads it (more so with --cache-control none), or the library "
                    "fuses passes that the model keeps separate")
        return ("above: more passes over the Tq x Tk matrix than Algorithm 0's (extra "
                "kernels such as scaling, copies or a second softmax pass), each moving "
                "Tq Tk 4 B per head, or evictions that make re-reads miss")
    # level == "l2"
    if r > RATIO_BAND[1]:
        if impl == "dense":
            return ("above: the tiled matrix products re-read Q and K (then P and V) from L2 "
                    "once per tile row or column of the output; the model counts each read "
                    "once. The SMs' small L1 caches cannot hold them")
        if impl == "textbook":
            return ("above: one thread per query row and narrow tiles re-read K and V from L2 "
                    "more often than once per Br = block_q rows")
        if impl == "torch-efficient":
            return ("above: the library kernel fetches K/V (and Q) fragments from L2 more "
                    "often than once per query block (which of its loads repeat was not "
                    "measured here); its DRAM traffic stays small")
        return ("above: L2 also carries traffic the model does not count (the DRAM fills "
                "themselves, partial-sector writes, extra kernels such as copies)")
    if tiled:
        return ("below: part of the K/V loads never reach L2; likely they hit in an SM's L1 "
                "cache, shared by the blocks of one head that run on that SM at the same time "
                "(the L1 hit rate was not measured here)")
    return ("below: the library's kernels fuse passes or keep tiles in L1/shared memory, "
            "so fewer bytes reach L2 than Algorithm 0 moves through outer memory")


def traffic_table(doc: dict, cache_control: str | None = None) -> list:
    """Rows of the recorded ncu study for printing: name, cache mode, MiB at DRAM and L2,
    model MiB, the two ratios, and whether each lies outside RATIO_BAND."""
    out = []
    for r in doc["runs"]:
        if cache_control is not None and r["cache_control"] != cache_control:
            continue
        out.append({"name": r["name"], "cache": r["cache_control"],
                    "dram_MiB": r["dram_bytes"] / 2**20, "l2_MiB": r["l2_bytes"] / 2**20,
                    "model_MiB": r["model_bytes"] / 2**20,
                    "dram_ratio": r.get("dram_ratio"), "l2_ratio": r.get("l2_ratio"),
                    "dram_reason": r.get("dram_reason", ""), "l2_reason": r.get("l2_reason", ""),
                    "time_ms": r.get("time_ms")})
    return out


def print_traffic_table(doc: dict, cache_control: str | None = None) -> None:
    """Print measured/model for every configuration (both levels)."""
    print(f"{'configuration':26s} {'cache':7s} {'DRAM MiB':>10s} {'L2 MiB':>10s} "
          f"{'model MiB':>10s} {'DRAM/model':>10s} {'L2/model':>9s}")
    for r in traffic_table(doc, cache_control):
        dr = "-" if r["dram_ratio"] is None else f"{r['dram_ratio']:.3f}"
        lr = "-" if r["l2_ratio"] is None else f"{r['l2_ratio']:.3f}"
        print(f"{r['name']:26s} {r['cache']:7s} {r['dram_MiB']:10.1f} {r['l2_MiB']:10.1f} "
              f"{r['model_MiB']:10.1f} {dr:>10s} {lr:>9s}")


