"""The numbers behind the widgets: pure functions, tested without a browser.

    score_memory_readout(t_query, t_key, dtype, batch, heads, causal, gpu)
    score_memory_curve(t_query, t_key, dtype, batch, heads, tied, gpu)
    traffic_readout(t, head_dim, block_q, block_k, budget_bytes, dtype, loop_order, causal, gpu)
    schedule_steps(t_query, t_key, head_dim, block_q, block_k, causal, loop_order)
    describe_step(step, n_steps), ragged_blocks_note(t_query, t_key, block_q, block_k)

They raise ValueError (a message that names the setting) for settings that make no
sense; the widgets of the `flashcourse.widgets` package catch it and show the message
instead of a traceback. Byte counts are printed exactly, with thousands separators, and in
binary units (`flashcourse.memory.format_bytes`: 33,554,432 B = 32 MiB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._checks import check_count
from ..counter import TrafficCounter
from ..geometry import ceil_div
from ..gpus import GPU, GPUS
from ..memory import BYTES_PER_SCORE, format_bytes, score_matrix_bytes
from ..printing import compare
from ..traffic import (
    arithmetic_intensity,
    attention_flops,
    dense_traffic,
    paper_block_sizes,
    roofline_time_s,
    tile_footprint_bytes,
    tiled_traffic,
)

DTYPES = tuple(BYTES_PER_SCORE)              # ('fp64', 'fp32', 'fp16', 'bf16', 'fp8')
DEFAULT_GPU = "A100 80GB"
MAX_LOG2_LENGTH = 40                         # lengths up to 2**40 = 1,099,511,627,776 positions
MAX_COUNT = 2 ** 20                          # batch B, heads H: at most 1,048,576 each
MAX_HEAD_DIM = 4096                          # d (elements) in the traffic explorer
MAX_BLOCK = 2 ** 16                          # Br, Bc (rows) in the traffic explorer
MAX_LENGTH = 2 ** MAX_LOG2_LENGTH
MAX_SCHEDULE_LENGTH = 256                    # the tile schedule replays a real run: keep it small
MAX_SCHEDULE_TILES = 1024                    # tiles drawn at once (Tr x Tc)


# ----------------------------------------------------------------------------------------
# Pure helpers: validation and formatting
# ----------------------------------------------------------------------------------------

def _positive_int(value, what: str, most: int | None = None) -> int:
    """`value` as an int in [1, most], else ValueError naming `what` (a setting the learner
    sees). A float with a whole value (3e9) is accepted as that integer."""
    return check_count(value, what, most, whole_floats=True)


def _dtype_bytes(dtype: str) -> int:
    if dtype not in BYTES_PER_SCORE:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return BYTES_PER_SCORE[dtype]


def _gpu(gpu) -> GPU:
    if isinstance(gpu, GPU):
        return gpu
    if gpu not in GPUS:
        raise ValueError(f"gpu must be one of {', '.join(GPUS)}, got {gpu!r}")
    return GPUS[gpu]


def _times(big: float, small: float) -> str:
    """'143x' style ratio, with sensible rounding."""
    r = big / small
    return f"{r:,.0f}x" if r >= 10 else f"{r:,.1f}x"


def format_seconds(t: float) -> str:
    """Seconds with a readable unit: 1.5e-5 -> '15 us'."""
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
        if t >= scale:
            return f"{t / scale:,.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def format_flops(n: int) -> str:
    """Exact FLOP count and a short form: 4,294,967,296 FLOP (4.29 GFLOP)."""
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n:,} FLOP ({n / scale:.3g} {unit})"
    return f"{n:,} FLOP"


# ----------------------------------------------------------------------------------------
# 1. Score memory
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScoreMemoryReadout:
    """Numbers shown by the score-memory explorer (all bytes)."""

    t_query: int
    t_key: int
    dtype: str
    bytes_per_score: int
    batch: int
    heads: int
    causal: bool
    gpu: GPU
    per_head_bytes: int          # M_score = Tq Tk s: what a dense kernel allocates per head
    total_bytes: int             # B x H x M_score
    causal_bytes: int | None     # per head, visible pairs only (a packed causal store)
    fits_on_chip: bool           # per-head matrix <= on-chip memory of one SM
    fits_l2: bool                # per-head matrix <= L2 cache
    fits_device: bool            # batch total <= device memory
    lines: tuple = field(default_factory=tuple)

    @property
    def headline(self) -> str:
        return self.lines[0]


def score_memory_readout(t_query, t_key, dtype="fp16", batch=1, heads=1, causal=False,
                         gpu=DEFAULT_GPU) -> ScoreMemoryReadout:
    """M_score per head and per batch against one GPU's memories.

    Args:
        t_query, t_key: Tq, Tk (positions, >= 1).
        dtype: score format, a key of `flashcourse.memory.BYTES_PER_SCORE` (s bytes/score).
        batch, heads: B requests and H heads (>= 1); the batch holds B x H score matrices.
        causal: also report the visible-pair count a triangular (packed) store would need;
            a dense kernel still allocates the full Tq x Tk rectangle.
        gpu: a key of `flashcourse.gpus.GPUS` or a `GPU`.

    >>> score_memory_readout(4096, 4096, "fp16").headline
    'M_score per head: 33,554,432 B = 32 MiB'
    """
    tq = _positive_int(t_query, "Tq (query positions)", MAX_LENGTH)
    tk = _positive_int(t_key, "Tk (key positions)", MAX_LENGTH)
    s = _dtype_bytes(dtype)
    b = _positive_int(batch, "batch", MAX_COUNT)
    h = _positive_int(heads, "heads", MAX_COUNT)
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    g = _gpu(gpu)

    per_head = score_matrix_bytes(tq, tk, s)                     # Tq * Tk * s
    total = per_head * b * h
    causal_bytes = score_matrix_bytes(tq, tk, s, causal=True) if causal else None
    smem, l2, dev = g.smem_per_sm_bytes, g.l2_bytes, g.memory_bytes

    def verdict(n, cap, plural=False):
        if n <= cap:
            return "fit" if plural else "fits"
        return f"{'do' if plural else 'does'} NOT fit ({_times(n, cap)} too large)"

    lines = [
        f"M_score per head: {format_bytes(per_head)}",
        f"M_score for the batch (B x H = {b:,} x {h:,} = {b * h:,} matrices): "
        f"{format_bytes(total)}",
    ]
    if causal:
        lines.append(
            f"Causal: only {causal_bytes // s:,} of the {tq * tk:,} pairs are visible "
            f"({format_bytes(causal_bytes)} per head if a packed triangular store kept only "
            f"those); a dense kernel still allocates the full rectangle.")
    lines += [
        f"{g.name} on-chip memory per SM: {format_bytes(smem)}: one head's matrix "
        f"{verdict(per_head, smem)}",
        f"{g.name} L2 cache: {format_bytes(l2)}: one head's matrix {verdict(per_head, l2)}",
        f"{g.name} device memory: {format_bytes(dev)}: the batch's matrices "
        f"{verdict(total, dev, plural=True)}"
        + (f" ({100 * total / dev:.2g}% of it)" if total <= dev else ""),
    ]
    return ScoreMemoryReadout(tq, tk, dtype, s, b, h, bool(causal), g, per_head, total,
                              causal_bytes, per_head <= smem, per_head <= l2, total <= dev,
                              tuple(lines))


@dataclass(frozen=True)
class ScoreMemoryCurve:
    """M_score against length, for the plot.

    x: lengths (positions); per_head, batch: bytes at each x (float64 arrays: exact up to
    2**53 and never overflowing, unlike int64 at N ~ 3e9). If `tied`, x is N = Tq = Tk;
    otherwise x is Tk with Tq fixed. limits: (label, capacity bytes, largest fitting x or
    None if even x = 1 does not fit, curve name 'per_head' or 'batch').
    """

    x: np.ndarray
    per_head: np.ndarray
    batch: np.ndarray
    tied: bool
    current_x: int
    current_per_head: int
    current_batch: int
    limits: tuple


def _largest_fitting(capacity: int, coeff: int, tied: bool) -> int | None:
    """Largest integer x with coeff * x**2 <= capacity (tied) or coeff * x <= capacity."""
    n = math.isqrt(capacity // coeff) if tied else capacity // coeff
    return n if n >= 1 else None


def score_memory_curve(t_query, t_key, dtype="fp16", batch=1, heads=1, tied=True,
                       gpu=DEFAULT_GPU) -> ScoreMemoryCurve:
    """The plot's curve: M_score against N = Tq = Tk (tied) or against Tk (Tq fixed).

    Also returns, for each memory of the GPU, the largest length that still fits:
    one head's matrix against on-chip memory per SM and L2, the whole batch against
    device memory.
    """
    r = score_memory_readout(t_query, t_key, dtype, batch, heads, False, gpu)
    bh = r.batch * r.heads
    x_max = max(2 ** 20, 2 * (r.t_query if tied else r.t_key))
    x = np.unique(np.round(np.geomspace(1.0, float(x_max), 400)))     # (<= 400,) float64
    s = r.bytes_per_score
    per_head = (x * x * s) if tied else (float(r.t_query) * x * s)    # bytes, float64
    coeff_head = s if tied else r.t_query * s
    g = r.gpu
    limits = (
        ("on-chip memory per SM", g.smem_per_sm_bytes,
         _largest_fitting(g.smem_per_sm_bytes, coeff_head, tied), "per_head"),
        ("L2 cache", g.l2_bytes, _largest_fitting(g.l2_bytes, coeff_head, tied), "per_head"),
        ("device memory", g.memory_bytes,
         _largest_fitting(g.memory_bytes, coeff_head * bh, tied), "batch"),
    )
    return ScoreMemoryCurve(x, per_head, per_head * bh, bool(tied),
                            r.t_key if not tied else r.t_query, r.per_head_bytes,
                            r.total_bytes, limits)


# ----------------------------------------------------------------------------------------
# 2. Traffic
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrafficReadout:
    """Numbers shown by the traffic explorer (bytes, FLOP, FLOP/byte, seconds)."""

    dense: object                 # flashcourse.traffic.Traffic
    tiled: object
    ratio: float                  # dense.total_bytes / tiled.total_bytes
    flops: int                    # useful FLOPs: the same for dense and tiled
    intensity_dense: float        # FLOP / byte
    intensity_tiled: float
    time_dense_s: float           # roofline lower bound on the chosen GPU
    time_tiled_s: float
    peak_flops_per_s: float
    footprint_bytes: int          # on-chip bytes of one tile step
    budget_bytes: int
    fits_budget: bool
    blocks_per_sm: int            # floor(smem_per_sm / footprint)
    gpu: GPU
    warnings: tuple = ()
    lines: tuple = ()


def traffic_readout(t, head_dim, block_q, block_k, budget_bytes, dtype="fp16",
                    loop_order="fa2", causal=False, gpu=DEFAULT_GPU) -> TrafficReadout:
    """Dense (Algorithm 0) against tiled traffic for one head, Tq = Tk = T.

    Args:
        t: T, sequence length (positions); head_dim: d.
        block_q, block_k: Br, Bc (rows per tile); each at most T.
        budget_bytes: on-chip memory one tile step may use (bytes).
        dtype: Q/K/V/O element and stored-score format (e = s bytes).
        loop_order: 'fa2' or 'fa1'; causal: bottom-right aligned mask, hidden tiles skipped.
        gpu: preset whose bandwidth and peak FLOP/s give the roofline bound
            max(FLOPs / peak, bytes / bandwidth); fp16/bf16/fp8 use the fp16 tensor-core peak,
            fp32/fp64 the fp32 peak (optimistic for fp64).

    A footprint above the budget, or too little room for two resident blocks on one SM,
    is reported in `warnings` (the numbers are still computed). A block larger than T is
    allowed: the kernel's tile keeps its Br (or Bc) rows of on-chip memory, and the one
    ragged block holds the T real rows (noted in `lines`).
    """
    t = _positive_int(t, "T (sequence length)", MAX_LENGTH)
    d = _positive_int(head_dim, "d (head dimension)", MAX_HEAD_DIM)
    br = _positive_int(block_q, "block_q (Br)", MAX_BLOCK)
    bc = _positive_int(block_k, "block_k (Bc)", MAX_BLOCK)
    budget = _positive_int(budget_bytes, "on-chip budget (bytes)")
    e = _dtype_bytes(dtype)
    if loop_order not in ("fa1", "fa2"):
        raise ValueError(f"loop order must be 'fa1' or 'fa2', got {loop_order!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    g = _gpu(gpu)

    dense = dense_traffic(t, t, d, bytes_per_element=e, bytes_per_score=e)
    tiled = tiled_traffic(t, t, d, br, bc, causal=bool(causal), loop_order=loop_order,
                          bytes_per_element=e)
    flops = attention_flops(t, t, d, causal=bool(causal))
    peak = g.fp16_tensor_flops_per_s if e <= 2 else g.fp32_flops_per_s
    bw = g.bandwidth_bytes_per_s
    time_dense = roofline_time_s(flops, dense.total_bytes, peak, bw)
    time_tiled = roofline_time_s(flops, tiled.total_bytes, peak, bw)
    foot = tile_footprint_bytes(br, bc, d, bytes_per_element=e)
    blocks = g.smem_per_sm_bytes // foot
    ratio = dense.total_bytes / tiled.total_bytes

    warnings = []
    if foot > budget:
        paper = paper_block_sizes(budget, d, e)
        why = ""
        if (br, bc) == (min(paper[0], t), min(paper[1], t)):
            why = (" The paper's rule (Bc = ceil(M / 4d), Br = min(Bc, d), M = budget / e "
                   "elements) sizes only the Q, K, V and O tiles; this footprint also counts "
                   "the Br x Bc score tile (fp32), the fp32 accumulator and m, l, so the "
                   "paper's tile overshoots. The button 'paper's Br, Bc for this budget' "
                   "picks the largest tile of the paper's shape whose whole footprint fits.")
        warnings.append(
            f"Tile footprint {format_bytes(foot)} exceeds the on-chip budget "
            f"{format_bytes(budget)}: this tile no longer fits the scratchpad (shared "
            f"memory). Choose a smaller block_q or block_k.{why}")
    if budget > g.smem_per_block_optin_bytes:
        warnings.append(
            f"The budget {format_bytes(budget)} is more than one thread block may use on "
            f"{g.name} ({format_bytes(g.smem_per_block_optin_bytes)}).")
    if blocks == 0:
        warnings.append(
            f"The footprint is larger than all {format_bytes(g.smem_per_sm_bytes)} of shared "
            f"memory on one {g.name} SM: not even one block can be resident. Big tiles cut "
            f"residency.")
    elif blocks == 1:
        warnings.append(
            f"Only 1 block of {format_bytes(foot)} fits in the "
            f"{format_bytes(g.smem_per_sm_bytes)} of one {g.name} SM at once: big tiles "
            f"cut residency, leaving no other block to hide memory latency.")

    mode = "causal, " if causal else ""
    ragged = [f"{name} = {b:,} > T = {t:,}: one ragged block of {t:,} row{'s' if t > 1 else ''}"
              for name, b in (("Br", br), ("Bc", bc)) if b > t]
    lines = (
        f"Dense (Algorithm 0): read {format_bytes(dense.read_bytes)}, "
        f"write {format_bytes(dense.write_bytes)}, total {format_bytes(dense.total_bytes)}",
        f"Tiled ({loop_order}, {mode}Br = {br}, Bc = {bc}): read "
        f"{format_bytes(tiled.read_bytes)}, write {format_bytes(tiled.write_bytes)}, "
        f"total {format_bytes(tiled.total_bytes)}",
        (f"Tiled moves {compare(tiled.total_bytes, dense.total_bytes, digits=2)} than dense"
         if tiled.total_bytes != dense.total_bytes else "Tiled moves as many bytes as dense")
        + (f" ({'; '.join(ragged)})" if ragged else ""),
        (f"FLOPs of the visible pairs (the same for dense and tiled; a dense kernel may "
         f"also compute the masked ones): {format_flops(flops)}" if causal else
         f"FLOPs (the same for dense and tiled): {format_flops(flops)}"),
        f"Arithmetic intensity: dense {arithmetic_intensity(flops, dense):,.1f} FLOP/B, "
        f"tiled {arithmetic_intensity(flops, tiled):,.1f} FLOP/B",
        f"Roofline lower bound on {g.name} ({peak / 1e12:,.1f} TFLOP/s, "
        f"{bw / 1e12:,.2f} TB/s): dense {format_seconds(time_dense)}, "
        f"tiled {format_seconds(time_tiled)}",
        f"Tile footprint on chip: {format_bytes(foot)} of a {format_bytes(budget)} budget; "
        f"blocks per SM = {format_bytes(g.smem_per_sm_bytes)} / footprint, rounded down, "
        f"= {blocks}",
    )
    return TrafficReadout(dense, tiled, ratio, flops, arithmetic_intensity(flops, dense),
                          arithmetic_intensity(flops, tiled), time_dense, time_tiled, peak,
                          foot, budget, foot <= budget, blocks, g, tuple(warnings), lines)


def paper_tile_that_fits(budget_bytes, head_dim, dtype="fp16", t=None) -> tuple:
    """(Br, Bc, paper_Br, paper_Bc): the paper's tile for this budget, reconciled with the
    footprint the traffic explorer counts.

    The paper's rule (`flashcourse.traffic.paper_block_sizes`: Bc = ceil(M / 4d),
    Br = min(Bc, d), M = budget / e elements) sizes only the Q, K, V and O tiles.
    `tile_footprint_bytes` also counts the Br x Bc fp32 score tile, the fp32 accumulator
    and m, l, so the paper's tile does not fit its own budget there. This returns the
    largest tile of the paper's shape (Br = min(Bc, d)) whose whole footprint fits, with
    Bc counted down from the paper's value, and both capped at `t` rows when given.
    Raises ValueError when not even Br = Bc = 1 fits.

    >>> paper_tile_that_fits(64 * 1024, 64, "fp16")
    (64, 79, 64, 128)
    """
    budget = _positive_int(budget_bytes, "on-chip budget (bytes)")
    d = _positive_int(head_dim, "d (head dimension)", MAX_HEAD_DIM)
    e = _dtype_bytes(dtype)
    cap = MAX_BLOCK if t is None else _positive_int(t, "T (sequence length)", MAX_LENGTH)
    pbr, pbc = paper_block_sizes(budget, d, e)
    bc = min(pbc, cap)
    # footprint grows with Bc (Br = min(Bc, d) too): a binary search for the largest fit
    def fits(c):
        return tile_footprint_bytes(min(c, d, cap), c, d, bytes_per_element=e) <= budget
    if not fits(1):
        raise ValueError(f"not even a 1 x 1 tile fits {budget:,} B with d = {d:,} "
                         f"({tile_footprint_bytes(1, 1, d, bytes_per_element=e):,} B): "
                         f"raise the budget or lower d")
    lo, hi = 1, bc
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return min(lo, d, cap), lo, pbr, pbc


# ----------------------------------------------------------------------------------------
# 3. Tile schedule
# ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ScheduleStep:
    """One step of a replayed tiled forward.

    kind: 'tile' (score tile (i, j) formed on chip), 'skip' (tile hidden by the causal
        mask, never formed), 'store' (O_i and lse_i written, fa2), 'init' (O, l, m
        initialised in outer memory, fa1).
    tile: (i, j) block indices; i or j is None for a step that belongs to a whole row or
        column (a store).
    reads, writes: ((tensor, start, stop, nbytes), ...) moved at this step.
    read_bytes, write_bytes: cumulative bytes up to and including this step.
    """

    index: int
    kind: str
    tile: tuple
    reads: tuple
    writes: tuple
    read_bytes: int
    write_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes

    @property
    def step_bytes(self) -> int:
        return sum(r[3] for r in self.reads) + sum(w[3] for w in self.writes)


def _block_edges(t: int, b: int) -> list:
    return list(range(0, t, b)) + [t]


def schedule_steps(t_query, t_key, head_dim, block_q, block_k, causal=False,
                   loop_order="fa2", *, bytes_per_element=2, seed=0) -> list:
    """Replay a real `flashcourse.tiled.forward` run as a list of `ScheduleStep`s.

    Runs the forward once on small random inputs (one head) with a `TrafficCounter`
    (e = `bytes_per_element` bytes per Q/K/V/O element, 4 per statistic) and groups its
    event log: every formed or skipped tile is one step, carrying the loads issued just
    before it (and, in fa1, the write-back of O_i, l_i, m_i after it); stores of a whole
    row (fa2: O_i, lse_i) and fa1's initialisation are steps of their own. The last
    step's cumulative bytes equal the counter's totals (and the IO model). A block larger
    than its length (Br > Tq, Bc > Tk) is one ragged block of Tq (Tk) rows.
    """
    from ..tiled import forward

    tq = _positive_int(t_query, "Tq (query positions)")
    tk = _positive_int(t_key, "Tk (key positions)")
    d = _positive_int(head_dim, "d (head dimension)")
    br = _positive_int(block_q, "block_q (Br)")
    bc = _positive_int(block_k, "block_k (Bc)")
    e = _positive_int(bytes_per_element, "bytes per element")
    if loop_order not in ("fa1", "fa2"):
        raise ValueError(f"loop order must be 'fa1' or 'fa2', got {loop_order!r}")
    if not isinstance(causal, (bool, np.bool_)):
        raise ValueError(f"causal must be True or False, got {causal!r}")
    for name, n in (("Tq", tq), ("Tk", tk)):
        if n > MAX_SCHEDULE_LENGTH:
            raise ValueError(f"{name} = {n:,} is too long to replay here: use at most "
                             f"{MAX_SCHEDULE_LENGTH}")
    # Br > Tq (or Bc > Tk) is valid: one ragged block holds the Tq (Tk) real rows, as in
    # `tiled.forward` and lab 03
    tiles = ceil_div(tq, br) * ceil_div(tk, bc)
    if tiles > MAX_SCHEDULE_TILES:
        raise ValueError(f"{tiles:,} tiles is too many to walk through (at most "
                         f"{MAX_SCHEDULE_TILES:,}): choose bigger blocks")

    if d > MAX_SCHEDULE_LENGTH:
        raise ValueError(f"d (head dimension) = {d:,} is too large to replay here: use at "
                         f"most {MAX_SCHEDULE_LENGTH}")
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) \
            or seed < 0:
        raise ValueError(f"seed must be a whole number >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((tq, d)).astype(np.float32)        # (Tq, d)
    k = rng.standard_normal((tk, d)).astype(np.float32)        # (Tk, d)
    v = rng.standard_normal((tk, d)).astype(np.float32)        # (Tk, d)
    counter = TrafficCounter(bytes_per_element=e)
    forward(q, k, v, block_q=br, block_k=bc, causal=bool(causal), loop_order=loop_order,
            counter=counter)

    raw = []                     # [kind, tile, reads, writes] before cumulative sums
    pending = []
    for ev in counter.events:
        item = (ev.tensor, ev.rows[0], ev.rows[1], ev.nbytes)
        if ev.op in ("compute", "skip"):
            kind = "tile" if ev.op == "compute" else "skip"
            raw.append([kind, ev.tile, [p for p in pending], []])
            pending = []
        elif ev.op == "read":
            pending.append(item)
        else:  # write
            last = raw[-1] if raw else None
            if (last is not None and not pending and last[0] == "tile"
                    and ev.tile == last[1]):
                last[3].append(item)                           # fa1 write-back of (i, j)
            elif (last is not None and not pending and last[0] in ("store", "init")
                  and ev.tile == last[1]):
                last[3].append(item)                           # same store, next tensor
            else:
                kind = "init" if ev.tile is None else "store"
                tile = ev.tile if ev.tile is not None else None
                raw.append([kind, tile, [p for p in pending], [item]])
                pending = []
    if pending:  # pragma: no cover - every forward ends with a store
        raw.append(["store", None, pending, []])

    steps, rd, wr = [], 0, 0
    for idx, (kind, tile, reads, writes) in enumerate(raw):
        rd += sum(r[3] for r in reads)
        wr += sum(w[3] for w in writes)
        steps.append(ScheduleStep(idx, kind, tile if tile is not None else (None, None),
                                  tuple(reads), tuple(writes), rd, wr))
    assert (rd, wr) == (counter.read_bytes, counter.write_bytes)
    return steps


def ragged_blocks_note(t_query, t_key, block_q, block_k) -> str:
    """'' or one sentence for blocks larger than their length (each is one ragged block).

    >>> ragged_blocks_note(20, 80, 32, 32)
    'Br = 32 > Tq = 20: one ragged query block of 20 rows.'
    """
    parts = [f"{name} = {b:,} > {tn} = {t:,}: one ragged {what} block of {t:,} "
             f"row{'s' if t > 1 else ''}"
             for name, b, tn, t, what in (("Br", block_q, "Tq", t_query, "query"),
                                          ("Bc", block_k, "Tk", t_key, "key")) if b > t]
    return "; ".join(parts) + "." if parts else ""


def describe_step(step: ScheduleStep, n_steps: int) -> str:
    """One line of plain text for a schedule step."""
    i, j = step.tile
    what = {
        "tile": f"score tile S[{i},{j}] = Q_{i} K_{j}^T formed on chip, then discarded",
        "skip": f"tile ({i},{j}) skipped: the causal mask hides all of it",
        "store": f"O_{i} and lse_{i} written to outer memory",
        "init": "O, l, m initialised in outer memory",
    }[step.kind]

    def moved(items):
        return ", ".join(f"{t}[{a}:{b}]" for t, a, b, _ in items)

    parts = [f"Step {step.index + 1} of {n_steps}: {what}."]
    if step.reads:
        parts.append(f"Loaded {moved(step.reads)}.")
    if step.writes:
        parts.append(f"Stored {moved(step.writes)}.")
    return " ".join(parts)
