"""FlashAttention-2's three changes, counted (notebook 03), and exp-aware costs (notebook 04).

T. Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
2023 (arXiv:2307.08691), section 3, changed three things relative to FlashAttention (Dao
et al., 2022). None of them changes the outer-memory bytes much; each changes where GPU
time goes:

1. Fewer non-matmul FLOPs (section 3.1). FA1's Algorithm 1 (line 12) renormalises the
   output block by the new l after EVERY key tile and keeps m and l for the backward;
   FA2 keeps an unnormalised accumulator, divides by l once at the end, and saves only
   lse = m + log l. `nonmatmul_per_tile` counts both, line by line. It matters because
   tensor cores run matrix products ~16x faster than everything else (A100: 312 TFLOP/s
   fp16 matmul against 19.5 TFLOP/s fp32 non-matmul, the paper's numbers) and the
   exponentials run on the special-function units (SFU), slower still
   (`flashcourse.gpus`: `sfu_ops_per_s`). `tile_time_s` turns counts into times.
2. Parallelism over the sequence (section 3.2). FA1 launches one thread block per
   (batch, head): B x H blocks. FA2 also splits the query blocks across thread blocks:
   B x H x ceil(Tq / Br). `grid_blocks` and `sm_fill` compute what that does to the
   SMs when B x H is small (long sequences).
3. Work partitioning between warps (section 3.3). Inside a thread block, FA1 splits K
   and V across the warps ("split-K"): each warp computes a partial P V for its slice of
   keys, and the partial outputs (and the row max/sum) must be exchanged through shared
   memory and added up. FA2 splits Q across the warps ("split-Q"): each warp owns its
   rows from start to end, and no exchange is needed. `warp_exchange_bytes` counts the
   shared-memory bytes of that exchange.

Counting conventions (`nonmatmul_per_tile`): one FLOP per elementwise add, multiply,
subtract or max (the FA2 paper's "non-matmul FLOPs", at the fp32 rate); exponentials,
logarithms and reciprocals are counted separately as SFU operations. A lone add or max
issues as one fp32 instruction, which the fp32 FLOP rate counts as half an FMA, so these
times are optimistic by up to 2x for the non-matmul part; they are shares, not a timing
model (the units overlap in part).
"""

from __future__ import annotations

from dataclasses import dataclass

from ._checks import check_block, check_causal, check_named, check_sizes
from .geometry import visible_pairs
from .gpus import GPU, get_gpu

VERSIONS = ("fa1", "fa2")


@dataclass(frozen=True)
class NonMatmulCount:
    """Work outside the two matrix products, for one (Br, Bc) tile step.

    flops: elementwise adds, multiplies, subtracts, maxes (FLOP, at the fp32 rate).
    sfu_ops: exponentials, reciprocals, logarithms (operations, at the SFU rate).
    end_flops, end_sfu_ops: work done once per query block after its last tile (FA2's
        final division by l and lse = m + log l); 0 for FA1, which does it every tile.
    """

    flops: int
    sfu_ops: int
    end_flops: int = 0
    end_sfu_ops: int = 0


def matmul_flops_per_tile(block_q: int, block_k: int, head_dim: int) -> int:
    """S = Q_i K_j^T and P V_j for one tile: 2 Br Bc d + 2 Br Bc d = 4 Br Bc d (FLOP)."""
    br = check_block(block_q, "block_q")
    bc = check_block(block_k, "block_k")
    d = check_block(head_dim, "head_dim")
    return 4 * br * bc * d


def nonmatmul_per_tile(block_q: int, block_k: int, head_dim: int,
                       version: str = "fa2") -> NonMatmulCount:
    """Non-matmul work of one tile step, line by line from each paper's Algorithm 1.

    Both: scale S (Br Bc), row max (Br Bc), S - m (Br Bc), exp (Br Bc SFU), row sum (Br Bc).

    FA1 (FlashAttention, Algorithm 1, lines 10-12), per tile:
        m_new = max(m, m~)                                    Br
        l_new = e^(m - m_new) l + e^(m~ - m_new) l~           2 Br SFU; 2 Br sub, 2 Br mul, Br add
        O <- diag(l_new)^-1 (diag(l) e^(m - m_new) O + e^(m~ - m_new) P~ V)
                                                              Br mul (l e^..), Br d mul,
                                                              Br d mul, Br d add,
                                                              Br SFU (1 / l_new), Br d mul
    FA2 (FlashAttention-2, Algorithm 1, lines 9-10), per tile:
        m_new = max(m, rowmax(S))                             Br (on top of the row max)
        l = e^(m - m_new) l + rowsum(P~)                      Br SFU; Br sub, Br mul, Br add
        O = diag(e^(m - m_new)) O + P~ V                      Br d mul (the + is the matrix
                                                              product's own accumulate)
      once per query block (lines 12-13): O / l (Br SFU, Br d mul), lse = m + log l
      (Br SFU, Br add).

    >>> nonmatmul_per_tile(64, 64, 64, "fa1")
    NonMatmulCount(flops=33216, sfu_ops=4288, end_flops=0, end_sfu_ops=0)
    >>> nonmatmul_per_tile(64, 64, 64, "fa2")
    NonMatmulCount(flops=20736, sfu_ops=4160, end_flops=4160, end_sfu_ops=128)
    """
    br = check_block(block_q, "block_q")
    bc = check_block(block_k, "block_k")
    d = check_block(head_dim, "head_dim")
    if version not in VERSIONS:
        raise ValueError(f"version must be 'fa1' or 'fa2', got {version!r}")
    both = 4 * br * bc                      # scale, row max, subtract, row sum
    exps = br * bc                          # P~ = exp(S - m)
    if version == "fa1":
        flops = both + br + (2 * br + 2 * br + br) + (br + 3 * br * d + br * d)
        return NonMatmulCount(flops=flops, sfu_ops=exps + 2 * br + br)
    flops = both + br + (3 * br) + br * d
    return NonMatmulCount(flops=flops, sfu_ops=exps + br,
                          end_flops=br * d + br, end_sfu_ops=2 * br)


def _gpu(gpu) -> GPU:
    """`gpu` as a GPU: a name from flashcourse.gpus or a GPU, else a TypeError naming gpu."""
    return check_named(gpu, "gpu", GPU, get_gpu,
                       "a GPU name (a string such as 'H200') or a flashcourse.gpus.GPU")


def tile_time_s(block_q: int, block_k: int, head_dim: int, version: str = "fa2",
                gpu: str | GPU = "A100 80GB") -> dict:
    """Seconds one tile's work would take on the whole GPU at each unit's peak rate.

    {'matmul': 4 Br Bc d / fp16 tensor rate, 'non-matmul': flops / fp32 rate,
     'exp (SFU)': sfu_ops / SFU rate}. Per-query-block end work is left out (it is
    spread over all Tc tiles of the row). Shares, not a timing model: see the module
    docstring.
    """
    g = _gpu(gpu)
    if g.sfu_ops_per_s is None:
        raise ValueError(f"gpu {g.name!r} has no special-function rate in flashcourse.gpus")
    n = nonmatmul_per_tile(block_q, block_k, head_dim, version)
    return {"matmul": matmul_flops_per_tile(block_q, block_k, head_dim)
            / g.fp16_tensor_flops_per_s,
            "non-matmul": n.flops / g.fp32_flops_per_s,
            "exp (SFU)": n.sfu_ops / g.sfu_ops_per_s}


# ---------------------------------------------------------------------------
# 2. Parallelism: thread blocks against SMs
# ---------------------------------------------------------------------------

def grid_blocks(batch: int, heads: int, t_query: int, block_q: int, version: str) -> int:
    """Thread blocks of the forward launch: FA1 B x H; FA2 B x H x ceil(Tq / Br)."""
    b, h, tq, br = check_sizes(batch=batch, heads=heads, t_query=t_query, block_q=block_q)
    if version not in VERSIONS:
        raise ValueError(f"version must be 'fa1' or 'fa2', got {version!r}")
    return b * h * (1 if version == "fa1" else -(-tq // br))


@dataclass(frozen=True)
class SMFill:
    """How a grid of thread blocks fills the SMs.

    waves: ceil(blocks / (SMs x blocks_per_sm)), rounds of resident blocks.
    busy_first_wave: share of the SMs that get any block in the first wave (0..1).
    busy_average: blocks / (waves x SMs x blocks_per_sm): the share of block slots
        used over all waves (the last, partial wave wastes the rest), 0..1.
    """

    blocks: int
    waves: int
    busy_first_wave: float
    busy_average: float


def sm_fill(blocks: int, sms: int = 132, blocks_per_sm: int = 1) -> SMFill:
    """Waves and SM use of `blocks` equal thread blocks on `sms` SMs (H200: 132)."""
    n = check_block(blocks, "blocks")
    s = check_block(sms, "sms")
    r = check_block(blocks_per_sm, "blocks_per_sm")
    waves = -(-n // (s * r))
    return SMFill(n, waves, min(n, s) / s, n / (waves * s * r))


# ---------------------------------------------------------------------------
# 3. Warps inside a thread block: split-K against split-Q
# ---------------------------------------------------------------------------

def warp_exchange_bytes(block_q: int, head_dim: int, warps: int, scheme: str) -> int:
    """Shared-memory bytes written and read back per key tile to combine warps' work.

    split-K (FA1): each of W warps holds a partial (Br, d) fp32 output for its slice of
    keys, and partial row max and sum (2 Br fp32): all are written to shared memory,
    synchronised, and read back to be added: 2 x W x (Br d + 2 Br) x 4 bytes.
    split-Q (FA2): each warp owns Br / W whole rows; nothing to exchange: 0.
    """
    br = check_block(block_q, "block_q")
    d = check_block(head_dim, "head_dim")
    w = check_block(warps, "warps")
    if scheme == "split-Q":
        return 0
    if scheme != "split-K":
        raise ValueError(f"scheme must be 'split-K' or 'split-Q', got {scheme!r}")
    return 2 * w * (br * d + 2 * br) * 4


# ---------------------------------------------------------------------------
# Exp-aware cost of recomputing P (notebook 04)
# ---------------------------------------------------------------------------

def recompute_vs_read_s(t_query: int, t_key: int, head_dim: int, gpu: str | GPU = "H200",
                        *, bytes_per_score: int = 2, causal: bool = False) -> dict:
    """Time to read a stored P against recomputing it, at the GPU's published peak rates.

    read:      Tq Tk s bytes / HBM bandwidth
    recompute: S = Q K^T (2 Tq Tk d FLOP, tensor cores) + S - lse (Tq Tk FLOP, fp32)
               + exp (Tq Tk operations on the special-function units)
    Returns {'read P': s, 'S = Q K^T': s, 'S - lse': s, 'exp': s} (seconds, lower bounds).
    """
    g = _gpu(gpu)
    if g.sfu_ops_per_s is None:
        raise ValueError(f"gpu {g.name!r} has no special-function rate in flashcourse.gpus")
    n = visible_pairs(t_query, t_key, causal=check_causal(causal))
    d = check_block(head_dim, "head_dim")
    s = check_block(bytes_per_score, "bytes_per_score")
    return {"read P": n * s / g.bandwidth_bytes_per_s,
            "S = Q K^T": 2 * n * d / g.fp16_tensor_flops_per_s,
            "S - lse": n / g.fp32_flops_per_s,
            "exp": n / g.sfu_ops_per_s}


def exp_share_of_matmul(head_dim: int, gpu: str | GPU) -> float:
    """Time of the exponentials over time of the matmuls, per score (forward).

    Each score costs 4 d matmul FLOPs and one exp: (sfu time) / (matmul time)
    = (tensor rate / SFU rate) / (4 d). H100 SXM, d = 128: (989 / 3.9) / 512 = 0.50,
    the FlashAttention-3 paper's "exponential can take 50% of the cycle time".
    """
    g = _gpu(gpu)
    d = check_block(head_dim, "head_dim")
    if g.sfu_ops_per_s is None:
        raise ValueError(f"gpu {g.name!r} has no special-function rate in flashcourse.gpus")
    return (g.fp16_tensor_flops_per_s / g.sfu_ops_per_s) / (4 * d)


__all__ = ["VERSIONS", "NonMatmulCount", "matmul_flops_per_tile", "nonmatmul_per_tile",
           "tile_time_s", "grid_blocks", "SMFill", "sm_fill", "warp_exchange_bytes",
           "recompute_vs_read_s", "exp_share_of_matmul"]
