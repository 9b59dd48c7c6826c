"""The IO model: bytes moved between outer memory (HBM) and on-chip memory, per head.

Two levels of memory, as in the FlashAttention paper (Dao et al., 2022, section 3.2):
outer memory (HBM: large, slow, holds Q, K, V, O) and on-chip memory (SRAM / shared
memory: small, fast, holds the tiles being worked on). The model counts every byte
that crosses between the two, for ONE head of ONE request:

    e   bytes per Q/K/V/O element      (2 for fp16/bf16, 4 for fp32)
    s   bytes per stored score         (S and P of the dense path)
    4   bytes per softmax statistic    (m, l or lse; always fp32)
    Tq, Tk  query / key positions;  d  head dimension;  Br, Bc  tile rows / columns

Standard attention (`dense_traffic`, the paper's Algorithm 0: three separate passes)

    S = Q K^T      reads Q, K  (Tq + Tk) d e      writes S  Tq Tk s
    P = softmax(S) reads S     Tq Tk s            writes P  Tq Tk s
    O = P V        reads P, V  Tq Tk s + Tk d e   writes O  Tq d e

    reads  = (Tq + 2 Tk) d e + 2 Tq Tk s          writes = 2 Tq Tk s + Tq d e

Tiled attention (`tiled_traffic`): no score ever leaves the chip. With
Tr = ceil(Tq / Br) query blocks and Tc = ceil(Tk / Bc) key blocks,

    "fa2" (FlashAttention-2 order, outer loop over query blocks):
        reads  = Tq d e + sum over visible (i, j) pairs of 2 rows(K_j) d e
        writes = Tq d e + 4 Tq                        (O and lse, once each)
      non-causal: reads = Tq d e + 2 Tr Tk d e: K and V are re-read once per query block.

    "fa1" (FlashAttention Algorithm 1, outer loop over key blocks):
        O, l, m initialised in outer memory            writes Tq d e + 8 Tq
        K_j, V_j read once                             reads  2 Tk d e
        per visible pair: read Q_i, O_i, l_i, m_i      reads  rows(Q_i) (2 d e + 8)
                          write O_i, l_i, m_i          writes rows(Q_i) (d e + 8)
      (Algorithm 1 returns O and keeps l, m; it writes no separate lse.)

A ragged last block counts its real rows. With `causal=True` (bottom-right aligned:
query i sees key j iff j <= i + Tk - Tq) a pair of blocks is skipped only when the
mask hides all of it (`flashcourse.geometry.tile_visibility` says "hidden"); partly
visible tiles are loaded whole.

Asymptotics (FlashAttention Theorem 2, N = Tq = Tk, M = on-chip memory in elements,
d <= M <= N d): standard attention needs Theta(N d + N^2) HBM accesses; the tiled
algorithm Theta(N^2 d^2 / M). With the paper's block sizes Bc = ceil(M / 4d) and
Br = min(ceil(M / 4d), d), there are Tr = N / Br query blocks and the N d elements
of K and V are re-read Tr times (fa2) -- or O is read/written Tc = N / Bc times
(fa1) -- so traffic ~ N^2 d / B ~ N^2 d^2 / M. The ratio to the N^2 term is d^2 / M:
about 0.08 for d = 64 and M = 50K elements (100 KiB of fp16), 0.3 for d = 128, so several
times fewer bytes, although the FLOPs (`attention_flops`) are identical: tiling removes
the stored N x N intermediate, not the N^2 pair interactions. (With Br capped at d, the
fa2 count stops falling once M > 4 d^2; Theorem 2 is stated for Algorithm 1, whose O
traffic keeps falling with Bc. figures/traffic_vs_budget.png shows both.)

What the model leaves out: caches between HBM and the chip (the L2 cache of a GPU,
tens of MiB, serves many K/V re-reads without touching HBM, so measured DRAM traffic
of the tiled kernel is lower than this model says -- the measured-traffic lessons show
it), masks or dropout stored in memory, padding, and several heads or requests sharing
loads. The backward pass has its own counts (`backward_flops`, `backward_traffic`,
below). It is a count of the bytes the algorithm asks for, not a timing model;
`roofline_time_s` turns it into a lower bound on time. The causal sums are exact, in
closed form (`flashcourse.geometry`), for any length.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ._checks import check_block, check_bool, check_causal, check_loop_order, check_sizes
from .geometry import causal_block_sums, ceil_div, visible_pairs

#: Bytes per softmax statistic (m, l, lse): always fp32.
BYTES_PER_STAT = 4


@dataclass(frozen=True)
class Traffic:
    """Bytes moved between outer memory and the chip (for one head).

    read_bytes: loaded from outer memory (bytes).
    write_bytes: stored to outer memory (bytes).
    """

    read_bytes: int
    write_bytes: int

    @property
    def total_bytes(self) -> int:
        """read_bytes + write_bytes (bytes)."""
        return self.read_bytes + self.write_bytes

    def __add__(self, other: "Traffic") -> "Traffic":
        if not isinstance(other, Traffic):
            return NotImplemented
        return Traffic(self.read_bytes + other.read_bytes,
                       self.write_bytes + other.write_bytes)

    def __mul__(self, n: int) -> "Traffic":
        """Traffic of n identical heads/requests."""
        n = check_block(n, "n")
        return Traffic(self.read_bytes * n, self.write_bytes * n)

    __rmul__ = __mul__


# ---------------------------------------------------------------------------
# Standard (dense) attention
# ---------------------------------------------------------------------------

def dense_traffic(t_query: int, t_key: int, head_dim: int, *, bytes_per_element: int = 2,
                  bytes_per_score: int = 2) -> Traffic:
    """Outer-memory traffic of standard attention (Algorithm 0), one head.

    reads  = (Tq + 2 Tk) d e + 2 Tq Tk s     (Q, K; S; P, V)
    writes = 2 Tq Tk s + Tq d e              (S; P; O)

    Args:
        t_query: Tq (positions). t_key: Tk (positions). head_dim: d (elements).
        bytes_per_element: e, bytes per Q/K/V/O element.
        bytes_per_score: s, bytes per stored score/probability.

    >>> dense_traffic(4096, 4096, 64).total_bytes
    136314880
    """
    tq, tk, d, e, s = check_sizes(t_query=t_query, t_key=t_key, head_dim=head_dim,
                                  bytes_per_element=bytes_per_element,
                                  bytes_per_score=bytes_per_score)
    reads = (tq + 2 * tk) * d * e + 2 * tq * tk * s
    writes = 2 * tq * tk * s + tq * d * e
    return Traffic(reads, writes)


# ---------------------------------------------------------------------------
# Tiled attention
# ---------------------------------------------------------------------------

def tiled_traffic(t_query: int, t_key: int, head_dim: int, block_q: int, block_k: int, *,
                  causal: bool = False, loop_order: str = "fa2",
                  bytes_per_element: int = 2) -> Traffic:
    """Outer-memory traffic of tiled (Flash) attention, one head. See the module docstring.

    Args:
        t_query: Tq (positions). t_key: Tk (positions). head_dim: d (elements).
        block_q: Br, query rows per tile. block_k: Bc, key rows per tile.
        causal: bottom-right aligned mask; fully hidden tiles are skipped.
        loop_order: "fa2" (outer loop over query blocks) or "fa1" (over key blocks).
        bytes_per_element: e, bytes per Q/K/V/O element. Statistics take 4 bytes.

    fa2: reads  = Tq d e + sum_visible 2 rows(K_j) d e;  writes = Tq d e + 4 Tq.
    fa1: reads  = 2 Tk d e + sum_visible rows(Q_i) (2 d e + 8);
         writes = Tq d e + 8 Tq + sum_visible rows(Q_i) (d e + 8).

    >>> tiled_traffic(4096, 4096, 64, 64, 64).total_bytes
    68173824
    """
    tq, tk, d, br, bc, e = check_sizes(t_query=t_query, t_key=t_key, head_dim=head_dim,
                                       block_q=block_q, block_k=block_k,
                                       bytes_per_element=bytes_per_element)
    causal = check_causal(causal)
    loop_order = check_loop_order(loop_order)
    st = BYTES_PER_STAT
    _, key_rows, query_rows = causal_block_sums(tq, tk, br, bc, causal)
    if loop_order == "fa2":
        reads = tq * d * e + 2 * key_rows * d * e               # Q once; K_j, V_j per pair
        writes = tq * d * e + st * tq                           # O and lse once
    else:
        reads = 2 * tk * d * e + query_rows * (2 * d * e + 2 * st)    # K, V once; Q,O,l,m
        writes = tq * d * e + 2 * st * tq + query_rows * (d * e + 2 * st)  # init; O,l,m
    return Traffic(reads, writes)


# ---------------------------------------------------------------------------
# On-chip budget and the paper's block sizes
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class TileFootprint:
    """On-chip bytes that one tile step keeps live, part by part (bytes).

    The course's ONE on-chip footprint formula (notebooks 03, 04, 07 and the widgets
    all use `tile_footprint`), for one step (i, j) of the tiled loop:

        q_bytes       Q_i             Br x d x e
        kv_bytes      K_j, V_j        2 x Bc x d x e
        score_bytes   S_ij / P_ij     Br x Bc x s    (one score tile, P overwrites S)
        acc_bytes     acc (O_i)       Br x d x a     (the unnormalised output, fp32: a = 4)
        stats_bytes   m, l            2 x Br x 4     (fp32 running statistics)

    `paper_bytes` is the part the FlashAttention paper's block-size rule counts: Q_i,
    K_j, V_j and O_i at e bytes each, (2 Br + 2 Bc) d e. Algorithm 1 (line 1) sets
    Bc = ceil(M / 4d), Br = min(Bc, d) so that these four tiles fit in M elements; it
    leaves out the score tile and the statistics, so a paper tile can exceed the
    budget once those are added (`total_bytes`). A real kernel keeps the score tile
    and the accumulator in registers, not in shared memory, and may double-buffer K
    and V: its shared memory is a different number (`flashcourse.cuda.cuda_core.flash`
    `FlashConfig.shared_bytes`, notebook 07), compared with this model's budget.
    """

    q_bytes: int
    kv_bytes: int
    score_bytes: int
    acc_bytes: int
    stats_bytes: int
    paper_bytes: int

    @property
    def total_bytes(self) -> int:
        """Everything one tile step keeps live: Q_i, K_j, V_j, S_ij, acc, m, l (bytes)."""
        return (self.q_bytes + self.kv_bytes + self.score_bytes + self.acc_bytes
                + self.stats_bytes)

    def parts(self) -> dict:
        """{'Q_i': bytes, 'K_j, V_j': ..., 'S_ij': ..., 'acc': ..., 'm, l': ...}."""
        return {"Q_i": self.q_bytes, "K_j, V_j": self.kv_bytes, "S_ij": self.score_bytes,
                "acc": self.acc_bytes, "m, l": self.stats_bytes}


def tile_footprint(block_q: int, block_k: int, head_dim: int, *, bytes_per_element: int = 2,
                   bytes_per_score: int = 4, bytes_per_accumulator: int = 4) -> TileFootprint:
    """On-chip bytes of one tile step, part by part (see `TileFootprint`).

    Args:
        block_q: Br (rows). block_k: Bc (rows). head_dim: d (elements).
        bytes_per_element: e, bytes per Q/K/V element as staged on chip.
        bytes_per_score: s, bytes per score of the (Br, Bc) tile (fp32: 4).
        bytes_per_accumulator: a, bytes per element of the output accumulator (fp32: 4).

    >>> tile_footprint(64, 64, 64).total_bytes
    57856
    >>> tile_footprint(64, 64, 64).paper_bytes      # (2 Br + 2 Bc) d e
    32768
    """
    br, bc, d, e, s, a = check_sizes(block_q=block_q, block_k=block_k, head_dim=head_dim,
                                     bytes_per_element=bytes_per_element,
                                     bytes_per_score=bytes_per_score,
                                     bytes_per_accumulator=bytes_per_accumulator)
    return TileFootprint(q_bytes=br * d * e, kv_bytes=2 * bc * d * e, score_bytes=br * bc * s,
                         acc_bytes=br * d * a, stats_bytes=2 * br * BYTES_PER_STAT,
                         paper_bytes=(2 * br + 2 * bc) * d * e)


def tile_footprint_bytes(block_q: int, block_k: int, head_dim: int, *,
                         bytes_per_element: int = 2, bytes_per_score: int = 4) -> int:
    """Total on-chip bytes of one tile step: `tile_footprint(...).total_bytes` (bytes).

        Br d e  +  2 Bc d e  +  Br Bc s  +  Br d 4  +  2 Br 4
        (Q_i)      (K_j, V_j)  (S_ij)      (acc)      (m, l)

    >>> tile_footprint_bytes(64, 64, 64)
    57856
    """
    return tile_footprint(block_q, block_k, head_dim, bytes_per_element=bytes_per_element,
                          bytes_per_score=bytes_per_score).total_bytes


def paper_block_sizes(sram_bytes: int, head_dim: int, bytes_per_element: int) -> tuple[int, int]:
    """The FlashAttention paper's tile sizes (Algorithm 1, line 1) for a budget.

    M = sram_bytes // bytes_per_element (elements); Bc = ceil(M / 4d) and
    Br = min(ceil(M / 4d), d). Returns (Br, Bc).

    >>> paper_block_sizes(100 * 1024, 64, 2)
    (64, 200)
    """
    sram = check_block(sram_bytes, "sram_bytes")
    d = check_block(head_dim, "head_dim")
    e = check_block(bytes_per_element, "bytes_per_element")
    m = sram // e                                               # M, elements
    if m < 1:
        raise ValueError(
            f"sram_bytes must hold at least one element of {e} bytes, got {sram} bytes")
    bc = ceil_div(m, 4 * d)
    br = min(bc, d)
    return br, bc


# ---------------------------------------------------------------------------
# Arithmetic, intensity and a roofline bound
# ---------------------------------------------------------------------------

def attention_flops(t_query: int, t_key: int, head_dim: int, *, causal: bool = False) -> int:
    """Floating-point operations of attention's two matrix products, one head (FLOP).

    S = Q K^T and O = P V each take 2 Tq Tk d (a multiply and an add per term):
    4 Tq Tk d in all, or 4 d x (visible pairs) when causal. Softmax (O(Tq Tk)) is
    left out, as in the papers' FLOP counts. Tiling does not change this number.
    """
    d = check_block(head_dim, "head_dim")
    return 4 * visible_pairs(t_query, t_key, causal=check_causal(causal)) * d


def _check_positive_real(x, name: str) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a positive real number, got {x!r}")
    x = float(x)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"{name} must be a positive finite number, got {x}")
    return x


def arithmetic_intensity(flops, traffic) -> float:
    """FLOPs per byte moved (FLOP/byte). `traffic` is a Traffic or a byte count."""
    f = _check_positive_real(flops, "flops")
    nbytes = traffic.total_bytes if isinstance(traffic, Traffic) else traffic
    return f / _check_positive_real(nbytes, "traffic")


def roofline_time_s(flops, nbytes, peak_flops_per_s, bandwidth_bytes_per_s) -> float:
    """Roofline lower bound on run time (seconds): max(flops / peak, bytes / bandwidth).

    A kernel can be no faster than its arithmetic at peak rate, nor than its
    outer-memory traffic at full bandwidth; real kernels are slower than both.
    """
    if isinstance(nbytes, Traffic):
        nbytes = nbytes.total_bytes
    f = _check_nonnegative_real(flops, "flops")
    b = _check_nonnegative_real(nbytes, "nbytes")
    peak = _check_positive_real(peak_flops_per_s, "peak_flops_per_s")
    bw = _check_positive_real(bandwidth_bytes_per_s, "bandwidth_bytes_per_s")
    return max(f / peak, b / bw)


def _check_nonnegative_real(x, name: str) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise TypeError(f"{name} must be a non-negative real number, got {x!r}")
    x = float(x)
    if not math.isfinite(x) or x < 0:
        raise ValueError(f"{name} must be a non-negative finite number, got {x}")
    return x


# ---------------------------------------------------------------------------
# The backward pass (notebook 09)
# ---------------------------------------------------------------------------
#
# Backward pass: FLOPs and outer-memory traffic, one head (notebook 09).
#
# Conventions as above: e bytes per Q/K/V/O/dO element, s bytes
# per stored score, 4 bytes per statistic (lse L and D, fp32), a bytes per element
# of the dQ accumulator (fp32 in real kernels: a = 4).
#
# FLOPs (two per multiply-add; elementwise work such as exp is left out, as in the
# papers). With n = Tq Tk (or the visible pairs when causal):
#
#     forward                   S = Q K^T, O = P V                         4 n d
#     standard backward         dV = P^T dO, dP = dO V^T, dQ = dS K, dK = dS^T Q
#                               (P read from memory)                        8 n d
#     tiled backward            the same four plus S = Q K^T recomputed    10 n d
#                               = 2.5 x the forward: the benchmark convention
#     tiled, dQ in a 2nd pass   pass 2 recomputes S and dP again           14 n d
#
# Traffic of the standard backward (FlashAttention paper, Algorithm 3; five passes,
# every (Tq, Tk) intermediate goes through outer memory; dense rectangle even when
# causal):
#
#     dV = P^T dO          reads P, dO       Tq Tk s + Tq d e        writes dV  Tk d e
#     dP = dO V^T          reads dO, V       (Tq + Tk) d e           writes dP  Tq Tk s
#     dS = P (dP - rowsum) reads P, dP       2 Tq Tk s               writes dS  Tq Tk s
#     dQ = dS K            reads dS, K       Tq Tk s + Tk d e        writes dQ  Tq d e
#     dK = dS^T Q          reads dS, Q       Tq Tk s + Tq d e        writes dK  Tk d e
#
#     reads = 5 Tq Tk s + (3 Tq + 2 Tk) d e      writes = 2 Tq Tk s + (Tq + 2 Tk) d e
#
# Traffic of the tiled backward (FlashAttention-2, `flashcourse.tiled.backward`):
#
#     pre-pass             reads O, dO       2 Tq d e                writes D  4 Tq, dQ = 0  Tq d a
#     outer loop over key blocks j: K_j, V_j read once (2 Tk d e); dK_j, dV_j written once
#     per visible pair (i, j):  reads Q_i, dO_i, L_i, D_i, dQ_i     rows(Q_i) (2 d e + 8 + d a)
#                               writes dQ_i                          rows(Q_i) d a
#     if a != e: a final pass converts dQ    reads Tq d a, writes Tq d e
#
#     "two_pass" instead of accumulating dQ in outer memory: pass 1 (key-major) as above
#     without dQ; pass 2 (query-major) reads Q_i, dO_i, L_i, D_i once, K_j, V_j per
#     visible pair and writes dQ once (no accumulator, no atomics, 4 n d more FLOPs).
#
# No (Tq, Tk) tensor crosses: the traffic grows like Tq Tk d / Bc instead of Tq Tk s.

#: The dQ variants of the tiled backward.
DQ_MODES = ("accumulate", "two_pass")


def backward_flops(t_query: int, t_key: int, head_dim: int, *, causal: bool = False,
                   recompute: bool = True, dq_mode: str = "accumulate") -> int:
    """Matrix-product FLOPs of the backward pass, one head (FLOP).

    recompute=False: the standard backward, P read from memory: 8 n d.
    recompute=True: FlashAttention's backward, S recomputed per tile: 10 n d,
    i.e. 2.5 x `attention_flops` (the convention every benchmark in the course
    uses to turn a backward time into TFLOP/s). dq_mode="two_pass" (dQ in a
    separate query-major pass that recomputes S and dP): 14 n d.
    n = Tq Tk, or the visible pairs when causal.

    >>> backward_flops(4096, 4096, 64) / attention_flops(4096, 4096, 64)
    2.5
    """
    d = check_block(head_dim, "head_dim")
    n = visible_pairs(t_query, t_key, causal=check_causal(causal))
    recompute = check_bool(recompute, "recompute")
    if dq_mode not in DQ_MODES:
        raise ValueError(f"dq_mode must be 'accumulate' or 'two_pass', got {dq_mode!r}")
    if not recompute:
        return 8 * n * d
    return (14 if dq_mode == "two_pass" else 10) * n * d


def backward_traffic(t_query: int, t_key: int, head_dim: int, *, method: str = "tiled",
                     block_q: int = 64, block_k: int = 64, causal: bool = False,
                     bytes_per_element: int = 2, bytes_per_score: int = 2,
                     bytes_per_accumulator: int = 4, dq_mode: str = "accumulate") -> Traffic:
    """Outer-memory traffic of the backward pass, one head (see the module docstring).

    Args:
        t_query: Tq, t_key: Tk (positions); head_dim: d (elements).
        method: "standard" (reads the stored P, writes dP and dS) or "tiled".
        block_q, block_k: Br, Bc of the tiled backward.
        causal: tiled only: hidden tiles are skipped (the standard path is dense).
        bytes_per_element: e; bytes_per_score: s (standard only);
        bytes_per_accumulator: a, bytes per dQ accumulator element (tiled, fp32 = 4).
        dq_mode: "accumulate" (dQ_i read-modified-written per visible pair, as with
            atomic adds) or "two_pass" (a second, query-major pass).

    >>> backward_traffic(4096, 4096, 64, method="standard").total_bytes
    239075328
    """
    tq, tk, d, e, s, a, br, bc = check_sizes(
        t_query=t_query, t_key=t_key, head_dim=head_dim, bytes_per_element=bytes_per_element,
        bytes_per_score=bytes_per_score, bytes_per_accumulator=bytes_per_accumulator,
        block_q=block_q, block_k=block_k)
    causal = check_causal(causal)
    if dq_mode not in DQ_MODES:
        raise ValueError(f"dq_mode must be 'accumulate' or 'two_pass', got {dq_mode!r}")
    if method == "standard":
        reads = 5 * tq * tk * s + (3 * tq + 2 * tk) * d * e
        writes = 2 * tq * tk * s + (tq + 2 * tk) * d * e
        return Traffic(reads, writes)
    if method != "tiled":
        raise ValueError(f"method must be 'standard' or 'tiled', got {method!r}")
    st = BYTES_PER_STAT
    _, key_rows, query_rows = causal_block_sums(tq, tk, br, bc, causal)
    reads = 2 * tq * d * e                                    # pre-pass: O, dO
    writes = st * tq + 2 * tk * d * e                         # D; dK, dV once
    reads += 2 * tk * d * e + query_rows * (2 * d * e + 2 * st)   # K, V; Q_i, dO_i, L_i, D_i
    if dq_mode == "accumulate":
        writes += tq * d * a                                  # dQ = 0
        reads += query_rows * d * a                           # dQ_i read ...
        writes += query_rows * d * a                          # ... and written, per pair
        if a != e:
            reads += tq * d * a
            writes += tq * d * e
    else:
        reads += tq * (2 * d * e + 2 * st) + 2 * key_rows * d * e   # pass 2
        writes += tq * d * e                                        # dQ once
    return Traffic(reads, writes)
