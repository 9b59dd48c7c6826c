"""The tuning explorer: one launch configuration of the CUDA flash kernel, judged and timed.

    from flashcourse.widgets.tuning import tuning_explorer
    tuning_explorer(head_dim=64, seq_len=4096, measure=True, cpu_seq_len=256)

Menus for block_q (Br), block_k (Bc), threads per block, tm (query rows per thread),
d and N. Each option that cannot launch together with the other five choices is marked
in its menu before it is picked, with the reason in a few words ('2048 (cannot launch:
threads per block: 2,048 > 1,024)', `flashcourse.configs.launch_problem`; a menu none
of whose options would help is left plain, so the marks point at the menu to change); it
can still be picked, and then the report's place holds the full message. The report
(`tuning_report`, a pure function of the setting apart from the optional timing) shows
the kernel's shared memory, the model's on-chip footprint, registers, occupancy and its
limiter, the model's traffic, a timing (on this GPU, or of `flashcourse.cpu.forward`
without one) and the recorded H200 sweep's row.
The judging and timing helpers live in `flashcourse.configs` (a configuration's shape),
`flashcourse.limits` (launch limits, occupancy), `flashcourse.results` (the recorded
sweep) and `flashcourse.sweep` (timing on this GPU or the CPU).
"""

from __future__ import annotations

import html

from ..configs import describe_config, launch_problem
from ..limits import PRESETS, DeviceLimits
from ..memory import format_bytes
from ..results import load_sweep, recorded_limits, recorded_regs, recorded_row
from ..sweep import cpu_time, gpu_available, gpu_time
from ._base import Explorer, check_flag, check_int_arg, describe, html_box, menu, row

BLOCKS = (8, 16, 32, 64, 128, 256)
THREADS = (32, 64, 128, 256, 512, 1024, 2048)    # 2048: to meet the 1,024-per-block limit
TMS = (1, 2, 4, 8, 16)
HEAD_DIMS = (32, 64, 96, 128, 256)
SEQ_LENS = (1024, 4096, 16384)
#: The longest sequence timed on the CPU (no GPU): one call at N = 2,048, d = 256 takes a
#: few seconds on a 2-core machine, and each setting is timed several times.
MAX_CPU_SEQ_LEN = 2048


def _threads_limit_message(threads: int, limits: DeviceLimits) -> str | None:
    if threads <= limits.max_threads_per_block:
        return None
    return (f"threads = {threads:,}: a CUDA thread block holds at most "
            f"{limits.max_threads_per_block:,} threads (a hardware limit of every NVIDIA GPU "
            f"since compute capability 2.0; {limits.name}). Choose "
            f"{limits.max_threads_per_block:,} or fewer.")


def _recorded_line(rec, doc, seq_len) -> str:
    esc = html.escape
    if doc is None:
        return ("no recorded H200 sweep exists yet "
                "(benchmarks/results/h200_tuning_sweep.json)")
    if rec is None:
        return f"this configuration was not timed at N={seq_len} in the recorded sweep"
    if rec.get("tflops"):
        return (f"recorded on {esc(str(doc['environment'].get('gpu')))} (B x H = "
                f"{doc['problem'].get('batch_heads')}): {rec['median_ms']:.3f} ms, "
                f"{rec['tflops']:.2f} TFLOP/s")
    why = str(rec.get("error") or "")
    if rec.get("status") == "skipped" or "time budget" in why:
        return (f"not timed in the recorded sweep: the sweep's time budget ran out before it "
                f"reached this configuration at N={seq_len} (nothing is known about its speed)")
    return f"recorded on the H200: failed ({esc(why)})"


def limits_arg(limits) -> DeviceLimits | None:
    """`limits` as the explorer and the report take it: None (this GPU's, or the recorded
    H200's), a `flashcourse.limits.DeviceLimits`, or the name of a GPU whose published
    limits are known ("H200", "T4", ...: a key of `flashcourse.limits.PRESETS`).
    ValueError naming `limits` and what it may be for anything else."""
    if limits is None or isinstance(limits, DeviceLimits):
        return limits
    if isinstance(limits, str) and limits in PRESETS:
        return PRESETS[limits]
    raise ValueError(f"limits must be a GPU name ({', '.join(map(repr, PRESETS))}), a "
                     "flashcourse.limits.DeviceLimits, or None (this GPU's limits, else the "
                     f"recorded H200's), got {describe(limits)}")


def report_limits(limits=None, measure: bool = True) -> DeviceLimits:
    """The limits a setting is judged against: `limits` if given (see `limits_arg`), else
    this GPU's when measuring on one, else the recorded H200's."""
    limits = limits_arg(limits)
    if limits is not None:
        return limits
    return DeviceLimits.from_device() if measure and gpu_available() else recorded_limits()


#: The menus whose options can make a configuration unable to launch (N cannot).
MARKED = ("block_q", "block_k", "threads", "tm", "head_dim")


def option_labels(setting: dict, limits: DeviceLimits, doc=None) -> dict:
    """{menu: ((label, value), ...)} for the menus in MARKED: each option as the number,
    or 'value (cannot launch: why)' when it cannot launch with the other choices of
    `setting` ({block_q, block_k, threads, tm, head_dim}: values). Registers per thread
    recorded by the sweep (`doc`) count, as in the report.

    A menu none of whose options launches with the others (threads = 2,048 makes every
    block_q fail) is left unmarked when another menu holds a fix, so the marks point at
    the menus to change; when no single menu can fix the setting, all are marked.
    """
    whys = {}
    for name, values in zip(MARKED, (BLOCKS, BLOCKS, THREADS, TMS, HEAD_DIMS)):
        whys[name] = []
        for v in values:
            c = dict(setting, **{name: v})
            args = (c["block_q"], c["block_k"], c["threads"], c["tm"], c["head_dim"])
            regs = recorded_regs(args[4], *args[:4], doc) if doc else None
            whys[name].append((v, launch_problem(*args, limits, regs_per_thread=regs)))
    fixable = {name for name, pairs in whys.items() if any(w is None for _, w in pairs)}
    return {name: tuple((f"{v} (cannot launch: {why})"
                         if why and (name in fixable or not fixable) else f"{v}", v)
                        for v, why in pairs)
            for name, pairs in whys.items()}


def tuning_report(block_q, block_k, threads, tm, head_dim, seq_len, *, limits=None,
                  measure: bool = True, cpu_seq_len: int = 256, doc=None) -> str:
    """The explorer's HTML for one setting. Raises ValueError for a setting that cannot
    launch (the explorer shows it as its one-line message), and for a `limits`,
    `measure` or `cpu_seq_len` (1 .. MAX_CPU_SEQ_LEN) it cannot take, naming it; timing
    failures become a line of the report."""
    esc = html.escape
    measure = check_flag(measure, "measure")
    cpu_seq_len = check_int_arg(cpu_seq_len, "cpu_seq_len", 1, MAX_CPU_SEQ_LEN)
    if doc is None:
        doc = load_sweep()
    limits = report_limits(limits, measure)
    too_many = _threads_limit_message(threads, limits)
    if too_many:
        raise ValueError(too_many)
    regs = recorded_regs(head_dim, block_q, block_k, threads, tm, doc) if doc else None
    try:
        info = describe_config(block_q, block_k, threads, tm, head_dim, seq_len, limits,
                               regs_per_thread=regs)
    except TypeError as exc:
        raise ValueError(str(exc)) from exc
    cfg, occ = info["config"], info["occupancy"]
    regs_txt = (f"{regs} (recorded on the H200)" if regs else
                "unknown until compiled on a GPU: register limit not applied")
    optin = "needs the opt-in beyond 48 KiB" if cfg.shared_bytes > 49152 else "fits in 48 KiB"
    lines = [
        f"<b>{esc(cfg.label)}, d={head_dim}, N={seq_len}</b> (limits: {esc(limits.name)})",
        f"per thread: a {cfg.micro_q} x {cfg.micro_k} score micro-tile and a "
        f"{cfg.micro_q} x {cfg.micro_d} output micro-tile in registers",
        f"shared memory per block (Q, K, V, P tiles, fp32): "
        f"{esc(format_bytes(cfg.shared_bytes))} of {limits.smem_per_block_optin:,} B allowed "
        f"({optin})",
        f"model's on-chip footprint (Q, K, V, S tiles, accumulator, m, l): "
        f"{esc(format_bytes(info['model_footprint_bytes']))}",
        f"registers per thread: {esc(str(regs_txt))}",
        f"occupancy: {esc(occ.describe())}",
        f"model traffic per head: {esc(format_bytes(info['traffic'].total_bytes))} "
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
                    lines.append(f"measurement failed: {esc(str(t.get('error')))}")
            else:
                t = cpu_time(block_q, block_k, cpu_seq_len, head_dim)
                lines.append(f"no GPU: flashcourse.cpu.forward at N={cpu_seq_len} with Br, Bc "
                             f"as chosen: {t['median_ms']:.2f} ms, {t['gflops']:.2f} GFLOP/s, "
                             f"rel. error {t['rel_err']:.1e}")
        except Exception as exc:  # noqa: BLE001 - a timing failure is a line of the report
            lines.append(f"timing failed: {esc(type(exc).__name__)}: {esc(str(exc))[:300]}")
    rec = recorded_row(head_dim, seq_len, block_q, block_k, threads, tm, doc) if doc else None
    lines.append(_recorded_line(rec, doc, seq_len))
    return "<br>".join(lines)


class TuningExplorer(Explorer):
    """The tuning explorer (a VBox). Controls in `.controls`, the HTML in `.report`."""

    css_class = "fc-tuning"
    blanked = ("report",)
    error_title = "Cannot launch:"

    def __init__(self, head_dim=64, seq_len=4096, *, block_q=64, block_k=64, threads=256,
                 tm=4, measure=True, cpu_seq_len=256, limits=None):

        self.block_q = menu(BLOCKS, block_q, "block_q", "block_q (Br)")
        self.block_k = menu(BLOCKS, block_k, "block_k", "block_k (Bc)")
        self.threads = menu(THREADS, threads, "threads", "threads per block")
        self.tm = menu(TMS, tm, "tm", "tm (query rows per thread)")
        self.head_dim = menu(HEAD_DIMS, head_dim, "head_dim", "d")
        self.seq_len = menu(SEQ_LENS, seq_len, "seq_len", "N")
        # checked here, so a wrong one is a ValueError naming it, as for every explorer
        self.measure = check_flag(measure, "measure")
        self.cpu_seq_len = check_int_arg(cpu_seq_len, "cpu_seq_len", 1, MAX_CPU_SEQ_LEN)
        self.limits = limits_arg(limits)
        self.controls = {"block_q": self.block_q, "block_k": self.block_k,
                         "threads": self.threads, "tm": self.tm, "head_dim": self.head_dim,
                         "seq_len": self.seq_len}
        self.report = html_box("fc-tuning-readout")
        self._relabelling = False
        self._doc = load_sweep()
        super().__init__(
            "<b>Tuning the CUDA flash kernel</b>: one launch configuration",
            [row(self.block_q, self.block_k, self.threads),
             row(self.tm, self.head_dim, self.seq_len)],
            self.report)
        self.watch(*self.controls.values())
        self.refresh()

    def refresh(self, _change=None):
        if not self._relabelling:           # new labels are not a new setting
            super().refresh()

    def relabel(self, limits) -> None:
        """Mark, in each menu, the options that cannot launch with the other choices."""
        setting = {name: self.controls[name].value for name in MARKED}
        self._relabelling = True
        try:
            for name, options in option_labels(setting, limits, self._doc).items():
                menu = self.controls[name]
                if tuple(menu.options) != options:
                    with menu.hold_sync():          # one message: new labels, same value
                        menu.options = options      # (this selects the first option)
                        menu.value = setting[name]
        finally:
            self._relabelling = False

    def update(self):
        limits = report_limits(self.limits, self.measure)
        self.relabel(limits)
        self.report.value = tuning_report(
            self.block_q.value, self.block_k.value, self.threads.value, self.tm.value,
            self.head_dim.value, self.seq_len.value, limits=limits,
            measure=self.measure, cpu_seq_len=self.cpu_seq_len, doc=self._doc)


def tuning_explorer(head_dim: int = 64, seq_len: int = 4096, **kwargs) -> TuningExplorer:
    """Widget: choose Br, Bc, threads, tm, d, N and read the kernel's report.

    Keyword arguments: block_q, block_k, threads, tm (starting values), measure (True or
    False: time each setting, on this GPU, else flashcourse.cpu.forward at cpu_seq_len,
    1 .. 2,048), limits (a GPU name such as "H200" or "T4", or a
    `flashcourse.limits.DeviceLimits`; default this GPU or the recorded H200). A value
    it cannot take raises a ValueError naming it. Returns the widget without displaying
    it: put the call last in a cell.
    """
    return TuningExplorer(head_dim, seq_len, **kwargs)
