"""The IO model of one decoding step, and the measured bandwidth plot.

One decoding step of attention (Tq = 1 new query per head, or a few) reads the whole
KV cache of the layer once and does very little arithmetic with it:

    K and V   2 B Hkv Tk d e   bytes read          (the KV cache; e bytes per element)
    q         B Hq Tq d e      bytes read
    o         B Hq Tq d e      bytes written
    lse       4 B Hq Tq        bytes written (fp32)
    partials  S B Hq Tq (d + 1) 4  bytes written by the split kernel and read by the
              combine kernel, when the keys are cut into S > 1 splits

    FLOPs     4 B Hq Tq Tk d   (q.k and p.v, 2 FLOPs per multiply-add)

With Tq = 1 the arithmetic intensity is FLOPs / bytes ~ 4 Hq d / (2 Hkv d e) = 2 G / e
FLOP per byte (G = Hq / Hkv query heads per KV head): 1 FLOP/B for fp16 multi-head
attention, far under the ~200 FLOP/B at which an H200's tensor cores stop waiting for
memory. So the time floor is the KV-cache bytes over the memory bandwidth:

    t_min = 2 B Hkv Tk d e / bandwidth

Grouped-query attention divides the cache, and so the floor, by G against multi-head
attention with the same number of query heads: that is what GQA saves. "bandwidth" here
is what a device-to-device copy measures (bytes read + bytes written per second), the
practical ceiling for streaming reads; the datasheet's peak (4.8 TB/s on an H200) is
not reached by any kernel.

Also: how many thread blocks the FlashAttention-2 grid launches for decoding, against
the SMs, and the plot of measured bandwidth against Tk from the recorded benchmark
(benchmarks/results/h200_decode.json, written by benchmarks/gpu_decode.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._checks import check_block, check_sizes
from .results import RESULTS_DIR

#: The recorded H200 measurements the notebooks plot.
RESULTS = RESULTS_DIR / "h200_decode.json"


@dataclass(frozen=True)
class DecodeTraffic:
    """Bytes one decoding step moves between device memory and the chip."""

    kv_bytes: int          # K and V, read once
    q_bytes: int
    o_bytes: int
    lse_bytes: int
    partial_bytes: int     # split states written + read again (0 for one split)
    flops: int

    # bytes read, written and both (the split states: half of partial_bytes each way)
    read_bytes = property(lambda self: self.kv_bytes + self.q_bytes + self.partial_bytes // 2)
    write_bytes = property(lambda self: self.o_bytes + self.lse_bytes + self.partial_bytes // 2)
    total_bytes = property(lambda self: self.read_bytes + self.write_bytes)

    @property
    def intensity(self) -> float:
        """FLOP per byte moved."""
        return self.flops / self.total_bytes


def decode_traffic(batch: int, heads_q: int, heads_kv: int, t_key: int, head_dim: int, *,
                   t_query: int = 1, bytes_per_element: int = 2,
                   num_splits: int = 1) -> DecodeTraffic:
    """The decode IO model (see the module docstring); heads_q a multiple of heads_kv.

    >>> t = decode_traffic(1, 8, 8, 65536, 128)      # B x H = 8, fp16, Tk = 65536
    >>> t.kv_bytes
    268435456
    """
    b, hq, hkv, tk, d, tq, e, s = check_sizes(
        batch=batch, heads_q=heads_q, heads_kv=heads_kv, t_key=t_key, head_dim=head_dim,
        t_query=t_query, bytes_per_element=bytes_per_element, num_splits=num_splits)
    if hq % hkv:
        raise ValueError(f"heads_q = {hq} must be a multiple of heads_kv = {hkv} "
                         f"(grouped-query attention)")
    rows = b * hq * tq
    partial = 0 if s == 1 else 2 * s * rows * (d + 1) * 4
    return DecodeTraffic(kv_bytes=2 * b * hkv * tk * d * e, q_bytes=rows * d * e,
                         o_bytes=rows * d * e, lse_bytes=4 * rows, partial_bytes=partial,
                         flops=4 * rows * tk * d)


def time_floor_s(traffic: DecodeTraffic, bandwidth_bytes_per_s: float) -> float:
    """Lower bound on the step's time: every byte at the given bandwidth (seconds)."""
    if not bandwidth_bytes_per_s > 0:
        raise ValueError(f"bandwidth must be > 0 bytes/s, got {bandwidth_bytes_per_s!r}")
    return traffic.total_bytes / bandwidth_bytes_per_s


def gqa_saving(heads_q: int, heads_kv: int) -> float:
    """How many times smaller the KV cache (and the decode time floor) is with Hkv KV
    heads than with multi-head attention's Hq: G = Hq / Hkv."""
    hq, hkv = check_block(heads_q, "heads_q"), check_block(heads_kv, "heads_kv")
    if hq % hkv:
        raise ValueError(f"heads_q = {hq} must be a multiple of heads_kv = {hkv}")
    return hq / hkv


def fa2_grid_blocks(batch: int, heads: int, t_query: int = 1, block_q: int = 128) -> int:
    """Thread blocks of the FlashAttention-2 forward grid: B x H x ceil(Tq / Br)."""
    return (check_block(batch, "batch") * check_block(heads, "heads")
            * -(-check_block(t_query, "t_query") // check_block(block_q, "block_q")))


def busy_sm_fraction(blocks: int, sms: int) -> float:
    """Fraction of the SMs that have a block when `blocks` one-SM-each blocks run
    (blocks >= sms: 1)."""
    return min(1.0, check_block(blocks, "blocks") / check_block(sms, "sms"))


# ---------------------------------------------------------------------------------------
# The recorded measurements
# ---------------------------------------------------------------------------------------

def load_results(path=None) -> dict:
    """The recorded H200 decode benchmark (a dict with 'environment', 'bench', 'bars')."""
    from .results import load
    path = RESULTS if path is None else Path(path)
    doc = load(path, "gpu_decode")             # validated against schemas/gpu_decode.json
    if doc is None:
        raise FileNotFoundError(f"no recorded decode results at {path}; run "
                                f"benchmarks/gpu_decode.py --bench --record on a GPU")
    return doc


def copy_bandwidth(results=None) -> float:
    """The device-to-device copy rate (bytes read + written per second) measured in the
    recorded run: the best over its copies (the large ones reach it). bytes/s."""
    results = load_results() if results is None else results
    rates = [r["copy_gbs"] for r in results["bench"] if r.get("copy_gbs")]
    if not rates:
        raise ValueError("the recorded results hold no copy measurement")
    return max(rates) * 1e9


