"""flashcourse.cuda: Numba CUDA attention kernels, from the textbook version to a fast one.

Kernels, side by side in one folder per family (each module's header says the idea, the
bytes it moves, the expected cost and what limits it); `registry` lists them all, once:

    forward   dense      the unfused baseline: S to global memory, softmax kernel, then P V
              textbook   one thread per query row, square tiles (flash-attention-minimal style)
              flash      the fast one: a block of many threads per query block, coalesced
                         loads, register-tiled micro-tiles, exp2, online softmax, causal skipping
                         (dense, textbook and flash live in cuda_core/)
              tensor_core  FlashAttention-2 on tensor cores (mma.sync; tensor_core/, with
                         the building blocks in ptx/mma.py): fp16/bf16, or fp32 via 3xTF32
              hopper     the same on Hopper's warpgroup tensor cores (wgmma, compute
                         capability 9.0 only; hopper/)
    backward  simple, fast, fast_two_pass    (gradients/backward_kernels.py; fp32 on the
                         CUDA cores)
              tensor_core  FlashAttention-2's backward on tensor cores (gradients/tc_backward*.py,
                         ldmatrix/cp.async in ptx/smem_ops.py): fp16 for float16, 3xTF32
                         (or bf16) for float32; dQ by atomics or a second pass
              variants   the attention variants' backward (block mask, mask_mod, score_mod,
                         sinks, GQA) on tensor cores: `variants_backward`
                         (gradients/tc_variants_backward*.py)
    decode    split + combine: Flash-Decoding, Tq = 1 against a long KV cache, GQA
              (decoding/decode_kernels.py; `decode(q, k, v)`; registered as the forward
              "decode"); for fp16 with several query rows per KV head the split kernel
              runs on the tensor cores (decoding/decode_tc_kernels.py); over a paged KV
              cache (block tables, ragged lengths, one CUDA graph across steps):
              `paged_decode` (decoding/paged.py, decoding/paged_kernels.py)

Folders, from the ground up (an import never runs back up this list; the architecture
test checks it): ptx/ (inline-PTX wrappers and their simulator twins), common/ (launch,
plans, result checks, shared device functions), the families cuda_core/ and tensor_core/,
then gradients/, decoding/ and hopper/ (which build on tensor_core/), and on top
`registry` and this module. Each folder's `__init__` maps its files.

    from flashcourse.cuda import backward, forward
    o, lse = forward(q, k, v, kernel="flash", causal=True)
    dq, dk, dv = backward(q, k, v, o, lse, do, kernel="fast", causal=True)

Without a GPU every kernel runs on Numba's CUDA simulator (slow: tiny sizes only);
`import flashcourse` selects it before Numba loads, and `forward` says so once.
The simulator runs one kernel at a time per process: under it `forward`, `backward`
and `decode` are serialised (a lock; threads take turns and get right results). On a
GPU calls are not serialised (`common/_launch`'s docstring says more).

Results are checked like every other path's (`flashcourse._guards`): always for numpy
inputs; for device arrays only with check=True (`common/result_check.py`: one scan kernel and
one host sync), so that by default a device-array call never waits for the GPU.
"""

from __future__ import annotations

from .._checks import BACKWARD_NONFINITE_HINT, check_array, check_bool, check_choice
from .._guards import forward_result, gradients_finite, lse_rowsums, o_rowsums
from .common import host_plans
from .common._launch import finish, prepare, prepare_backward, serialised, simulator_note
from .registry import BACKWARD, FORWARD, get, variant_backward, variant_forward
from .common.result_check import check_result

#: What `forward` and `decode` suggest when float32 scores overflow.
FLOAT64_ADVICE = ("use flashcourse.tiled.forward or flashcourse.cpu.forward with float64 "
                  "inputs (the CUDA kernels compute in float32)")

#: Names of the registered forward kernels (`registry.FORWARD`), in registration order.
KERNELS = tuple(FORWARD)
#: The forward kernels that run on Numba's simulator too (all of them today; hopper through
#: the simulator's stand-ins for wgmma, `ptx/wgmma.py`).
SIM_KERNELS = tuple(name for name, spec in FORWARD.items() if spec.simulator)
#: Forward kernels whose device-array calls take the cached fast path (`host_plans`).
PLANNED_KERNELS = ("flash", "tensor_core", "hopper", "decode")
#: backward kernels whose device-array calls replay a cached plan (`host_plans`)
PLANNED_BACKWARD = ("tensor_core",)


@serialised
def forward(q, k, v, *, kernel: str = "flash", causal: bool = False,
            scale: float | None = None, allow_nonfinite: bool = False, check: bool = False,
            **options):
    """Exact attention forward on the GPU (or the simulator).

    Args:
        q: (..., Tq, d); k, v: (..., Tk, d). numpy arrays (float16/32/64; copied to
            the device as the kernel computes, float32 for the course's kernels; o
            comes back in the input dtype) or C-contiguous Numba device arrays of a
            dtype the kernel takes (results stay on the device).
        kernel: a name of `registry.FORWARD`: "flash" (default), "textbook", "dense".
        causal: bottom-right aligned mask (query i sees key j iff j <= i + Tk - Tq).
        scale: score scale, default 1/sqrt(d).
        allow_nonfinite: accept NaN/inf in numpy inputs. A row that sees a NaN or inf
            (in its q row or in a k, v row it sees) gets o = NaN and lse = NaN, and so
            does a row that a masked NaN/inf of v reaches through a tile's P V.
        check: device-array inputs only (numpy results are always checked): check the
            results on the device as numpy results are checked on the host
            (`result_check.check_result`: one pass over o and lse and one host sync when
            they are finite; a copy to the host to find the cause when not). Off by
            default, so that a device-array call never waits for the GPU.
        options: what the kernel takes (`registry.FORWARD[kernel].options`), e.g.
            block_q, block_k (Br, Bc) for "flash" and "textbook" (square tiles there),
            threads, tm and unroll for "flash"; precision ("fp16", "bf16", "3xtf32",
            "tf32"), warps, block_k, m_tiles, prefetch, min_blocks, pipeline ("plain" |
            "async" | "planes": version 1, 2 or, 3xTF32/TF32 only, 3), lazy_rescale
            (fp16/bf16 version 2) for
            "tensor_core" (which keeps float16 input in float16); None means the
            kernel's default, and
            an option the kernel does not use is a ValueError. kernel="hopper" with
            precision="fp8": numpy float inputs rounded to e4m3 on the host (scheme
            "tensor" | "head" | "block", block tokens per scale (128), hadamard) and
            FlashAttention-3's FP8 forward on the GPU (`hopper/fp8.py`).

    Returns:
        o (..., Tq, d) and lse (..., Tq) natural-log logsumexp per row (float32;
        float64 for float64 numpy input); a row with no visible key gives o = 0,
        lse = -inf, and only then.

    Raises:
        ValueError/TypeError naming the argument for bad input, and ValueError
        naming the limit and the amounts for a configuration that cannot launch.
        ValueError for numpy inputs when a row with finite inputs that sees keys gets
        a non-finite result: the scores overflow float32 (`flashcourse._guards`).
        Results of device-array inputs stay on the device and are checked only with
        check=True (then also ValueError naming q, k or v if one holds a NaN/inf and
        allow_nonfinite is False).
    """
    check = check_bool(check, "check")
    kernel = check_choice(kernel, "kernel", FORWARD)
    if kernel == "hopper" and options.get("precision") == "fp8":   # e4m3 inputs: hopper/fp8
        from .hopper import fp8
        unknown = sorted(set(options) - set(fp8.FLOAT_OPTIONS))
        if unknown:
            raise ValueError(f"precision='fp8' takes the options {fp8.FLOAT_OPTIONS}, got "
                             f"{unknown}")
        return fp8.forward_float(q, k, v, causal=causal, scale=scale, **options)
    if not check and kernel in PLANNED_KERNELS:   # device arrays: the cached fast path
        settings = (kernel, causal, scale, allow_nonfinite, tuple(sorted(options.items())))
        return host_plans.cached_call(
            "forward", (q, k, v), settings,
            lambda: _forward(q, k, v, kernel, causal, scale, allow_nonfinite, False, options))
    return _forward(q, k, v, kernel, causal, scale, allow_nonfinite, check, options)


def _forward(q, k, v, kernel, causal, scale, allow_nonfinite, check, options):
    """`forward`'s checked path (every call with numpy inputs, or check=True; a device
    call's first call per shape, whose launches `host_plans` records)."""
    spec = get("forward", kernel)
    given = spec.check_options(options)
    simulator_note()
    x, on_device, out_dtype, lse_dtype = prepare(q, k, v, causal, scale, allow_nonfinite,
                                                 dtypes=spec.dtypes,
                                                 convert_to=spec.convert_to)
    _checkable(x, on_device and check)
    o, lse = spec.run(x, **given)
    if on_device and check:         # results stay on the device: checked on request
        check_result(x.q, x.k, x.v, o, lse, causal=x.causal, scale=x.scale,
                     allow_nonfinite=allow_nonfinite, advice=FLOAT64_ADVICE)
    o, lse = finish(x, (o, lse), on_device, (out_dtype, lse_dtype))
    if on_device:
        return o, lse
    return forward_result(q, k, v, o, lse, x.causal, scale=x.scale,
                          allow_nonfinite=allow_nonfinite, compute="float32",
                          advice=FLOAT64_ADVICE)


@serialised
def backward(q, k, v, o, lse, do, *, kernel: str = "fast", causal: bool = False,
             scale: float | None = None, check: bool = False, **options):
    """Gradients of attention on the GPU (or Numba's simulator), P recomputed from lse.

    Same contract as `flashcourse.tiled.backward`: q (..., Tq, d), k, v (..., Tk, d),
    o and do (..., Tq, d) in q's dtype, lse (..., Tq) from the forward (-inf for a row
    with no visible key). The fp32 kernels convert numpy inputs to float32 (so float64
    input gets float32 accuracy) and take float32 C-contiguous device arrays; the
    tensor-core kernel takes float16 (fp16) or float32 (3xTF32, or precision="bf16")
    arrays. The gradients come back in the input dtype: numpy for numpy input, device
    arrays (left on the device) for device input.

    Args:
        kernel: a name of `registry.BACKWARD`: "simple" (one thread per row, two
            launches), "fast" (key-major tiles, dQ by fp32 atomic adds),
            "fast_two_pass" (dQ by a second, query-major pass; deterministic), or
            "tensor_core" (FlashAttention-2's backward on mma.sync, `tc_backward.py`).
        options: block_q, block_k (Br, Bc) of the fast kernels (multiples of the thread
            layout: 16 on a GPU, 4 under the simulator); None = a default for d. The
            tensor-core kernel takes precision ("fp16" for float16, "3xtf32", the default,
            or "bf16" for float32), deterministic (dQ by a query-major pass instead of
            atomic adds; fp16/bf16 only), pipeline
            ("async": cp.async + ldmatrix, or "plain": version 1; 3xtf32: "async" or
            "planes", Q_i and dO_i split once per query block) and its tiles (warps,
            block_q, kv_regs, q_block_k).
        causal, scale: as in the forward.
        check: device-array inputs only (numpy inputs are always checked): run the
            checks below on host copies of the inputs and results (a full copy and a
            host sync; off by default).

    Returns:
        (dq, dk, dv) shaped like q, k, v.

    Raises (numpy inputs; device arrays with check=True):
        ValueError naming the argument for bad input: shapes, dtypes, NaN/inf, a
        float64 value beyond float32's range.
        ValueError "lse does not match the inputs" when a recomputed row of P does not
        sum to 1: every kernel adds up its rows of P (psum; Br atomic adds per tile in
        the fast kernels) and `flashcourse._guards.lse_rowsums` compares the sums with 1
        (1e-3 plus float32 rounding terms), and rejects lse = -inf for a row that sees
        keys.
        ValueError "the gradients overflow float32" when dq, dk or dv is not finite
        (`_guards.gradients_finite`; "do not fit float16" for float16 inputs).
        ValueError "o does not match the inputs" when o is not the forward's output:
        the kernels add up each row of dS = P (dP - D) too (dsum, beside psum), which
        is do_i . (P V - o)_i, and `_guards.o_rowsums` compares it with 0.
    """
    check = check_bool(check, "check")
    kernel = check_choice(kernel, "kernel", BACKWARD)
    if not check and kernel in PLANNED_BACKWARD:  # device arrays: the cached fast path
        settings = (kernel, causal, scale, tuple(sorted(options.items())))
        return host_plans.cached_call(
            "backward", (q, k, v, o, lse, do), settings,
            lambda: _backward(q, k, v, o, lse, do, kernel, causal, scale, False, options))
    return _backward(q, k, v, o, lse, do, kernel, causal, scale, check, options)


def _checkable(x, check: bool) -> None:
    """check=True reads the arrays as numbers: refuse the uint16 bf16 bit patterns (the
    tensor-core kernels' bf16 input), whose values it would misread."""
    if check and x.dtype.kind != "f":
        raise ValueError(f"check=True checks floating-point arrays; {x.dtype} arrays (bf16 "
                         f"bit patterns for kernel='tensor_core') are not checked: run "
                         f"without check, or with float32 arrays and precision='bf16'")


def _backward(q, k, v, o, lse, do, kernel, causal, scale, check, options):
    """`backward`'s checked path (numpy inputs, check=True, and the first call per shape
    of device arrays, whose launches `host_plans` records)."""
    from numba import cuda

    spec = get("backward", kernel)
    given = spec.check_options(options)
    simulator_note()
    x, on_device, out_dtype = prepare_backward(q, k, v, o, lse, do, causal, scale,
                                               dtypes=spec.dtypes,
                                               convert_to=spec.convert_to)
    _checkable(x, on_device and check)
    checked = check or not on_device
    compute = spec.compute(given, x.dtype)
    psum = dsum = None
    if checked:            # the kernels add up each row of P and dS for the checks
        psum = cuda.device_array((x.bh, x.tq), dtype="float32")   # (BH, Tq) sum_j P_ij
        dsum = cuda.device_array((x.bh, x.tq), dtype="float32")   # (BH, Tq) sum_j dS_ij
    grads = spec.run(x, psum=psum, dsum=dsum, **given)
    if not checked:                    # results stay on the device: checked on request
        return finish(x, grads, True, (out_dtype,) * 3)
    g32 = [g.copy_to_host() for g in grads]                       # (BH, T, d)
    if on_device:
        host = [a.copy_to_host() for a in (x.q, x.k, x.v, x.o, x.lse, x.do)]
        for name, a in zip(("q", "k", "v", "o", "do"), host[:4] + host[5:]):
            check_array(a, f"{name} (a device array)", hint=BACKWARD_NONFINITE_HINT)
        returned = g32
    else:                              # the caller's arrays, flattened to (BH, T, ...)
        host = [a.reshape(x.bh, *a.shape[-2:]) for a in (q, k, v, o)]
        host += [lse.reshape(x.bh, x.tq), do.reshape(x.bh, x.tq, x.d)]
        returned = [g.astype(out_dtype, copy=False) for g in g32]
    hq, hk, hv, ho, hl, hdo = host
    lse_rowsums(psum.copy_to_host(), hq, hk, hl, x.causal, x.scale, compute)
    gradients_finite(list(zip(g32, returned)), compute)
    o_rowsums(dsum.copy_to_host(), hq, hk, hv, ho, hl, hdo, x.causal, x.scale, compute)
    if on_device:
        return finish(x, grads, True, (out_dtype,) * 3)
    return tuple(x.unflatten(g) for g in returned)


def extra_device_bytes(kernel: str, bh: int, tq: int, tk: int, d: int = 0) -> int:
    """Device memory a forward kernel allocates beyond q, k, v, o and lse (bytes)."""
    return get("forward", kernel).extra_bytes(bh, tq, tk, d)


def variants_forward(q, k, v, *, kernel: str = "cuda_core", **options):
    """The attention-variants forward (mask_mod, score_mod, block mask, sinks, GQA;
    `flashcourse.variants`) on the GPU (or the simulator): kernel "cuda_core" (one thread
    per query row, fp32) or "tensor_core" (FlashAttention-2 on mma.sync, q, k, v rounded
    to fp16 or bf16: `precision=`). Arguments and results as
    `flashcourse.variants.tiled.forward` (`registry.VARIANT_FORWARDS`)."""
    return variant_forward(kernel)(q, k, v, **options)


def variants_backward(q, k, v, o, lse, do, *, kernel: str = "tensor_core", **options):
    """The attention-variants backward on the GPU (or the simulator): (dq, dk, dv,
    dsinks) as `flashcourse.variants.tiled.backward`, from the forward's o and lse.
    kernel "tensor_core" (key-major FlashAttention-2 backward on mma.sync, q, k, v, dO
    rounded to fp16 or bf16; `gradients/tc_variants_backward.py`: numpy or device
    arrays, block_mask, score_mod, score_mod_grad, sinks, scale, precision, warps,
    step_q) (`registry.VARIANT_BACKWARDS`)."""
    return variant_backward(kernel)(q, k, v, o, lse, do, **options)


__all__ = ["forward", "backward", "decode", "paged_decode", "capture", "variants_forward",
           "variants_backward",
           "KERNELS", "SIM_KERNELS", "extra_device_bytes"]


@serialised
def decode(q, k, v, **options):
    """Flash-Decoding on the GPU (or the simulator): q (B, Hq, Tq, d), k, v (B, Hkv, Tk, d)
    with Hq a multiple of Hkv (GQA, K and V never copied). See
    `flashcourse.cuda.decoding.decode_kernels.decode` for the options (num_splits, block_k, causal,
    scale, allow_nonfinite, check, kernel="cuda_cores" | "tensor_core", ...). Returns
    o (B, Hq, Tq, d) and lse (B, Hq, Tq); numpy results are checked as `forward`'s are
    (overflow raises, NaN stays NaN), device results with check=True.

    An FP8 cache: k, v uint8 e4m3 codes (a PyTorch float8_e4m3fn tensor as
    .view(torch.uint8)) with k_scale=, v_scale= fp32 scales per (B, Hkv) or, with
    scale_block=Bs, per block of Bs tokens (`flashcourse.fp8.kv` has the layout;
    `decoding.fp8_kv.decode_fp8` the options)."""
    from .decoding.decode_kernels import decode as run_decode
    if _fp8_call(k, v, options):
        from .decoding.fp8_kv import decode_fp8
        return decode_fp8(q, k, v, options.pop("k_scale", None), options.pop("v_scale", None),
                          **options)
    if check_bool(options.get("check", False), "check"):
        return run_decode(q, k, v, **options)
    return host_plans.cached_call("decode", (q, k, v), tuple(sorted(options.items())),
                                  lambda: run_decode(q, k, v, **options))


@serialised
def paged_decode(q, k_pages, v_pages, block_table, seq_lens, **options):
    """Flash-Decoding over a paged KV cache: q (B, Hq, Tq, d), pools k_pages, v_pages
    (num_pages, Hkv, page_size, d), block_table (B, max_pages_per_seq) and seq_lens (B,)
    int32 (layout: `flashcourse.paged_cache`). Options and results as `decode`
    (`flashcourse.cuda.decoding.paged.paged_decode`); for a fixed grid that one CUDA
    graph replays across changing lengths, `decoding.paged.paged_decode_plan` and `run`.
    An FP8 pool (uint8 codes, k_scale=, v_scale=, scale_block=): as `decode`
    (`decoding.fp8_kv.paged_decode_fp8`)."""
    from .decoding.paged import paged_decode as run_paged
    if _fp8_call(k_pages, v_pages, options):
        from .decoding.fp8_kv import paged_decode_fp8
        return paged_decode_fp8(q, k_pages, v_pages, block_table, seq_lens,
                                options.pop("k_scale", None), options.pop("v_scale", None),
                                **options)
    return run_paged(q, k_pages, v_pages, block_table, seq_lens, **options)


def _fp8_call(k, v, options) -> bool:
    """True for an FP8 cache: scales given, or uint8 codes (whose missing scales are then
    named); else the fp16/fp32 path, which refuses FP8-only options by name."""
    options = dict(options)
    fp8 = any(options.get(n) is not None for n in ("k_scale", "v_scale", "scale_block",
                                                    "hw_cvt"))
    codes = any(str(getattr(x, "dtype", "")).endswith("uint8") for x in (k, v))  # torch too
    if codes and (options.get("k_scale") is None or options.get("v_scale") is None):
        raise ValueError("k and v hold FP8 (uint8) codes: pass their fp32 scales as k_scale= "
                         "and v_scale= (flashcourse.fp8.kv.quantize_cache makes both)")
    if fp8 and not codes:
        raise TypeError(f"k_scale, v_scale, scale_block and hw_cvt are for FP8 caches (k, v "
                        f"of uint8 e4m3 codes), got k of dtype {getattr(k, 'dtype', None)}")
    return fp8 or codes


def capture(call: str, q, k, v, **options):
    """Record one `forward` or `decode` call on these device arrays into a CUDA graph.

    Returns a `host_plans.CapturedCall`: `g.replay()` queues the whole call (its two
    kernels for decode) with one driver call and returns the same output arrays every
    time; write new values into q, k, v (or the KV cache) between replays. GPU only;
    the call's first run builds its plan (`host_plans`), then the plan is recorded.

        g = capture("decode", q, k_cache, v_cache)
        o, lse = g.replay()
    """
    if call not in ("forward", "decode"):
        raise ValueError(f"call must be 'forward' or 'decode', got {call!r}")
    if check_bool(options.get("check", False), "check"):
        raise ValueError("check=True waits for the GPU and cannot be captured")
    if call == "decode":
        return host_plans.capture("decode", lambda: decode(q, k, v, **options), (q, k, v),
                                  tuple(sorted(options.items())))
    kernel = check_choice(options.pop("kernel", "flash"), "kernel", FORWARD)
    if kernel not in PLANNED_KERNELS:
        raise ValueError(f"kernel {kernel!r} cannot be captured; one of {PLANNED_KERNELS}")
    causal = options.pop("causal", False)
    scale = options.pop("scale", None)
    allow_nonfinite = options.pop("allow_nonfinite", False)
    settings = (kernel, causal, scale, allow_nonfinite, tuple(sorted(options.items())))
    return host_plans.capture(
        "forward", lambda: forward(q, k, v, kernel=kernel, causal=causal, scale=scale,
                                   allow_nonfinite=allow_nonfinite, **options),
        (q, k, v), settings)
