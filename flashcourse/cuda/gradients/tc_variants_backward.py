"""tc_variants_backward: the host side of the attention variants' backward on tensor cores.

The kernel, with the idea, the bytes and what limits it, is `tc_variants_backward_kernels`.
A call runs three kernels, the first and last shared with the course's tensor-core backward:

    D pre-pass    (tc_backward_passes) D = rowsum(dO o O), lse in log2 units (+inf for a
                  row with nothing visible: P = 0 there), dQ zeroed for the reductions
    key-major     one thread block per (key block j, key/value head): dK_j, dV_j summed
                  over the block mask's transposed lists and the GQA group, dQ added
    sink grad     dsink_h = -sum_{b, i} exp(sink_h - lse_i) D_i (only with sinks)

and, for 16-bit outputs, the casts of the fp32 gradients. Arguments and results as
`flashcourse.variants.tiled.backward`:

    from flashcourse import cuda
    o, lse = cuda.variants_forward(q, k, v, block_mask=bm, score_mod=sm, sinks=s,
                                   kernel="tensor_core")
    dq, dk, dv, dsinks = cuda.variants_backward(q, k, v, o, lse, do, block_mask=bm,
                                                score_mod=sm, sinks=s)

numpy inputs: float32 (rounded to fp16, or bf16 with precision="bf16"), float16 or
ml_dtypes bfloat16; gradients come back in the input dtype, dsinks (Hq,) float64.
Device arrays (Numba's, or anything with the CUDA array interface), (B, H, T, d)
C-contiguous: float16 (fp16) or uint16 bf16 bit patterns (bf16), lse float32; the
gradients stay on the device in the input dtype, dsinks a (Hq,) float32 device array; no
value is read back (device arrays are not checked for NaN: see `flashcourse.cuda`).

Tiles: the block mask's (Br', Bc') fix the work lists; the kernel's own Bc = 16 x warps
keys must divide Bc', and its step of Br query rows (`step_q`) must divide Br'. By
default the course's tensor-core backward's tiles (`tc_backward.default_tiles`), shrunk
until they divide the block mask's.
"""

from __future__ import annotations

import numpy as np
from numba import cuda

from ..._checks import check_scale
from ...geometry import ceil_div
from ...gpu import using_simulator
from ...variants.inputs import check_grad_inputs, check_layout, check_sinks
from ...variants.mods import always_visible, fingerprint, resolve_grad
from ...variants.tiled import finish_grads, prepare
from ..common._launch import as_device_array, check_registers, flat, is_device_array, \
    launch, serialised, simulator_note
from ..ptx.mma import round_bf16, round_fp16
from ..tensor_core.host import MAX_HEAD_DIM, _to_words, check_capability, is_bfloat16
from ..tensor_core.variants import checked_device_arrays, checked_mods, default_precision, \
    device_block_mask
from . import tc_backward_passes as passes
from .tc_backward import _array, _words, default_tiles, plan
from .tc_backward_kernels import LD_ROWS
from .tc_variants_backward_kernels import SINK_THREADS, make_sink_grad_kernel, \
    make_variants_backward_kernel

PRECISIONS = ("fp16", "bf16")
#: kernels kept (each holds the functions compiled into it)
MAX_KERNELS = 32
_KERNELS: dict = {}
_SINK_KERNELS: dict = {}
#: the kernel's warps (Bc = 16 warps keys) and query-row steps tried, after the defaults
WARPS_TRIED = (8, 4, 2, 1)
STEPS_TRIED = (128, 64, 32, 16)


def config(precision: str, d: int, mask_block: tuple, *, warps=None, step_q=None,
           simulator: bool | None = None):
    """The `tc_backward.TCBConfig` for head dim d and a block mask of mask_block =
    (Br', Bc') tiles: the default tiles (or `warps`, `step_q` when given), shrunk until
    16 warps divides Bc' and step_q divides Br'. ValueError naming what does not fit."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS} for the tensor-core "
                         f"variants backward, got {precision!r}")
    if d > MAX_HEAD_DIM:
        raise ValueError(f"head dim d must be at most {MAX_HEAD_DIM} for the tensor-core "
                         f"variants backward, got {d}")
    sim = using_simulator() if simulator is None else bool(simulator)
    brm, bcm = mask_block
    if bcm % 16 or brm % 16:
        raise ValueError(f"the block mask's tiles (block_q, block_k) = ({brm}, {bcm}) must "
                         f"be multiples of 16 for the tensor-core variants backward")
    base = default_tiles(d, sim, precision)
    ws = (warps,) if warps is not None else (base["warps"],) + WARPS_TRIED
    qs = (step_q,) if step_q is not None else (base["block_q"],) + STEPS_TRIED
    last = None
    for w in ws:
        for bq in qs:
            if not isinstance(w, int) or not isinstance(bq, int) or w < 1 or bq < 1 \
                    or bcm % (16 * w) or brm % bq:
                continue
            try:
                return plan(precision, d, w, bq, sim, True, False, base["kv_regs"], 64, 0,
                            "async")
            except ValueError as e:          # this pair does not build: try the next
                last = e
    raise ValueError(f"no tiles of the tensor-core variants backward fit the block mask's "
                     f"(block_q, block_k) = ({brm}, {bcm}) at d = {d}: warps (16 x warps "
                     f"keys) must divide block_k and step_q divide block_q (tried warps "
                     f"{sorted(set(ws), key=str)}, step_q {sorted(set(qs), key=str)})"
                     + (f"; last: {last}" if last else ""))


def kernel_for(cfg, mask_block, mask_mod, score_mod, score_grad):
    """The compiled key-major kernel for cfg, the block mask's tiles and the functions,
    built once per contents (`variants.mods.fingerprint`)."""
    key = (cfg, tuple(mask_block), fingerprint(mask_mod),
           None if score_mod is None else fingerprint(score_mod),
           None if score_grad is None else fingerprint(score_grad))
    if key in _KERNELS:
        return _KERNELS[key][1]
    kern = make_variants_backward_kernel(cfg, tuple(mask_block), mask_mod, score_mod,
                                         score_grad)
    if len(_KERNELS) >= MAX_KERNELS:
        _KERNELS.pop(next(iter(_KERNELS)))
    _KERNELS[key] = ((mask_mod, score_mod, score_grad), kern)   # the functions kept alive
    return kern


def signature():
    """The key-major kernel's launch types."""
    from numba import float32, int32, types, uint32
    w1, w3 = types.Array(uint32, 1, "C"), types.Array(uint32, 3, "C")
    f1, f3 = types.Array(float32, 1, "C"), types.Array(float32, 3, "C")
    i3, i4 = types.Array(int32, 3, "C"), types.Array(int32, 4, "C")
    return (w1, w3, w3, w1, w1, f1, f3, f3, int32, int32, int32, int32, int32, float32,
            i3, i4, i3, i4)


def run(qw, kw, vw, dow, o, do, lse, dq, dk, dv, q_lists, *, tq: int, tk: int, d: int,
        heads: int, group: int, scale: float, cfg, mask_block, mask_mod, score_mod=None,
        score_grad=None, sinks=None, dsinks=None, delta_kind: str = "float",
        ld=None) -> None:
    """Launch the pre-pass, the key-major kernel and (with sinks) the sink gradient on
    prepared device arrays: qw, dow (B Hq, Tq, D/2) uint32 words, kw, vw (B Hkv, Tk, D/2)
    words; o, do (B Hq, Tq, d) for D (float16 or float32 arrays of 16-bit values:
    delta_kind "float"; uint16 bf16 bits: "bits"); lse (B Hq, Tq) float32; dq (B Hq, Tq,
    d), dk, dv (B Hkv, Tk, d) float32, overwritten; q_lists the block mask's transposed
    lists (`device_block_mask(bm, "q")`); sinks, dsinks (Hq,) float32 device arrays or
    None. ld: the (2, B Hq, Tq rounded up to LD_ROWS) float32 workspace (None: made)."""
    check_capability(cfg.precision)
    bhq = int(qw.shape[0])
    kern = kernel_for(cfg, mask_block, mask_mod if mask_mod is not None else always_visible,
                      score_mod, score_grad)
    i32, f32 = np.int32, np.float32
    tqp = ceil_div(tq, LD_ROWS) * LD_ROWS
    if ld is None or tuple(ld.shape) != (2, bhq, tqp):
        ld = _array((2, bhq, tqp), np.float32)
    tc_delta, _, _, tc_delta_bits, _ = passes.pass_kernels()
    delta = tc_delta_bits if delta_kind == "bits" else tc_delta
    launch(delta, None, passes.delta_grid(tq, bhq), passes.PASS_THREADS, 0,
           (o, do, lse, ld, dq, i32(1), i32(tq), i32(d), ld[1], ld[1], i32(0)))
    if not cfg.simulator:
        check_registers("tensor-core variants backward kernel", kern.compile(signature()),
                        cfg.threads)
    grid = (ceil_div(tk, cfg.block_k), int(kw.shape[0]))
    launch(kern, signature(), grid, cfg.threads, cfg.shared_bytes,
           (flat(qw), kw, vw, flat(dow), flat(ld.view(np.uint32)), flat(dq), dk, dv,
            i32(tq), i32(tk), i32(d), i32(heads), i32(group), f32(scale), *q_lists))
    if sinks is not None:
        sim = cfg.simulator
        if sim not in _SINK_KERNELS:
            _SINK_KERNELS[sim] = make_sink_grad_kernel(sim)
        launch(_SINK_KERNELS[sim], None, heads, SINK_THREADS, 0,
               (ld, sinks, dsinks, i32(bhq // heads), i32(heads), i32(tq)))


@serialised
def backward(q, k, v, o, lse, do, *, block_mask=None, score_mod=None, score_mod_grad=None,
             sinks=None, scale=None, block_q: int | None = None, block_k: int | None = None,
             precision: str | None = None, warps: int | None = None,
             step_q: int | None = None):
    """(dq, dk, dv, dsinks) as `flashcourse.variants.tiled.backward`, on tensor cores
    (module docstring: dtypes, numpy and device arrays). o, lse: the forward's for the
    same arguments (`tensor_core.variants.forward`); do (B, Hq, Tq, d) = dL/do;
    score_mod_grad: d score_mod / d score (None: the one a built-in carries). precision:
    "fp16" (default; float16's range is checked) or "bf16" (the default for bfloat16);
    warps, step_q: the kernel's tiles (module docstring)."""
    simulator_note()
    if any(is_device_array(a) for a in (q, k, v, o, lse, do)):
        return _backward_device(q, k, v, o, lse, do, block_mask, score_mod, score_mod_grad,
                                sinks, scale, block_q, block_k, precision, warps, step_q)
    out_dtype = np.asarray(q).dtype
    if precision is None:
        precision = default_precision(out_dtype)
    if is_bfloat16(out_dtype):                  # ml_dtypes: checked and run as float32
        q, k, v, o, do = (np.asarray(a, np.float32) for a in (q, k, v, o, do))
    p, bm = prepare(q, k, v, block_mask, score_mod, sinks, scale, block_q, block_k)
    o, lse, do = check_grad_inputs(p, o, lse, do)
    grad = resolve_grad(score_mod, score_mod_grad)
    cfg = config(precision, p.d, bm.block_size, warps=warps, step_q=step_q)
    f32 = np.float32
    host = {n: np.asarray(a, f32).reshape(-1, a.shape[2], p.d)
            for n, a in (("q", p.q), ("k", p.k), ("v", p.v), ("o", o), ("do", do))}
    if precision == "fp16":
        check_fp16_range(host)
    rounded = {n: (round_fp16 if precision == "fp16" else round_bf16)(a).astype(f32)
               for n, a in host.items()}                              # 16-bit values
    qw, kw, vw, dow = (cuda.to_device(_to_words(host[n], precision, cfg.head_dim))
                       for n in ("q", "k", "v", "do"))
    grads = (cuda.device_array(host["q"].shape, f32),                 # dq (B Hq, Tq, d)
             cuda.device_array(host["k"].shape, f32),                 # dk (B Hkv, Tk, d)
             cuda.device_array(host["k"].shape, f32))                 # dv
    sk = None if p.sinks is None else cuda.to_device(p.sinks.astype(f32))
    dsk = None if p.sinks is None else cuda.device_array(p.heads, f32)
    run(qw, kw, vw, dow, cuda.to_device(rounded["o"]), cuda.to_device(rounded["do"]),
        cuda.to_device(np.ascontiguousarray(lse.reshape(-1, p.tq), f32)), *grads,
        device_block_mask(bm, "q"), tq=p.tq, tk=p.tk, d=p.d, heads=p.heads, group=p.group,
        scale=p.scale, cfg=cfg, mask_block=bm.block_size, mask_mod=bm.mask_mod,
        score_mod=score_mod, score_grad=grad, sinks=sk, dsinks=dsk)
    shapes = (p.q.shape, p.k.shape, p.v.shape)
    g = tuple(a.copy_to_host().reshape(s) for a, s in zip(grads, shapes))
    dsinks = None if dsk is None else dsk.copy_to_host().astype(np.float64)
    dq, dk, dv, dsinks = finish_grads(p, g, dsinks)
    if is_bfloat16(out_dtype):
        dq, dk, dv = (a.astype(out_dtype) for a in (dq, dk, dv))
    return dq, dk, dv, dsinks


def check_fp16_range(arrays: dict) -> None:
    """ValueError naming the first array (name -> float32 values) whose finite values
    exceed float16's largest, 65504."""
    for name, a in arrays.items():
        fin = np.abs(a[np.isfinite(a)])
        big = float(fin.max()) if fin.size else 0.0
        if big > 65504.0:
            raise ValueError(f"{name} has |values| up to {big:.3g}, beyond float16's "
                             f"largest 65504: use precision='bf16'")


def _backward_device(q, k, v, o, lse, do, block_mask, score_mod, score_mod_grad, sinks,
                     scale, block_q, block_k, precision, warps, step_q):
    """`backward` on device arrays: shapes and dtypes checked, nothing read back."""
    arrays, own = checked_device_arrays({"q": q, "k": k, "v": v, "o": o, "do": do},
                                        precision)
    lse = as_device_array("lse", lse, (np.float32,))
    q, k, v, o, do = arrays.values()
    dt = np.dtype(q.dtype)
    qs, ks = tuple(int(n) for n in q.shape), tuple(int(n) for n in k.shape)
    check_layout(qs, ks, tuple(int(n) for n in v.shape))
    for name, a, want in (("o", o, qs), ("do", do, qs), ("lse", lse, qs[:3])):
        if tuple(int(n) for n in a.shape) != want:
            raise ValueError(f"{name} must have shape {want}, got {tuple(a.shape)}")
    batch, hq, tq, d = qs
    hkv, tk = ks[1], ks[2]
    bm = checked_mods(block_mask, score_mod, batch, hq, tq, tk, block_q, block_k)
    grad = resolve_grad(score_mod, score_mod_grad)
    sinks = check_sinks(sinks, hq)
    scale = check_scale(scale, d)
    cfg = config(own, d, bm.block_size, warps=warps, step_q=step_q)
    D = cfg.head_dim

    def rows(a, t):                                                    # (B H, T, d)
        return a.reshape(int(a.size) // (t * d), t, d)
    qw, kw, vw, dow = (_words(rows(a, t), own, D) for a, t in ((q, tq), (k, tk), (v, tk),
                                                              (do, tq)))
    f32 = np.float32
    work = (_array((batch * hq, tq, d), f32), _array((batch * hkv, tk, d), f32),
            _array((batch * hkv, tk, d), f32))
    sk = None if sinks is None else cuda.to_device(sinks.astype(f32))
    dsk = None if sinks is None else cuda.device_array(hq, f32)
    run(qw, kw, vw, dow, rows(o, tq), rows(do, tq), lse.reshape(batch * hq, tq), *work,
        device_block_mask(bm, "q"), tq=tq, tk=tk, d=d, heads=hq, group=hq // hkv,
        scale=scale, cfg=cfg, mask_block=bm.block_size, mask_mod=bm.mask_mod,
        score_mod=score_mod, score_grad=grad, sinks=sk, dsinks=dsk,
        delta_kind="bits" if own == "bf16" else "float")
    out = tuple(_array(w.shape, dt) for w in work)
    for src, dst in zip(work, out):
        passes.cast(src, dst, bits=own == "bf16")
    shapes = (qs, ks, ks)
    return (*(a.reshape(*s) for a, s in zip(out, shapes)), dsk)
