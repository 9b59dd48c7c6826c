"""hopper.fp8: the host side of the FP8 (e4m3) Hopper forward.

    from flashcourse.cuda.hopper import fp8
    q8, k8, v8 = fp8.quantize(q, k, v, scheme="block", block=128, hadamard=True)  # numpy
    o, lse = fp8.forward(q8, k8, v8, causal=True)      # o float16 (..., Tq, d), lse float32
    o, lse = flashcourse.cuda.forward(q16, k16, v16, kernel="hopper", precision="fp8")
    python benchmarks/gpu_fp8_forward.py --check --bench           # on an H100/H200

`quantize` turns float Q, K, V into `fp8.scaling.Quantized` codes and scales (optionally
after FlashAttention-3's Hadamard rotation of Q and K, `flashcourse.fp8.hadamard`);
`forward` runs the kernel (`fp8_kernels.py`) on them: V transposed once on the device
(`fp8_kernels.make_transpose`), then the attention kernel. Its numpy twin, step for step,
is `flashcourse.fp8.attention.fp8_attention(..., key_block=128)`, which the GPU check
compares it with (benchmarks/gpu_fp8_forward.py). `quantize_device` and
`forward_device_float` do the quantization on the device, from float16/float32 device
arrays; `forward_device` takes codes and scales already there.

What it takes: codes of shape (..., T, d) (uint8, leading axes such as batch and heads
flattened), d at most 128 (padded with zero codes to a multiple of 32), one scale per
head or per block of tokens; a block of Q's scale covers a multiple of 64 query rows, a
block of K's and V's a multiple of the kernel's 128-key tiles (`check_blocks` says so by
name otherwise). Compute capability 9.0 only, as every wgmma kernel (`check_capability`),
or Numba's CUDA simulator at tiny sizes (wgmma's twins, `ptx/wgmma.py`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ...constants import LOG2E
from ...geometry import ceil_div
from ...gpu import using_simulator
from ..common._launch import check_registers, flat, launch
from ..common.host_plans import pooled_empty
from .fp8_kernels import QUANT_THREADS, TRANSPOSE_THREADS
from .fp8_layouts import K_STEP
from .host import check_capability

#: head dims up to 128, padded to a multiple of 32 (one k32 step of S = Q K^T)
MAX_HEAD_DIM, D_STEP = 128, 32
#: the query-row multiple of Q's scale blocks (a warpgroup's rows share one scale)
Q_ROWS = 64


@dataclass(frozen=True)
class Fp8Config:
    """One variant of the FP8 kernel: warpgroups (Br = 64 x warpgroups), block_k (Bc, the
    N of S = Q K^T), head_dim D (d rounded up to a multiple of 32), pipeline ("serial":
    version 1, "overlap": version 2; `fp8_kernels`)."""

    warpgroups: int
    block_k: int
    head_dim: int
    pipeline: str = "overlap"

    @property
    def block_q(self):
        return 64 * self.warpgroups

    @property
    def threads(self):
        return 128 * self.warpgroups

    def offsets(self):
        """32-bit word offsets: Q, K and V^T of buffer 0, the buffer size, the end."""
        q_words = self.block_q * self.head_dim // 4
        tile = self.block_k * self.head_dim // 4
        return 0, q_words, q_words + tile, 2 * tile, q_words + 4 * tile

    @property
    def shared_bytes(self):
        return 4 * self.offsets()[-1]


PIPELINES = ("serial", "overlap")
#: the default (pipeline, warpgroups): version 2 with 3 warpgroups was the fastest kernel or
#: within 0.5% of it at d = 128, N = 4096 and 16384, causal off and on, on an H100
#: (results/h100_fp8_forward_run1_bench.json; benchmarks/NOTES_hopper.md)


def plan(d: int, warpgroups: int = 3, block_k: int = 128,
         pipeline: str = "overlap") -> Fp8Config:
    """A checked configuration for head dim d (ValueError naming the argument)."""
    from ...limits import check_launch
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline must be one of {PIPELINES}, got {pipeline!r}")
    if warpgroups not in (1, 2, 3):
        raise ValueError(f"warpgroups must be 1, 2 or 3 for the FP8 kernel, got {warpgroups!r}")
    if block_k not in (64, 128):
        raise ValueError(f"block_k must be 64 or 128 for the FP8 kernel, got {block_k!r}")
    if not 1 <= d <= MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be from 1 to {MAX_HEAD_DIM} for the FP8 kernel, "
                         f"got d={d}")
    cfg = Fp8Config(int(warpgroups), int(block_k), ceil_div(d, D_STEP) * D_STEP, pipeline)
    check_launch(cfg.threads, cfg.shared_bytes, what="FP8 hopper kernel")
    return cfg


@lru_cache(maxsize=None)
def kernel(cfg: Fp8Config):
    from .fp8_kernels import make_fp8_kernel
    return make_fp8_kernel(cfg)


@lru_cache(maxsize=None)
def checked_kernel(cfg: Fp8Config):
    """The kernel, compiled and its registers checked once (not on every call)."""
    kern = kernel(cfg)
    if not using_simulator():
        check_registers("FP8 hopper kernel", kern.compile(signature()), cfg.threads)
    return kern


@lru_cache(maxsize=None)
def transposer(D: int):
    from .fp8_kernels import make_transpose
    return make_transpose(D)


_SIG: list = []


def signature():
    if not _SIG:
        from numba import float32, int32, types, uint32
        w1 = types.Array(uint32, 1, "C")
        f2 = types.Array(float32, 2, "C")
        _SIG.append((w1, w1, w1, types.Array(uint32, 3, "C"), f2, f2, f2, f2,
                     int32, int32, int32, float32, int32, int32, int32, int32))
    return _SIG[0]


def quantize(q, k, v, scheme: str = "block", block: int = 128, hadamard: bool = False,
             signs=None):
    """(q8, k8, v8): float arrays (..., T, d) as `fp8.scaling.Quantized` e4m3 codes and
    scales under `scheme` ("tensor", "head" or "block" of `block` tokens), Q and K first
    rotated by the Hadamard matrix when `hadamard` (d padded to a power of two: the codes
    then have that many columns, and Q K^T is unchanged)."""
    from ..._checks import check_qkv
    from ...fp8.hadamard import pad_to_power_of_two, rotate
    from ...fp8.scaling import quantize as quantize_one
    q, k, v = check_qkv(q, k, v)
    if hadamard:
        q, k = (rotate(pad_to_power_of_two(x), signs) for x in (q, k))
    return tuple(quantize_one(x, scheme, block=block) for x in (q, k, v))


@dataclass(frozen=True)
class DeviceQuantized:
    """A tensor in FP8 on the device (`quantize_device`): codes (BH, T, D) uint8, scale
    (BH, n) float32, each scale covering `tokens` rows; d: the columns the input had."""

    codes: object
    scale: object
    tokens: int
    d: int


#: rows per CUDA block when one scale covers a whole head (the amax pass and the encoding
#: pass each spread over ceil(T / HEAD_ROWS) x BH blocks instead of BH)
HEAD_ROWS = 256


@lru_cache(maxsize=None)
def quantizer(D: int, hadamard: bool):
    from .fp8_kernels import make_quantize
    return make_quantize(D, hadamard)


@lru_cache(maxsize=None)
def amax_kernel(D: int, hadamard: bool):
    from .fp8_kernels import make_quantize
    return make_quantize(D, hadamard, amax_only=True)


def quantize_device(x, *, scheme: str = "block", block: int = 128, hadamard: bool = False,
                    signs=None, width: int | None = None) -> DeviceQuantized:
    """x (BH, T, d) float16 or float32 device array -> `DeviceQuantized` e4m3 codes and
    scales, computed on the device (`fp8_kernels.make_quantize`): `quantize`'s rule with
    scheme "head" (one scale per row of BH) or "block" (one per `block` rows); with
    `hadamard`, the rows rotated first by diag(signs) H / sqrt(D) (D = d padded to a power
    of two, 32 to 128; signs: None or D values of +-1); width: D, the codes' columns (zeros
    past the input's, default d rounded up to a multiple of 32). The per-tensor scheme
    needs the whole tensor's amax first: quantize on the host (`quantize`) for it."""
    from numba import cuda
    from ..._checks import check_block, check_bool
    from ..common._launch import is_device_array
    if not is_device_array(x) or len(x.shape) != 3 or np.dtype(x.dtype) not in (
            np.float16, np.float32):
        raise TypeError(f"x must be a (BH, T, d) float16 or float32 device array, got "
                        f"{type(x).__name__} {getattr(x, 'dtype', '')} "
                        f"{tuple(getattr(x, 'shape', ()))}")
    if scheme not in ("head", "block"):
        raise ValueError(f"scheme must be 'head' or 'block' on the device, got {scheme!r} "
                         f"(per tensor: quantize on the host with fp8.quantize)")
    hadamard = check_bool(hadamard, "hadamard")
    bh, t, d = (int(n) for n in x.shape)
    if hadamard:
        D = max(32, 1 << (d - 1).bit_length())
    else:
        D = ceil_div(d, D_STEP) * D_STEP
    if width is not None:
        if hadamard or int(width) < D or int(width) % D_STEP:
            raise ValueError(f"width must be a multiple of {D_STEP} of at least {D} (and "
                             f"is not taken with hadamard), got {width}")
        D = int(width)
    if D > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the FP8 kernel, "
                         f"got d={d}")
    tokens = t if scheme == "head" else check_block(block, "block")
    sg = np.ones(D, np.float32)
    if signs is not None:
        sg = np.asarray(signs, np.float32)
        if not hadamard or sg.shape != (D,) or not np.isin(sg, (-1.0, 1.0)).all():
            raise ValueError(f"signs must be None, or (with hadamard=True) {D} values of +-1")
    n = ceil_div(t, tokens)
    codes = cuda.device_array((bh, t, D), np.uint8)
    scale = cuda.device_array((bh, n), np.float32)
    sgd = cuda.to_device(sg)
    if scheme == "head":             # one scale per head: the amax from many blocks first
        amax = cuda.to_device(np.zeros((bh, 1), np.float32))
        rows = min(t, HEAD_ROWS)
        launch(amax_kernel(D, hadamard), None, (ceil_div(t, rows), bh), QUANT_THREADS, 0,
               (x, sgd, amax, np.int32(t), np.int32(d), np.int32(rows)))
        launch(quantizer(D, hadamard), None, (ceil_div(t, rows), bh), QUANT_THREADS, 0,
               (x, sgd, codes, scale, np.int32(t), np.int32(d), np.int32(rows), amax))
    else:
        launch(quantizer(D, hadamard), None, (n, bh), QUANT_THREADS, 0,
               (x, sgd, codes, scale, np.int32(t), np.int32(d), np.int32(tokens), None))
    return DeviceQuantized(codes, scale, tokens, d)


def check_blocks(q8, k8, v8, block_k: int) -> tuple[int, int]:
    """(qblk, kblk): the tokens each scale covers, checked against what the kernel can
    apply (ValueError naming the argument otherwise)."""
    tq, tk = q8.codes.shape[-2], k8.codes.shape[-2]
    if k8.tokens != v8.tokens or k8.scale.shape != v8.scale.shape:
        raise ValueError(f"k8 and v8 must share their scale blocks: {k8.tokens} and "
                         f"{v8.tokens} tokens per scale")
    qblk = q8.tokens if q8.scale.shape[-1] > 1 else 1 << 30
    kblk = k8.tokens if k8.scale.shape[-1] > 1 else 1 << 30
    if q8.scale.shape[-1] > 1 and q8.tokens % Q_ROWS:
        raise ValueError(f"q8's scale blocks must cover a multiple of {Q_ROWS} query rows "
                         f"(a warpgroup's rows share one scale), got {q8.tokens} (Tq={tq})")
    if k8.scale.shape[-1] > 1 and k8.tokens % block_k:
        raise ValueError(f"k8's and v8's scale blocks must cover a multiple of block_k = "
                         f"{block_k} keys (a key tile shares one scale), got {k8.tokens} "
                         f"(Tk={tk})")
    return qblk, kblk


def _codes(x, name: str, d: int, D: int):
    from ...fp8.scaling import Quantized
    if not isinstance(x, Quantized):
        raise TypeError(f"{name} must be an fp8.scaling.Quantized (from fp8.quantize), got "
                        f"{type(x).__name__}")
    if x.fmt != "e4m3":
        raise ValueError(f"{name} must hold e4m3 codes, got {x.fmt}")
    c = np.asarray(x.codes, np.uint8)
    c = c.reshape((-1,) + c.shape[-2:])
    if c.shape[-1] != d:
        raise ValueError(f"{name} has {c.shape[-1]} columns, expected {d}")
    out = np.zeros(c.shape[:-1] + (D,), np.uint8)
    out[..., :d] = c
    s = np.ascontiguousarray(np.asarray(x.scale, np.float32).reshape(c.shape[0], -1))
    if not (np.isfinite(s).all() and (s > 0).all()):
        raise ValueError(f"{name}'s scales must be finite and > 0")
    return out, s


def forward(q8, k8, v8, *, scale: float | None = None, causal: bool = False,
            warpgroups: int = 3, block_k: int = 128, pipeline: str = "overlap"):
    """(o, lse) on the GPU from `quantize`'s three outputs (numpy): o float16 (..., Tq, dv)
    (dv: v8's columns), lse float32 (..., Tq). scale: the softmax scale (default
    1/sqrt(dv): with a Hadamard rotation q8 and k8 may have more columns, zeros, than the
    head had); causal: bottom-right aligned, as every kernel of the course."""
    from numba import cuda
    check_capability()
    d, dv = q8.codes.shape[-1], v8.codes.shape[-1]
    if dv > d:
        raise ValueError(f"v8 has {dv} columns, more than q8's {d}")
    D = plan(d, warpgroups, block_k, pipeline).head_dim
    qc, qs = _codes(q8, "q8", d, D)
    kc, ks = _codes(k8, "k8", d, D)
    vc, vs = _codes(v8, "v8", dv, D)
    qblk, kblk = check_blocks(q8, k8, v8, block_k)
    dev = [cuda.to_device(x) for x in (qc, kc, vc, qs, ks, vs)]
    o, lse = forward_device(*dev, q_block=qblk, kv_block=kblk,
                            scale=dv ** -0.5 if scale is None else scale, causal=causal,
                            warpgroups=warpgroups, block_k=block_k, pipeline=pipeline)
    lead, tq = q8.codes.shape[:-2], qc.shape[1]
    return (o.copy_to_host()[..., :dv].reshape(lead + (tq, dv)),
            lse.copy_to_host().reshape(lead + (tq,)))


#: what `flashcourse.cuda.forward(..., kernel="hopper", precision="fp8")` takes beside
#: q, k, v, causal and scale (`forward_float`)
FLOAT_OPTIONS = ("precision", "scheme", "block", "hadamard", "warpgroups", "block_k",
                 "pipeline")


def forward_device_float(q, k, v, *, causal: bool = False, scale: float | None = None,
                         scheme: str = "block", block: int = 128, hadamard: bool = False,
                         signs=None, warpgroups: int = 3, block_k: int = 128,
                         pipeline: str = "overlap"):
    """(o, lse) as device arrays from float16/float32 device arrays q (BH, Tq, d), k, v
    (BH, Tk, d): Q, K, V quantized on the device (`quantize_device`), V transposed, the
    FP8 kernel. o float16 (BH, Tq, D): its first d columns are the output (D = d rounded
    up to a multiple of 32, or to a power of two with hadamard; the rest are zeros)."""
    qd = quantize_device(q, scheme=scheme, block=block, hadamard=hadamard, signs=signs)
    kd = quantize_device(k, scheme=scheme, block=block, hadamard=hadamard, signs=signs)
    D = int(qd.codes.shape[2])
    vd = quantize_device(v, scheme=scheme, block=block, width=D)
    blocks = (None, None) if scheme == "head" else (qd.tokens, kd.tokens)
    d = qd.d
    return forward_device(qd.codes, kd.codes, vd.codes, qd.scale, kd.scale, vd.scale,
                          q_block=blocks[0], kv_block=blocks[1],
                          scale=d ** -0.5 if scale is None else scale, causal=causal,
                          warpgroups=warpgroups, block_k=block_k, pipeline=pipeline)


def forward_float(q, k, v, *, causal: bool = False, scale: float | None = None,
                  scheme: str = "block", block: int = 128, hadamard: bool = False,
                  warpgroups: int = 3, block_k: int = 128, pipeline: str = "overlap",
                  precision: str = "fp8"):
    """`flashcourse.cuda.forward(q, k, v, kernel="hopper", precision="fp8", ...)`: float
    numpy q (..., Tq, d), k, v (..., Tk, d) quantized on the host (`quantize`: scheme,
    block, hadamard), the FP8 kernel on the GPU; o in q's float dtype (float32 for
    float16), lse float32. float16/float32 device arrays (BH, T, d): quantized on the
    device, results left there (`forward_device_float`). Codes and scales of your own:
    `forward_device`."""
    from ..._checks import check_bool
    from ..common._launch import is_device_array
    if precision != "fp8":
        raise ValueError(f"precision must be 'fp8' here, got {precision!r}")
    causal = check_bool(causal, "causal")
    on_device = [is_device_array(x) for x in (q, k, v)]
    if all(on_device):
        return forward_device_float(q, k, v, causal=causal, scale=scale, scheme=scheme,
                                    block=block, hadamard=hadamard, warpgroups=warpgroups,
                                    block_k=block_k, pipeline=pipeline)
    for name, x in (("q", q), ("k", k), ("v", v)):
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name}: precision='fp8' takes numpy float arrays (quantized on "
                            f"the host) or float16/float32 device arrays for all three "
                            f"(quantized on the device), got {type(x).__name__}")
    q8, k8, v8 = quantize(q, k, v, scheme=scheme, block=block,
                          hadamard=check_bool(hadamard, "hadamard"))
    o, lse = forward(q8, k8, v8, scale=scale, causal=causal, warpgroups=warpgroups,
                     block_k=block_k, pipeline=pipeline)
    dt = q.dtype if q.dtype in (np.float32, np.float64) else np.float32
    return o.astype(dt), lse


def forward_device(q, k, v, q_scale, k_scale, v_scale, *, q_block: int | None = None,
                   kv_block: int | None = None, scale: float, causal: bool = False,
                   warpgroups: int = 3, block_k: int = 128, pipeline: str = "overlap"):
    """(o, lse) as device arrays, o float16 (BH, Tq, D), lse float32 (BH, Tq), from device
    arrays: q (BH, Tq, D), k, v (BH, Tk, D) uint8 e4m3 codes with D a multiple of 32 (zero
    codes past the head's d), q_scale (BH, nq), k_scale, v_scale (BH, nk) float32, each
    scale covering q_block query rows or kv_block keys (None: one scale per head). The
    public call the benchmark times: V's transpose and the attention kernel."""
    check_capability()
    for name, x in (("q", q), ("k", k), ("v", v)):
        if np.dtype(x.dtype) != np.uint8 or len(x.shape) != 3:
            raise TypeError(f"{name} must be a (BH, T, D) uint8 device array of e4m3 codes, "
                            f"got {x.dtype} {tuple(x.shape)}")
    bh, tq, D = (int(n) for n in q.shape)
    tk = int(k.shape[1])
    if tuple(k.shape) != (bh, tk, D) or tuple(v.shape) != tuple(k.shape):
        raise ValueError(f"k and v must be (BH, Tk, D) = ({bh}, Tk, {D}) like q, got "
                         f"{tuple(k.shape)} and {tuple(v.shape)}")
    scale = float(scale)
    if not (np.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be finite and > 0 for the FP8 kernel (its row maxima "
                         f"are taken before the scale), got {scale}")
    cfg = plan(D, warpgroups, block_k, pipeline)
    if cfg.head_dim != D:
        raise ValueError(f"D (q's last axis) must be a multiple of {D_STEP}, got {D}")
    if q_block is not None and (int(q_block) < 1 or int(q_block) % Q_ROWS):
        raise ValueError(f"q_block must be None or a multiple of {Q_ROWS} (a warpgroup's rows "
                         f"share one scale), got {q_block}")
    if kv_block is not None and (int(kv_block) < 1 or int(kv_block) % cfg.block_k):
        raise ValueError(f"kv_block must be None or a multiple of block_k = {cfg.block_k} "
                         f"(a key tile shares one scale), got {kv_block}")
    qblk = 1 << 30 if q_block is None else int(q_block)
    kblk = 1 << 30 if kv_block is None else int(kv_block)
    for name, x, t, blk in (("q_scale", q_scale, tq, qblk), ("k_scale", k_scale, tk, kblk),
                            ("v_scale", v_scale, tk, kblk)):
        need = (bh, ceil_div(t, blk))
        if np.dtype(x.dtype) != np.float32 or len(x.shape) != 2 or \
                int(x.shape[0]) != bh or int(x.shape[1]) < need[1]:
            raise ValueError(f"{name} must be a float32 device array of shape {need} (one "
                             f"scale per {'head' if blk == 1 << 30 else f'{blk} rows'}), got "
                             f"{x.dtype} {tuple(x.shape)}")
    kp = ceil_div(tk, cfg.block_k) * cfg.block_k
    vt = _workspace(bh * D * kp // 4)
    o = pooled_empty((bh, tq, D // 2), np.uint32)   # no cudaMalloc per call (host_plans)
    lse = pooled_empty((bh, tq), np.float32)
    run(flat(q).view(np.uint32), flat(k).view(np.uint32), flat(v).view(np.uint32), vt,
        q_scale, k_scale, v_scale, cfg=cfg, bh=bh, tq=tq, tk=tk, kp=kp, scale=scale,
        causal=causal, qblk=qblk, kblk=kblk, out=(o, lse))
    return o.view(np.float16), lse


_WORKSPACE = threading.local()


def _workspace(words: int):
    """V^T's workspace (uint32 words), allocated once per size and host thread and reused:
    a thread's launches go to one stream in order, so a call's transpose cannot overwrite
    V^T before the previous call's kernel has read it; another thread has its own."""
    from numba import cuda
    held = getattr(_WORKSPACE, "array", None)
    if held is None or int(held.size) != words:
        _WORKSPACE.array = held = cuda.device_array(words, np.uint32)   # one size kept
    return held


def run(qw, kw, vw, vt, qs, ks, vs, *, cfg: Fp8Config, bh: int, tq: int, tk: int, kp: int,
        scale: float, causal: bool, qblk: int, kblk: int, out) -> None:
    """Launch on device arrays: codes as flat uint32 words (q: BH Tq D, k and v: BH Tk D),
    vt the V^T workspace (BH D kp codes), scales (BH, n) float32, out = (o (BH, Tq, D/2)
    uint32 fp16 pairs, lse (BH, Tq) float32). The transpose, then the attention kernel."""
    transpose(vw, vt, cfg.head_dim, bh, tk, kp)
    attention(qw, kw, vt, qs, ks, vs, cfg=cfg, bh=bh, tq=tq, tk=tk, kp=kp, scale=scale,
              causal=causal, qblk=qblk, kblk=kblk, out=out)


def transpose(vw, vt, D: int, bh: int, tk: int, kp: int) -> None:
    """V (flat words of BH Tk D codes) -> V^T (BH D kp codes, keys in KEY_ORDER)."""
    launch(transposer(D), None, (kp // K_STEP, bh), TRANSPOSE_THREADS, 0,
           (vw, vt, np.int32(tk), np.int32(kp)))


def attention(qw, kw, vt, qs, ks, vs, *, cfg: Fp8Config, bh: int, tq: int, tk: int, kp: int,
              scale: float, causal: bool, qblk: int, kblk: int, out) -> None:
    """The attention kernel alone, on V^T from `transpose`."""
    o, lse = out
    kern = checked_kernel(cfg)
    launch(kern, signature(), (ceil_div(tq, cfg.block_q), bh), cfg.threads, cfg.shared_bytes,
           (qw, kw, vt, o, lse, qs, ks, vs, np.int32(tq), np.int32(tk), np.int32(kp),
            np.float32(scale * LOG2E), np.int32(1 if causal else 0), np.int32(tk - tq),
            np.int32(qblk), np.int32(kblk)))
