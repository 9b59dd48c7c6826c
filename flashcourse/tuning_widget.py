"""The tuning widget of notebook 07: choose a tile shape, see whether and how well it runs.

Moves to `flashcourse/widgets/tuning.py` when the widgets package lands (one base
explorer for every widget); until then it lives here, built on the split modules:
`configs` (what a configuration needs), `limits` (occupancy), `results` (the recorded
H200 sweep), `sweep` (timing on this GPU or CPU).
"""

from __future__ import annotations

import html

from .configs import describe_config
from .limits import DeviceLimits
from .memory import format_bytes
from .results import load_sweep, recorded_limits, recorded_regs, recorded_row
from .sweep import cpu_time, gpu_available, gpu_time

def _fmt_bytes(n) -> str:
    return format_bytes(int(n))


def widget_report(block_q, block_k, threads, tm, head_dim, seq_len, *, limits=None,
                  measure: bool = True, cpu_seq_len: int = 256, doc=None) -> str:
    """The widget's HTML for one setting. Never raises: invalid settings give a message."""
    esc = html.escape
    try:
        if doc is None:
            doc = load_sweep()
        if limits is None:
            limits = (DeviceLimits.from_device() if measure and gpu_available()
                      else recorded_limits())
        regs = recorded_regs(head_dim, block_q, block_k, threads, tm, doc) if doc else None
        info = describe_config(block_q, block_k, threads, tm, head_dim, seq_len, limits,
                               regs_per_thread=regs)
    except (ValueError, TypeError) as exc:          # LaunchError is a ValueError
        return f'<p style="color:#b35900"><b>Cannot launch.</b> {esc(str(exc))}</p>'
    except Exception as exc:  # not silent: a widget shows any error as a message
        return f'<p style="color:#b35900"><b>Error.</b> {esc(type(exc).__name__)}: ' \
               f'{esc(str(exc))}</p>'
    cfg, occ = info["config"], info["occupancy"]
    regs_txt = (f"{regs} (recorded on the H200)" if regs else
                "unknown until compiled on a GPU: register limit not applied")
    optin = "needs the opt-in beyond 48 KiB" if cfg.shared_bytes > 49152 else "fits in 48 KiB"
    lines = [
        f"<b>{esc(cfg.label)}, d={head_dim}, N={seq_len}</b> (limits: {esc(limits.name)})",
        f"per thread: a {cfg.micro_q} x {cfg.micro_k} score micro-tile and a "
        f"{cfg.micro_q} x {cfg.micro_d} output micro-tile in registers",
        f"shared memory per block (Q, K, V, P tiles, fp32): {esc(_fmt_bytes(cfg.shared_bytes))}"
        f" of {limits.smem_per_block_optin:,} B allowed ({optin})",
        f"model's on-chip footprint (Q, K, V, S tiles, accumulator, m, l): "
        f"{esc(_fmt_bytes(info['model_footprint_bytes']))}",
        f"registers per thread: {esc(str(regs_txt))}",
        f"occupancy: {esc(occ.describe())}",
        f"model traffic per head: {esc(_fmt_bytes(info['traffic'].total_bytes))} "
        f"(K and V read {info['kv_rereads']} times, once per query block)",
    ]
    if measure:
        try:
            if gpu_available():
                t = gpu_time(block_q, block_k, threads, tm, seq_len, head_dim)
                if t["status"] == "ok":
                    lines.append(f"measured on this GPU (B x H = 32): {t['median_ms']:.3f} ms, "
                                 f"{t['tflops']:.2f} TFLOP/s, rel. error {t['rel_err']:.1e}")
                else:
                    lines.append(f"measurement failed: {esc(t['error'])}")
            else:
                t = cpu_time(block_q, block_k, cpu_seq_len, head_dim)
                lines.append(f"no GPU: flashcourse.cpu.forward at N={cpu_seq_len} with Br, Bc "
                             f"as chosen: {t['median_ms']:.2f} ms, {t['gflops']:.2f} GFLOP/s, "
                             f"rel. error {t['rel_err']:.1e}")
        except Exception as exc:  # not silent: shown in the report, the widget stays usable
            lines.append(f"timing failed: {esc(type(exc).__name__)}: {esc(str(exc))[:300]}")
    rec = recorded_row(head_dim, seq_len, block_q, block_k, threads, tm, doc) if doc else None
    if rec is not None and rec.get("tflops"):
        lines.append(f"recorded on {esc(str(doc['environment'].get('gpu')))} (B x H = "
                     f"{doc['problem'].get('batch_heads')}): {rec['median_ms']:.3f} ms, "
                     f"{rec['tflops']:.2f} TFLOP/s")
    elif rec is not None:
        lines.append(f"recorded on the H200: failed ({esc(rec.get('error', ''))})")
    elif doc is None:
        lines.append("no recorded H200 sweep exists yet (benchmarks/results/"
                     "h200_tuning_sweep.json)")
    else:
        lines.append(f"this configuration was not timed at N={seq_len} in the recorded sweep")
    return "<br>".join(lines)


def tuning_widget(head_dim: int = 64, seq_len: int = 4096, *, measure: bool = True,
                  cpu_seq_len: int = 256):
    """Dropdowns for block_q, block_k, threads, tm (rows per thread), d and N, and a
    report that updates on every change (see `widget_report`). Returns the widget box;
    `box.controls` holds the dropdowns and `box.report` the HTML output."""
    import ipywidgets as w
    opts = [8, 16, 32, 64, 128, 256]
    bq = w.Dropdown(options=opts, value=64, description="block_q Br")
    bk = w.Dropdown(options=opts, value=64, description="block_k Bc")
    th = w.Dropdown(options=[32, 64, 128, 256, 512, 1024, 2048], value=256,
                    description="threads")
    tmw = w.Dropdown(options=[1, 2, 4, 8, 16], value=4, description="tm (rows/thread)")
    hd = w.Dropdown(options=[32, 64, 96, 128, 256], value=head_dim, description="d")
    sl = w.Dropdown(options=[1024, 4096, 16384], value=seq_len, description="N")
    out = w.HTML()

    def refresh(_=None):
        out.value = widget_report(bq.value, bk.value, th.value, tmw.value, hd.value, sl.value,
                                  measure=measure, cpu_seq_len=cpu_seq_len)

    for c in (bq, bk, th, tmw, hd, sl):
        c.observe(refresh, names="value")
    refresh()
    box = w.VBox([w.HBox([bq, bk, th]), w.HBox([tmw, hd, sl]), out])
    box.refresh = refresh
    box.controls = {"block_q": bq, "block_k": bk, "threads": th, "tm": tmw, "head_dim": hd,
                    "seq_len": sl}
    box.report = out
    return box
