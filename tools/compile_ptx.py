"""Compile the course's mma.sync-era CUDA kernels for a real GPU, WITHOUT a GPU: the paged,
FP8 and attention-variants kernels, and (families tc_fwd, tc_bwd, cc_fwd, cc_bwd, decode) the
dense tensor-core forward and backward in every precision and version, the CUDA-core forwards
and backward and decoding's split kernels.

    python3 tools/compile_ptx.py                        # every case, sm_90 and sm_80
    python3 tools/compile_ptx.py --quick                # a few cases per family (the test's)
    python3 tools/compile_ptx.py --families fp8 --arch sm_89 --out DIR   # keep the PTX
    python3 tools/compile_ptx.py --probe                # is the compiler there? (exit 2: no)
    python3 tools/compile_ptx.py --list --match softcap # the cases (--match: a regex on names)
    python3 tools/compile_ptx.py --arch sm_90 --families tc_bwd --out DIR  # PTX of a copy,
    python3 tools/compile_ptx.py --compare DIR_OLD DIR_NEW     # beside another copy's (a
        # refactor that should not change the compiled code: same text, or which counts moved)

Why: the tests run every kernel on Numba's CUDA simulator, which accepts code the real
compiler refuses (a shared or local array whose size is not a compile-time constant, for one:
issue 49). This tool builds the kernels as a GPU run builds them and
compiles them with NVIDIA's compilers: NVVM (LLVM IR -> PTX, where Numba's typing and
lowering errors appear) and, when it is found, ptxas (PTX -> machine code, where a wrong
inline-PTX instruction for the architecture appears, and the registers and spills are read).

Where the kernels and their argument types come from (so that they cannot drift from the
host code): each case is a call a user makes (`cuda.paged_decode`, `cuda.decode` on an FP8
cache, `fp8_kv.append_fp8`, `cuda.variants_forward`, `cuda.variants_backward`, ...) run on a
stand-in GPU (`StandInGPU`): Numba and `flashcourse.limits` believe a device of the target's
compute capability is there (with that GPU's preset limits), `cuda.device_array` and
`cuda.to_device` give host arrays the host code takes for device arrays, and a launch records
(kernel, argument types, threads, dynamic shared bytes) instead of running. So the host code
makes every choice itself: the split kernel, its variant, the FP8 conversion (the instruction
only from compute capability 8.9), the tensor-core tiles, the reductions sm_90 has. Each
recorded kernel is then compiled with its own options (`cuda.compile_ptx(kernel.py_func,
types, cc=..., fastmath/launch_bounds as the kernel was built)`).

Checked (a failure makes the exit status 1):
    the host call runs on the stand-in GPU (a LaunchError there is what a user of that GPU
        would get);
    every kernel compiles (NVVM; ptxas when found);
    the types a host declared for it (the shared-memory opt-in, `check_registers`) are the
        types it is launched with (else the opt-in would go to an overload never launched);
    registers x threads fit a block, static + dynamic shared memory fit the GPU's opt-in;
    no `cvt.rn.f16x2.e4m3x2` below sm_89 (the instruction does not exist there).
Reported (not failures): local memory in the PTX (the `__local_depot` bytes and the
ld.local/st.local count: arrays NVVM could not keep in registers), ptxas's spill bytes, and
calls left in the PTX (`call.uni`: device functions not inlined). Not seen: anything that
happens when the kernel runs (results, races, speed): `make bench-gpu` on a GPU.

Needs, beside the course's packages: NVVM and NVRTC, which a GPU machine has and
requirements.txt does not install: `pip install "numba-cuda[cu13]"` (wheels), or a CUDA
toolkit named by CUDA_HOME (e.g. CUDA_HOME=<unpacked wheels>/nvidia/cu13). ptxas is optional
(PATH, CUDA_HOME/bin). Nothing is downloaded. Exit status: 0 all compiled and checked,
1 a kernel or host call failed, 2 no NVVM; --json FILE writes every result.
tests/test_ptx_compile.py runs --quick (36 kernel builds, 40 s on 2 cores) when NVVM is found.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: target name -> (compute capability, `flashcourse.limits.PRESETS` key of a GPU that has it)
TARGETS = {"sm_90": ((9, 0), "H100 SXM"), "sm_89": ((8, 9), "L4"),
           "sm_80": ((8, 0), "A100 80GB")}
DEFAULT_TARGETS = ("sm_90", "sm_80")
FAMILIES = ("paged", "fp8", "variants_fwd", "variants_bwd", "tc_fwd", "tc_bwd", "cc_fwd",
            "cc_bwd", "decode", "hopper")
#: the e4m3 conversion instruction (`flashcourse.cuda.ptx.fp8`), sm_89 and newer only
FP8_CVT = "cvt.rn.f16x2.e4m3x2"
#: the --quick sets a case belongs to
Q90, QALL = ("sm_90",), ("sm_90", "sm_89", "sm_80")


# ---------------------------------------------------------------------------------------
# Reading PTX and ptxas output (plain text: tests/test_ptx_compile.py checks these on text)
# ---------------------------------------------------------------------------------------

_DEPOT = re.compile(r"\.local\s+\.align\s+\d+\s+\.b8\s+__local_depot\d+\[(\d+)\]")


def ptx_facts(ptx: str) -> dict:
    """What the PTX text shows: local-memory depot bytes, ld.local and st.local counts,
    calls (`call.uni`/`call`), mma.sync and cp.async counts, FP8 conversions."""
    return {"local_bytes": sum(int(n) for n in _DEPOT.findall(ptx)),
            "ld_local": len(re.findall(r"\bld\.local\b", ptx)),
            "st_local": len(re.findall(r"\bst\.local\b", ptx)),
            "calls": len(re.findall(r"^\s*call(\.uni)?\b", ptx, re.M)),
            "mma": ptx.count("mma.sync"),
            "fp8_cvt": ptx.count(FP8_CVT)}


def ptxas_facts(text: str) -> dict:
    """Registers, spill bytes, stack frame and static shared bytes from `ptxas -v` output
    (None where the line is absent)."""
    def num(pattern):
        m = re.search(pattern, text)
        return int(m.group(1)) if m else None
    return {"regs": num(r"Used (\d+) registers"),
            "stack": num(r"(\d+) bytes stack frame"),
            "spill_stores": num(r"(\d+) bytes spill stores"),
            "spill_loads": num(r"(\d+) bytes spill loads"),
            "smem": num(r"(\d+) bytes smem") or 0}


def find_ptxas() -> str | None:
    """ptxas from CUDA_HOME/CUDA_PATH, the nvidia wheels, or PATH (None: not found)."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root and (Path(root) / "bin" / "ptxas").is_file():
            return str(Path(root) / "bin" / "ptxas")
    try:
        import nvidia
        for root in nvidia.__path__:
            for cand in sorted(Path(root).glob("*/bin/ptxas")):
                return str(cand)
    except ImportError:
        pass
    return shutil.which("ptxas")


def nvvm_missing() -> str | None:
    """None when NVVM and NVRTC load (what numba-cuda compiles with), else why not."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError as exc:
        return f"cuda-pathfinder is not installed ({exc})"
    import warnings
    for lib in ("nvvm", "nvrtc"):
        try:
            with warnings.catch_warnings():       # "cannot determine the NVRTC version"
                warnings.simplefilter("ignore")
                load_nvidia_dynamic_lib(lib)
        except Exception as exc:                # DynamicLibNotFoundError and kin
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return (f"lib{lib} not found ({first}): pip install 'numba-cuda[cu13]', or set "
                    f"CUDA_HOME to a CUDA toolkit")
    return None


# ---------------------------------------------------------------------------------------
# The stand-in GPU: host code runs, launches are recorded
# ---------------------------------------------------------------------------------------

@dataclass
class Launch:
    """One recorded launch: the kernel (a Numba dispatcher), its argument types, threads
    per block and dynamic shared bytes, and the case that made it."""
    kernel: object
    types: tuple
    threads: int
    shared: int
    case: str


@dataclass
class Record:
    launches: list = field(default_factory=list)
    declared: list = field(default_factory=list)     # (kernel, types, why)
    case: str = ""


def _standin_class():
    import numpy as np

    class StandInArray(np.ndarray):
        """A host array that the host code takes for a device array (it has the CUDA array
        interface and the methods of Numba's device arrays that the host code calls)."""

        @property
        def __cuda_array_interface__(self):
            return {"shape": self.shape, "typestr": self.dtype.str, "version": 3,
                    "data": (self.ctypes.data, False),
                    "strides": None if self.flags.c_contiguous else self.strides}

        def is_c_contiguous(self):
            return bool(self.flags.c_contiguous)

        def copy_to_host(self, ary=None, stream=0):
            out = np.array(self, copy=True).view(np.ndarray)
            if ary is not None:
                ary[...] = out
                return ary
            return out

        def copy_to_device(self, ary, stream=0):
            self[...] = ary

    return StandInArray


def standin(a):
    """`a` copied into a stand-in device array."""
    import numpy as np
    return np.array(a, copy=True, order="C").view(_STANDIN)


_STANDIN = None


def arg_type(a):
    """The Numba type a launch gives argument `a` (as numba-cuda types a device array: its
    dtype, dimensions and layout; scalars by value)."""
    import numpy as np
    from numba import typeof, types
    from numba.np import numpy_support
    if isinstance(a, np.ndarray):
        layout = "C" if a.flags.c_contiguous else ("F" if a.flags.f_contiguous else "A")
        return types.Array(numpy_support.from_dtype(a.dtype), a.ndim, layout)
    return typeof(a)


class _CompiledStub:
    """What `dispatcher.compile(types)` returns on the stand-in GPU: no registers known
    (the real numbers come from ptxas afterwards)."""
    regs_per_thread = 0
    local_mem_per_thread = 0
    shared_mem_per_block = 0


class StandInGPU(contextlib.AbstractContextManager):
    """Inside `with StandInGPU(target) as rec:` the host code sees a GPU of the target's
    compute capability and limits; launches land in rec.launches, declared signatures in
    rec.declared. Set NUMBA_ENABLE_CUDASIM=0 before numba is imported."""

    def __init__(self, target: str):
        self.cc, self.preset = TARGETS[target]
        self.rec = Record()
        self._undo = []

    def _set(self, obj, name, value):
        self._undo.append((obj, name, getattr(obj, name)))
        setattr(obj, name, value)

    def _replace(self, original, replacement):
        """`original` replaced in every flashcourse module that holds it (by import)."""
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("flashcourse") and \
                    getattr(mod, original.__name__, None) is original:
                self._set(mod, original.__name__, replacement)

    def __enter__(self):
        global _STANDIN
        import numpy as np
        from numba import cuda
        import numba.cuda.api as api
        import numba.cuda.dispatcher as disp
        from flashcourse import gpu, limits
        from flashcourse.cuda.common import _launch, host_plans
        if _STANDIN is None:
            _STANDIN = _standin_class()
        lim = limits.PRESETS[self.preset]
        rec = self.rec

        class Device:
            compute_capability = self.cc
            name = f"stand-in for {lim.name} (no GPU)"
            id = 0

        dev = Device()
        for mod in (cuda, api, disp):
            self._set(mod, "get_current_device", lambda: dev)
        self._set(gpu, "driver_has_gpu", lambda: True)
        self._undo.append((limits, "_cached", list(limits._cached)))
        limits._cached[:] = [lim]

        def device_array(shape, dtype=np.float64, strides=None, order="C", stream=0):
            return np.zeros(shape, dtype).view(_STANDIN)

        def device_array_like(a, stream=0):
            return np.zeros(a.shape, a.dtype).view(_STANDIN)

        def to_device(obj, stream=0, copy=True, to=None):
            if to is not None:
                to[...] = obj
                return to
            return standin(obj)

        for name, fn in (("device_array", device_array), ("device_array_like",
                                                           device_array_like),
                         ("to_device", to_device),
                         ("as_cuda_array", lambda a, sync=True: a),
                         ("synchronize", lambda: None)):
            self._set(cuda, name, fn)
        self._set(host_plans.POOL, "empty", lambda shape, dtype: device_array(shape, dtype))

        def getitem(dispatcher, config):
            threads = config[1]
            threads = int(np.prod(threads)) if isinstance(threads, tuple) else int(threads)
            shared = int(config[3]) if len(config) > 3 else 0

            def launch(*args):
                rec.launches.append(Launch(dispatcher, tuple(arg_type(a) for a in args),
                                           threads, shared, rec.case))
            return launch

        def compile_(dispatcher, sig):
            rec.declared.append((dispatcher, tuple(sig), "compile", rec.case))
            return _CompiledStub()

        self._set(disp.CUDADispatcher, "__getitem__", getitem)
        self._set(disp.CUDADispatcher, "compile", compile_)
        self._set(disp.CUDADispatcher, "typeof_pyval", lambda d, v: arg_type(v))

        def opt_in(dispatcher, signature, nbytes):
            if int(nbytes) > 48 * 1024:
                rec.declared.append((dispatcher, tuple(signature), "shared-memory opt-in",
                                     rec.case))

        is_device = _launch.is_device_array

        def is_device_array(x):
            return isinstance(x, _STANDIN) or is_device(x)

        self._replace(_launch.set_max_dynamic_shared_bytes, opt_in)
        self._replace(is_device, is_device_array)
        return rec

    def __exit__(self, *exc):
        for obj, name, value in reversed(self._undo):
            if name == "_cached":
                obj._cached[:] = value
            else:
                setattr(obj, name, value)
        return False


# ---------------------------------------------------------------------------------------
# The cases: calls a user makes, with small inputs (the shapes only choose the variant)
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    family: str
    name: str
    call: object            # call(target) -> None; runs host code on the stand-in GPU
    quick: tuple = ()       # the targets whose --quick set (the test's) holds it
    targets: tuple = tuple(TARGETS)     # where the call is valid (else the host refuses it)


def _rng():
    import numpy as np
    return np.random.default_rng(0)


def _paged_arrays(b, hq, hkv, tq, d, ps, width, dtype, device=False):
    """q (B, Hq, Tq, d), pools of B*width pages, a table using them all, ragged lengths."""
    import numpy as np
    rng = _rng()
    n = b * width
    q = rng.standard_normal((b, hq, tq, d)).astype(dtype)
    kp = rng.standard_normal((n, hkv, ps, d)).astype(dtype)
    vp = rng.standard_normal((n, hkv, ps, d)).astype(dtype)
    bt = rng.permutation(n).astype(np.int32).reshape(b, width)
    lens = np.array([width * ps - 3 - i for i in range(b)], np.int32)
    out = (q, kp, vp, bt, lens)
    return tuple(standin(x) for x in out) if device else out


def _paged_case(dtype, hq, hkv, tq, d, ps, device=False, **options):
    def call(target):
        from flashcourse import cuda as fc
        fc.paged_decode(*_paged_arrays(2, hq, hkv, tq, d, ps, 3, dtype, device),
                        causal=True, **options)
    return call


def _append_case(dtype, ps):
    def call(target):
        import numpy as np
        from flashcourse.cuda.decoding import paged
        q, kp, vp, bt, lens = _paged_arrays(2, 4, 2, 1, 64, ps, 3, dtype, device=True)
        lens = standin(np.array([3, ps + 1], np.int32))
        new = standin(_rng().standard_normal((2, 2, 3, 64)).astype(dtype))
        paged.append(kp, vp, bt, lens, new, new)
    return call


def paged_cases() -> list:
    import numpy as np
    from flashcourse import paged_cache as pc
    f16, f32 = np.float16, np.float32
    cases = []
    for ps in pc.PAGE_SIZES:                 # every page size: the CUDA-core and TC kernels
        cases.append(Case("paged", f"fp16 cuda_cores G=1 d=128 page={ps}",
                          _paged_case(f16, 4, 4, 1, 128, ps), quick=Q90 if ps == 16 else ()))
        cases.append(Case("paged", f"fp16 tensor_core G=4 d=128 page={ps}",
                          _paged_case(f16, 8, 2, 1, 128, ps), quick=QALL if ps == 64 else ()))
        cases.append(Case("paged", f"append fp16 page={ps}", _append_case(f16, ps),
                          quick=Q90 if ps == 16 else ()))
    for tag, dtype, hq, hkv, tq, d, extra in (
            ("fp32 G=1", f32, 4, 4, 1, 128, {}),
            ("fp32 G=4 Tq=2 (8 rows: row groups)", f32, 8, 2, 2, 128, {}),
            ("fp16 G=8 cuda_cores (row groups)", f16, 16, 2, 1, 128,
             {"kernel": "cuda_cores"}),
            ("fp16 G=4 cuda_cores", f16, 8, 2, 1, 128, {"kernel": "cuda_cores"}),
            ("fp16 d=72 (no vector loads)", f16, 4, 4, 1, 72, {}),
            ("fp32 d=72 (no vector loads)", f32, 4, 4, 1, 72, {}),
            ("fp16 d=8 (one lane per key)", f16, 4, 4, 1, 8, {}),
            ("fp32 d=300 (two loads per lane, element loads)", f32, 4, 4, 1, 300, {}),
            ("fp16 d=512 G=4 (two vector loads per lane)", f16, 8, 2, 1, 512, {}),
            ("fp16 cuda_cores unroll=1 warps=2 G=4 Tq=3 (12 rows)", f16, 8, 2, 3, 128,
             {"kernel": "cuda_cores", "unroll": 1, "warps": 2, "row_groups": 2}),
            ("fp16 tensor_core m_tiles=2 tc_warps=2 G=4", f16, 8, 2, 1, 128,
             {"kernel": "tensor_core", "m_tiles": 2, "tc_warps": 2}),
            ("fp16 d=64 tensor_core G=8 Tq=4 (32 rows, m_tiles 2)", f16, 16, 2, 4, 64, {}),
            ("fp16 d=256 tensor_core (fewer warps)", f16, 8, 2, 1, 256, {}),
            ("fp16 d=128 tensor_core, device arrays", f16, 8, 2, 1, 128,
             {"device": True}),
            ("fp16 d=128 tc_block_k=32", f16, 8, 2, 1, 128,
             {"kernel": "tensor_core", "tc_block_k": 32})):
        device = extra.pop("device", False)
        cases.append(Case("paged", tag + " page=64",
                          _paged_case(dtype, hq, hkv, tq, d, 64, device, **extra)))
    cases.append(Case("paged", "append fp32 page=64", _append_case(f32, 64)))
    return cases


def _fp8_decode_case(qdtype, d, scale_block, hw_cvt, hq=4, hkv=2, tq=1):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        from flashcourse.fp8 import kv as fkv
        rng = _rng()
        b, tk = 2, 100
        q = rng.standard_normal((b, hq, tq, d)).astype(qdtype)
        k, v = (rng.standard_normal((b, hkv, tk, d)) for _ in range(2))
        k8, ks = fkv.quantize_cache(k, scale_block)
        v8, vs = fkv.quantize_cache(v, scale_block)
        fc.decode(q, k8, v8, k_scale=ks.astype(np.float32), v_scale=vs.astype(np.float32),
                  scale_block=scale_block, hw_cvt=hw_cvt, causal=True)
    return call


def _fp8_paged_case(qdtype, d, ps, scale_block, hw_cvt, device=False):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        from flashcourse.cuda.decoding import fp8_kv
        q, kp, vp, bt, lens = _paged_arrays(2, 4, 2, 1, d, ps, 3, qdtype)
        n = kp.shape[0]
        shape = (2, 2) if scale_block is None else (n, 2, ps // scale_block)
        k8 = np.full(kp.shape, 0x38, np.uint8)               # the code of 1.0
        sc = np.full(shape, 0.5, np.float32)
        args = (q, k8, k8.copy(), bt, lens)
        if device:
            args = tuple(standin(x) for x in args)
            sc = standin(sc)
            fp8_kv.paged_decode_fp8(*args, sc, sc, scale_block=scale_block, hw_cvt=hw_cvt)
        else:
            fc.paged_decode(*args, k_scale=sc, v_scale=sc, scale_block=scale_block,
                            hw_cvt=hw_cvt, causal=True)
    return call


def _fp8_append_case(new_dtype, ps, scale_block):
    def call(target):
        import numpy as np
        from flashcourse.cuda.decoding import fp8_kv
        n, hkv, d = 6, 2, 64
        kp = standin(np.zeros((n, hkv, ps, d), np.uint8))
        shape = (2, hkv) if scale_block is None else (n, hkv, ps // scale_block)
        sc = standin(np.ones(shape, np.float32))
        bt = standin(np.arange(n, dtype=np.int32).reshape(2, 3))
        lens = standin(np.array([3, ps + 1], np.int32))
        new = standin(_rng().standard_normal((2, hkv, 5, d)).astype(new_dtype))
        fp8_kv.append_fp8(kp, kp, sc, sc, bt, lens, new, new, scale_block=scale_block)
    return call


def fp8_cases() -> list:
    import numpy as np
    f16, f32 = np.float16, np.float32
    cases = []
    for sb in (None, 16):
        for hw in (None, False):             # None: the host's choice (the instruction on 8.9+)
            tag = f"scales {'per (B, Hkv)' if sb is None else f'per {sb} tokens'}, " \
                  f"hw_cvt={hw}"
            cases.append(Case("fp8", f"decode q fp16 d=128 {tag}",
                              _fp8_decode_case(f16, 128, sb, hw),
                              quick=Q90 if (sb, hw) == (None, None) else ()))
            cases.append(Case("fp8", f"paged page=64 q fp16 d=128 {tag}",
                              _fp8_paged_case(f16, 128, 64, sb, hw),
                              quick=QALL if (sb, hw) == (16, None) else ()))
        cases.append(Case("fp8", f"decode q fp32 d=72 (element loads) scale_block={sb}",
                          _fp8_decode_case(f32, 72, sb, None)))
        cases.append(Case("fp8", f"decode q fp32 d=512 G=4 Tq=2 (two loads per lane) "
                                 f"scale_block={sb}",
                          _fp8_decode_case(f32, 512, sb, None, hq=8, hkv=2, tq=2)))
        cases.append(Case("fp8", f"paged page=32 q fp16 d=72 (element loads) "
                                 f"scale_block={sb}", _fp8_paged_case(f16, 72, 32, sb, None)))
        cases.append(Case("fp8", f"decode q fp16 d=128 G=8 (row groups) scale_block={sb}",
                          _fp8_decode_case(f16, 128, sb, None, hq=16, hkv=2),
                          quick=Q90 if sb == 16 else ()))
        cases.append(Case("fp8", f"paged page=16 q fp32 d=128 scale_block={sb}, device "
                                 f"arrays", _fp8_paged_case(f32, 128, 16, sb, None, True)))
        for dt in (f16, f32):
            cases.append(Case("fp8", f"append new {np.dtype(dt).name} page=32 "
                                     f"scale_block={sb}", _fp8_append_case(dt, 32, sb),
                              quick=Q90 if dt is f16 and sb == 16 else ()))
    cases.append(Case("fp8", "decode q fp16 d=128 hw_cvt=True (forced; sm_89 and newer)",
                      _fp8_decode_case(f16, 128, None, True), targets=("sm_90", "sm_89")))
    cases.append(Case("fp8", "paged page=256 q fp16 scale_block=64",
                      _fp8_paged_case(f16, 128, 256, 64, None)))
    for d, scheme, causal in ((128, "block", False), (128, "head", True), (64, "block", True),
                              (80, "tensor", False)):
        cases.append(Case("fp8", f"hopper forward (wgmma e4m3) d={d} scheme={scheme} "
                                 f"causal={causal}", _fp8_forward_case(d, scheme, causal),
                          quick=Q90 if (d, causal) == (128, False) else (),
                          targets=("sm_90",)))
        cases.append(Case("fp8", f"hopper forward from fp16 device arrays d={d} "
                                 f"hadamard={causal}", _fp8_device_float_case(d, causal, causal),
                          targets=("sm_90",)))
        cases.append(Case("fp8", f"hopper quantize on the device d={d} scheme={scheme} "
                                 f"hadamard={causal}",
                          _fp8_quantize_case(d, "float16" if causal else "float32", causal,
                                             "block" if scheme == "block" else "head"),
                          quick=Q90 if (d, causal) == (128, True) else ()))
        cases.append(Case("fp8", f"hopper forward overlap (wgmma e4m3) d={d} scheme={scheme} "
                                 f"causal={causal} wg=2",
                          _fp8_forward_case(d, scheme, causal, pipeline="overlap",
                                            warpgroups=2), targets=("sm_90",)))
        cases.append(Case("fp8", f"hopper forward serial (wgmma e4m3) d={d} scheme={scheme} "
                                 f"causal={causal}",
                          _fp8_forward_case(d, scheme, causal, pipeline="serial"),
                          targets=("sm_90",)))
    return cases


def _fp8_quantize_case(d, dtype, hadamard, scheme="block"):
    def call(target):
        from numba import cuda
        from flashcourse.cuda.hopper import fp8
        x = cuda.to_device(_rng().standard_normal((2, 100, d)).astype(dtype))
        fp8.quantize_device(x, scheme=scheme, block=64, hadamard=hadamard)
    return call


def _fp8_device_float_case(d, hadamard, causal):
    def call(target):
        from numba import cuda
        from flashcourse import cuda as fc
        q, k, v = (cuda.to_device(_rng().standard_normal((2, t, d)).astype("float16"))
                   for t in (150, 300, 300))
        fc.forward(q, k, v, kernel="hopper", precision="fp8", hadamard=hadamard,
                   causal=causal)
    return call


def _fp8_forward_case(d, scheme, causal, tq=200, tk=300, **tiles):
    def call(target):
        from flashcourse.cuda.hopper import fp8
        rng = _rng()
        q, k, v = (rng.standard_normal((2, t, d)).astype("float32") for t in (tq, tk, tk))
        fp8.forward(*fp8.quantize(q, k, v, scheme=scheme, block=128), causal=causal,
                    **tiles)
    return call


def _variant_masks(tq, tk):
    """name -> mask_mod of every built-in mask (and one combination) for (Tq, Tk)."""
    import numpy as np
    from flashcourse.variants import library as lib
    from flashcourse.variants.mods import and_masks, or_masks
    cu = np.array([0, tq // 3, tq])
    return {"none": None,
            "causal": lib.causal(tq, tk),
            "causal top-left": lib.causal(align="top-left"),
            "sliding_window": lib.sliding_window(24, tq, tk),
            "sliding_window symmetric": lib.sliding_window(24, tq, tk, symmetric=True),
            "document": lib.document(cu, np.array([0, tk // 3, tk])),
            "prefix_lm": lib.prefix_lm(10, tq, tk),
            "random_block_sparse": lib.random_block_sparse(tq, tk, 32, 32, density=0.5),
            "causal & document": and_masks(lib.causal(tq, tk),
                                           lib.document(cu, np.array([0, tk // 3, tk]))),
            "prefix_lm | sliding_window": or_masks(lib.prefix_lm(10, tq, tk),
                                                   lib.sliding_window(24, tq, tk)),
            "learner (per head, B x H block mask)": _learner_mask}


def _learner_mask(b, h, q_idx, kv_idx):
    """A mask a learner might write: causal, every other key, head 0 sees everything."""
    return ((kv_idx <= q_idx) & ((q_idx - kv_idx) % 2 == 0)) | (h == 0)


def _learner_score(score, b, h, q_idx, kv_idx):
    """A score_mod a learner might write: a distance penalty with abs (float64 constant)."""
    return score - 0.1 * abs(q_idx - kv_idx)


def _learner_grad(score, b, h, q_idx, kv_idx):
    return 1.0 + 0.0 * score


def _variant_scores(hq):
    from flashcourse.variants import library as lib
    from flashcourse.variants.mods import with_grad
    return {"none": None, "alibi": lib.alibi(lib.alibi_slopes(hq)),
            "softcap": lib.softcap(20.0),
            "learner": with_grad(_learner_score, _learner_grad)}


def _variants_inputs(dtype, hq, hkv, tq, tk, d, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((2, hq, tq, d)).astype(dtype)
    k, v = (rng.standard_normal((2, hkv, tk, d)).astype(dtype) for _ in range(2))
    return q, k, v


def _variants_case(direction, mask, score, *, precision="fp16", d=64, block=(64, 64),
                   sinks=False, gqa=True, device=False):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        from flashcourse.variants.block_mask import create_block_mask
        tq, tk, hq = 100, 120, 4
        hkv = 2 if gqa else hq
        mm = _variant_masks(tq, tk)[mask]
        per_head = mask.startswith("learner")
        bm = None if mm is None else create_block_mask(
            mm, 2 if per_head else None, hq if per_head else None, tq, tk, *block)
        sm = _variant_scores(hq)[score]
        dtype = np.float16 if precision == "fp16" else np.float32
        q, k, v = _variants_inputs(dtype, hq, hkv, tq, tk, d)
        opts = dict(block_mask=bm, score_mod=sm, precision=precision,
                    sinks=np.linspace(-1, 1, hq) if sinks else None)
        if bm is None:
            opts.update(block_q=block[0], block_k=block[1])
        if direction == "forward":
            fc.variants_forward(q, k, v, kernel="tensor_core", **opts)
            return
        o = np.zeros_like(q)
        lse = np.zeros(q.shape[:3], np.float32)
        do = _variants_inputs(dtype, hq, hkv, tq, tk, d, seed=1)[0]
        if device:                            # fp16, or bf16 as uint16 bit patterns
            if precision == "bf16":
                q, k, v, o, do = (_bf16_bits(a) for a in (q, k, v, o, do))
            q, k, v, o, lse, do = (standin(a) for a in (q, k, v, o, lse, do))
            opts.pop("precision")
            if sinks:
                opts["sinks"] = np.linspace(-1, 1, hq)
        fc.variants_backward(q, k, v, o, lse, do, kernel="tensor_core", **opts)
    return call


def _bf16_bits(a):
    """float32 values as bf16 bit patterns (uint16), rounded to nearest even first."""
    import numpy as np
    from flashcourse.cuda.ptx.mma import round_bf16
    return (np.asarray(round_bf16(a), np.float32).view(np.uint32) >> 16).astype(np.uint16)


def variants_cases(direction: str) -> list:
    fam = "variants_fwd" if direction == "forward" else "variants_bwd"
    cases = []
    for mask in _variant_masks(100, 120):
        cases.append(Case(fam, f"fp16 d=64 mask={mask} score=none",
                          _variants_case(direction, mask, "none"),
                          quick=Q90 if mask == "document" else ()))
    for score in ("alibi", "softcap", "learner"):
        cases.append(Case(fam, f"fp16 d=64 mask=causal score={score}",
                          _variants_case(direction, "causal", score),
                          quick=Q90 if score == "softcap" and direction == "forward" else ()))
    cases += [
        Case(fam, "bf16 d=64 mask=sliding_window score=alibi sinks",
             _variants_case(direction, "sliding_window", "alibi", precision="bf16",
                            sinks=True), quick=QALL if direction == "backward" else Q90),
        Case(fam, "fp16 d=128 mask=causal score=none 128x128 tiles, no GQA",
             _variants_case(direction, "causal", "none", d=128, block=(128, 128),
                            gqa=False)),
        Case(fam, "bf16 d=80 mask=prefix_lm score=softcap sinks",
             _variants_case(direction, "prefix_lm", "softcap", precision="bf16", d=80,
                            sinks=True))]
    if direction == "forward":
        cases.append(Case(fam, "fp16 d=64 mask=causal 256x64 tiles (m_tiles 2)",
                          _variants_case(direction, "causal", "none", block=(256, 64))))
    else:
        cases += [Case(fam, f"{p} d=64 mask=causal score=softcap sinks, device arrays",
                       _variants_case(direction, "causal", "softcap", precision=p,
                                      sinks=True, device=True), quick=Q90 if p == "bf16" else ())
                  for p in ("fp16", "bf16")]
    return cases


def _dense_arrays(dtype, tq, tk, d, bh=2, seed=0, bits=False):
    """Stand-in device arrays q (BH, Tq, d), k, v (BH, Tk, d), o, do, lse (BH, Tq) for the
    dense kernels; `bits`: float32 values as bf16 bit patterns (uint16)."""
    import numpy as np
    rng = np.random.default_rng(seed)
    q, o, do = (rng.standard_normal((bh, tq, d)).astype(np.float32) for _ in range(3))
    k, v = (rng.standard_normal((bh, tk, d)).astype(np.float32) for _ in range(2))
    conv = _bf16_bits if bits else (lambda a: a.astype(dtype))
    q, k, v, o, do = (conv(a) for a in (q, k, v, o, do))
    lse = np.zeros((bh, tq), np.float32)
    return tuple(standin(a) for a in (q, k, v, o, lse, do))


def _tc_forward_case(precision, d, causal, **options):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        dtype = np.float16 if precision == "fp16" else np.float32
        q, k, v, *_ = _dense_arrays(dtype, 100, 120, d, bits=precision == "bf16")
        fc.forward(q, k, v, kernel="tensor_core", causal=causal, precision=precision,
                   **options)
    return call


def _tc_backward_case(precision, d, causal, small_terms=None, **options):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        from flashcourse.cuda.gradients import tc_backward as tcb
        from flashcourse.cuda.gradients import tc_backward_kernels_tf32 as t32
        dtype = np.float16 if precision == "fp16" else np.float32
        keep = t32.SMALL_TERMS
        try:
            if small_terms is not None:     # read when a kernel is made: clear the cache
                t32.SMALL_TERMS = small_terms
                tcb.kernels.cache_clear()
            fc.backward(*_dense_arrays(dtype, 100, 120, d), kernel="tensor_core",
                        causal=causal, precision=precision, **options)
        finally:
            if small_terms is not None:
                t32.SMALL_TERMS = keep
                tcb.kernels.cache_clear()
    return call


def _cc_forward_case(kernel, d, causal):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        q, k, v, *_ = _dense_arrays(np.float32, 100, 120, d)
        fc.forward(q, k, v, kernel=kernel, causal=causal)
    return call


def _cc_backward_case(kernel, d, causal):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        fc.backward(*_dense_arrays(np.float32, 100, 120, d), kernel=kernel, causal=causal)
    return call


def _decode_case(kernel, hq, hkv, tq, d, **options):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        rng = _rng()
        q = standin(rng.standard_normal((2, hq, tq, d)).astype(np.float16))
        k, v = (standin(rng.standard_normal((2, hkv, 300, d)).astype(np.float16))
                for _ in range(2))
        fc.decode(q, k, v, kernel=kernel, causal=True, **options)
    return call


def _hopper_forward_case(precision, d, causal, **options):
    def call(target):
        import numpy as np
        from flashcourse import cuda as fc
        dtype = np.float16 if precision == "fp16" else np.uint16
        q, k, v, *_ = _dense_arrays(dtype, 200, 300, d, bits=precision == "bf16")
        fc.forward(q, k, v, kernel="hopper", causal=causal, **options)
    return call


def dense_cases() -> list:
    """The dense attention kernels: the tensor-core forward in every precision and version,
    the tensor-core backward (every version, both 3xTF32 small-term orders), the CUDA-core
    backward kernels, and decoding's split kernels (CUDA cores and tensor cores)."""
    cases = []
    for p in ("fp16", "bf16"):
        for pipe in ("plain", "async"):
            for d in (64, 128):
                for causal in (False, True):
                    cases.append(Case("tc_fwd", f"{p} {pipe} d={d} causal={causal}",
                                      _tc_forward_case(p, d, causal, pipeline=pipe),
                                      quick=Q90 if (p, pipe, d, causal) ==
                                      ("fp16", "async", 64, True) else ()))
        cases.append(Case("tc_fwd", f"{p} async d=64 causal lazy_rescale",
                          _tc_forward_case(p, 64, True, pipeline="async", lazy_rescale=True)))
        cases.append(Case("tc_fwd", f"{p} plain d=64 causal m_tiles=2",
                          _tc_forward_case(p, 64, True, pipeline="plain", m_tiles=2)))
    for p in ("fp16", "bf16"):          # the Hopper (wgmma) forward: sm_90 only
        for pipe in ("serial", "overlap"):
            for d in (64, 128):
                cases.append(Case("hopper", f"{p} {pipe} d={d} causal",
                                  _hopper_forward_case(p, d, True, pipeline=pipe),
                                  quick=Q90 if (p, pipe, d) == ("fp16", "overlap", 128)
                                  else (), targets=("sm_90",)))
    for pipe in ("specialised", "producer", "pingpong"):   # versions 3-5: one each
        cases.append(Case("hopper", f"fp16 {pipe} d=128 causal",
                          _hopper_forward_case("fp16", 128, True, pipeline=pipe),
                          targets=("sm_90",)))
    for p in ("fp16", "bf16"):          # the Hopper (wgmma) backward: sm_90 only
        for wg in (1, 2):
            for d in (64, 128):
                cases.append(Case("hopper", f"backward {p} wgmma warpgroups={wg} d={d} causal",
                                  _tc_backward_case(p, d, True, pipeline="wgmma",
                                                    warpgroups=wg),
                                  quick=Q90 if (p, wg, d) == ("fp16", 2, 128) else (),
                                  targets=("sm_90",)))
    for p in ("3xtf32", "tf32"):
        for pipe in ("plain", "async", "planes"):
            for d in (64, 128):
                cases.append(Case("tc_fwd", f"{p} {pipe} d={d} causal",
                                  _tc_forward_case(p, d, True, pipeline=pipe)))
    for p in ("fp16", "bf16"):
        for pipe in ("plain", "async"):
            for det in (False, True):
                for d in (64, 128):
                    cases.append(Case("tc_bwd", f"{p} {pipe} deterministic={det} d={d} causal",
                                      _tc_backward_case(p, d, True, pipeline=pipe,
                                                        deterministic=det),
                                      quick=Q90 if (p, pipe, det, d) ==
                                      ("fp16", "async", False, 64) else ()))
        cases.append(Case("tc_bwd", f"{p} async d=64 not causal",
                          _tc_backward_case(p, 64, False, pipeline="async")))
    for how in ("one_chain", "apart"):
        for pipe, det in (("async", False), ("planes", False), ("async", True)):
            for d in (64, 128):
                cases.append(Case("tc_bwd", f"3xtf32 {pipe} deterministic={det} d={d} "
                                            f"causal {how}",
                                  _tc_backward_case("3xtf32", d, True, how, pipeline=pipe,
                                                    deterministic=det)))
    for fam, kerns, case in (("cc_fwd", ("flash", "dense", "textbook"), _cc_forward_case),
                             ("cc_bwd", ("simple", "fast", "fast_two_pass"), _cc_backward_case)):
        for kern in kerns:                  # the CUDA-core forwards and backward
            for d in (64, 128):
                for causal in (False, True):
                    cases.append(Case(fam, f"{kern} d={d} causal={causal}",
                                      case(kern, d, causal),
                                      quick=Q90 if (kern, d, causal) in (("flash", 64, True),
                                                                         ("fast", 64, True))
                                      else ()))
    for kern in ("cuda_cores", "tensor_core"):
        for hq, hkv, tq, d in ((8, 2, 1, 128), (16, 2, 4, 64), (4, 4, 1, 128)):
            cases.append(Case("decode", f"{kern} Hq={hq} Hkv={hkv} Tq={tq} d={d}",
                              _decode_case(kern, hq, hkv, tq, d),
                              quick=Q90 if (kern, hq) == ("tensor_core", 8) else ()))
    return cases


def all_cases() -> list:
    return (paged_cases() + fp8_cases() + variants_cases("forward")
            + variants_cases("backward") + dense_cases())


# ---------------------------------------------------------------------------------------
# Compiling what the cases launched
# ---------------------------------------------------------------------------------------

@dataclass
class Result:
    kernel: str
    target: str
    family: str
    cases: list
    ok: bool = True
    errors: list = field(default_factory=list)
    ptx: dict = field(default_factory=dict)
    ptxas: dict = field(default_factory=dict)
    threads: int = 0
    shared: int = 0
    seconds: float = 0.0
    types: str = ""
    dispatcher: object = field(default=None, repr=False)   # the kernel compiled
    arg_types: tuple = field(default=(), repr=False)


_OPTIONS = ("debug", "lineinfo", "fastmath", "opt", "launch_bounds")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    wanted = [ln for ln in lines if "No implementation" in ln or "Error" in ln
              or "error" in ln]
    return f"{type(exc).__name__}: " + " | ".join((wanted or lines or [""])[:3])[:600]


def compile_one(kernel, types_, target: str, ptxas: str | None, out: Path | None,
                stem: str | None = None) -> tuple:
    """(ptx facts, ptxas facts, errors) of one kernel compiled for the target; with `out`,
    its PTX is kept as out/<stem>.ptx (default <target>_<kernel name>)."""
    from numba.cuda import compile_ptx
    cc = TARGETS[target][0]
    opts = {k: v for k, v in getattr(kernel, "targetoptions", {}).items()
            if k in _OPTIONS and v is not None}
    errors = []
    try:
        ptx, _ = compile_ptx(kernel.py_func, types_, cc=cc, **opts)
    except Exception as exc:                    # Numba typing/lowering, NVVM
        return {}, {}, [f"NVVM: {_first_line(exc)}"]
    facts = ptx_facts(ptx)
    name = kernel.py_func.__name__
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{stem or f'{target}_{name}'}.ptx").write_text(ptx)
    if facts["fp8_cvt"] and cc < (8, 9):
        errors.append(f"{FP8_CVT} in PTX for {target}: the host chose the conversion "
                      f"instruction below sm_89")
    asm = {}
    arch = target
    if cc == (9, 0) and "wgmma." in ptx:
        # Hopper's warpgroup instructions exist only on the arch-specific target, which a
        # GPU build gets (numba-cuda adds the "a" on a 9.0 device); compile_ptx does not
        arch = "sm_90a"
        ptx = re.sub(r"^\.target sm_90\b", ".target sm_90a", ptx, count=1, flags=re.M)
    if ptxas:
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "k.ptx"
            src.write_text(ptx)
            r = subprocess.run([ptxas, f"-arch={arch}", "-v", str(src), "-o",
                                str(Path(tmp) / "k.cubin")], capture_output=True, text=True)
        text = r.stdout + r.stderr
        if r.returncode:
            errs = [ln for ln in text.splitlines() if "error" in ln.lower()]
            errors.append("ptxas: " + " | ".join(errs[:3] or text.splitlines()[-3:]))
        else:
            asm = ptxas_facts(text)
    return facts, asm, errors


def check_limits(res: Result, limits) -> None:
    """Registers x threads and static + dynamic shared memory against the target's limits."""
    regs = res.ptxas.get("regs")
    if regs and regs * res.threads > limits.max_regs_per_block:
        res.errors.append(f"{regs} registers x {res.threads} threads exceed the "
                          f"{limits.max_regs_per_block:,} registers of a block")
    smem = res.ptxas.get("smem", 0) + res.shared
    if smem > limits.smem_per_block_optin:
        res.errors.append(f"{smem:,} B of shared memory exceed the opt-in limit of "
                          f"{limits.smem_per_block_optin:,} B")


def run_target(target: str, families, quick: bool, out: Path | None, use_ptxas: bool,
               log=print, match: str | None = None) -> list:
    """Run the cases of `families` on a stand-in GPU of `target`, compile every kernel they
    launched, and return one Result per (kernel, types). Call in a process with
    NUMBA_ENABLE_CUDASIM=0 (a fresh one per target: kernels are cached per process)."""
    from flashcourse import limits as lim_mod
    limits = lim_mod.PRESETS[TARGETS[target][1]]
    ptxas = find_ptxas() if use_ptxas else None
    results = {}
    order = []
    declared = 0                 # types declared ahead of a launch (opt-in, check_registers)
    for case in all_cases():
        if case.family not in families or (quick and target not in case.quick) or \
                target not in case.targets or \
                (match and not re.search(match, case.name)):
            continue
        with StandInGPU(target) as rec:
            rec.case = case.name
            try:
                case.call(target)
            except Exception as exc:
                res = Result(f"(host code of {case.name})", target, case.family,
                             [case.name], ok=False, errors=[f"host: {_first_line(exc)}"])
                results[("host", case.name)] = res
                order.append(("host", case.name))
                continue
        for la in rec.launches:
            key = (id(la.kernel), la.types)
            if key not in results:
                results[key] = Result(la.kernel.py_func.__name__, target, case.family, [],
                                      threads=la.threads, shared=la.shared,
                                      types=type_tag(la.types), dispatcher=la.kernel,
                                      arg_types=la.types)
                order.append(key)
            res = results[key]
            res.shared = max(res.shared, la.shared)
            if case.name not in res.cases:
                res.cases.append(case.name)
        launched = {(id(la.kernel), la.types) for la in rec.launches}
        for kern, sig, why, cname in rec.declared:
            declared += 1
            if (id(kern), sig) not in launched:
                res = next((results[k] for k in order if k[0] == id(kern)), None)
                msg = (f"{why} declared types ({type_tag(sig)}) that no launch uses "
                       f"(launched: " + "; ".join(type_tag(la.types) for la in rec.launches
                                                  if la.kernel is kern) + ")")
                if res is None:
                    res = Result(kern.py_func.__name__, target, case.family, [cname])
                    results[("declared", id(kern))] = res
                    order.append(("declared", id(kern)))
                res.errors.append(msg)
    with StandInGPU(target):                  # numba-cuda asks for the device too
        for i, key in enumerate(order):
            res = results[key]
            if res.dispatcher is not None:
                t0 = time.perf_counter()
                res.ptx, res.ptxas, errs = compile_one(res.dispatcher, res.arg_types, target,
                                                       ptxas, out,
                                                       f"{target}_{i:03d}_{res.kernel}")
                res.seconds = time.perf_counter() - t0
                res.errors += errs
                check_limits(res, limits)
            res.ok = not res.errors
            log(_line(res))
    log(f"[{target}] {declared} types declared ahead of a launch (shared-memory opt-in, "
        f"register check) compared with the launches' types"
        + ("" if ptxas else "; PTX only (no ptxas found, or --no-ptxas)"))
    return [results[k] for k in order]


def type_tag(types_) -> str:
    """The argument types in short: each array's dtype and dimensions, scalars by type."""
    from numba import types
    return ",".join(f"{t.dtype}[{t.ndim}]" if isinstance(t, types.Array) else str(t)
                    for t in types_)


def _line(res: Result) -> str:
    if not res.ok:
        return f"[{res.target}] FAIL {res.kernel}: " + "; ".join(res.errors) + \
            f"  (case: {res.cases[0] if res.cases else '?'})"
    p, a = res.ptx, res.ptxas
    local = (f" local {p['local_bytes']} B ({p['ld_local']} ld, {p['st_local']} st)"
             if p.get("local_bytes") else "")
    regs = (f" {a['regs']} regs, spills {a['spill_stores']}/{a['spill_loads']} B"
            if a else "")
    calls = f" {p['calls']} calls" if p.get("calls") else ""
    cvt = f" {p['fp8_cvt']} cvt.e4m3x2" if p.get("fp8_cvt") else ""
    return (f"[{res.target}] ok   {res.kernel} ({_short(res.types)}): {res.threads} thr"
            f"{regs}{local}{calls}{cvt}  {res.seconds:.1f}s")


def _short(tag: str) -> str:
    """The distinct array dtypes of a type tag, in order (enough to tell overloads apart)."""
    seen = []
    for part in tag.split(","):
        if "[" in part and part not in seen:
            seen.append(part)
    return " ".join(seen)


def as_json(results) -> list:
    return [{"kernel": r.kernel, "target": r.target, "family": r.family, "ok": r.ok,
             "errors": r.errors, "cases": r.cases, "threads": r.threads,
             "dynamic_shared": r.shared, "types": r.types, "ptx": r.ptx, "ptxas": r.ptxas,
             "seconds": round(r.seconds, 2)} for r in results]


# ---------------------------------------------------------------------------------------
# Two copies' PTX side by side (--compare): what a refactor changed in the compiled code
# ---------------------------------------------------------------------------------------

_MANGLED = re.compile(r"_ZN\w+")
_OPCODE = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.]*)", re.M)


_NUMBA_ENV = re.compile(r"^\.common \.global .*NumbaEnv")
_SMEM = re.compile(r"_cudapy_smem_\d+")
_REG = re.compile(r"%(rd|rs|r|fd|f|p|hh|h)(\d+)\b")
_LABEL = re.compile(r"\$L__BB\d+_\d+")


def normalised_ptx(ptx: str) -> str:
    """The PTX without what a refactor changes while the code stays the same: comments,
    blank lines, the (module-path) mangled names, Numba's per-function environment
    globals (one per device function, inlined or not), the shared arrays' serial numbers,
    and the register and label numbers (renumbered in order of first use)."""
    regs: dict = {}
    labels: dict = {}
    lines = []
    for ln in ptx.splitlines():
        ln = ln.split("//", 1)[0].rstrip()
        if not ln.strip() or _NUMBA_ENV.match(ln):
            continue
        ln = _SMEM.sub("_cudapy_smem", _MANGLED.sub("NAME", ln))
        ln = _REG.sub(lambda m: regs.setdefault(m.group(0), f"%{m.group(1)}#{len(regs)}"), ln)
        ln = _LABEL.sub(lambda m: labels.setdefault(m.group(0), f"L#{len(labels)}"), ln)
        lines.append(ln)
    return "\n".join(lines)


def opcode_counts(ptx: str) -> dict:
    """{instruction: count} of a PTX text (directives excluded)."""
    out: dict = {}
    for op in _OPCODE.findall(normalised_ptx(ptx)):
        out[op] = out.get(op, 0) + 1
    return out


def compare_dirs(a: Path, b: Path, log=print) -> int:
    """Set the PTX files of two --out folders side by side, file by file (the same cases
    give the same file names): 'same' when the normalised texts agree, else the
    instructions whose counts differ. Exit status 0 when every file is the same."""
    names_a = {p.name for p in a.glob("*.ptx")}
    names_b = {p.name for p in b.glob("*.ptx")}
    differ = 0
    for name in sorted(names_a | names_b):
        if name not in names_a or name not in names_b:
            log(f"only in {a if name in names_a else b}: {name}")
            differ += 1
            continue
        ta, tb = ((d / name).read_text() for d in (a, b))
        if normalised_ptx(ta) == normalised_ptx(tb):
            log(f"same      {name}")
            continue
        differ += 1
        ca, cb = opcode_counts(ta), opcode_counts(tb)
        delta = {op: cb.get(op, 0) - ca.get(op, 0) for op in set(ca) | set(cb)
                 if cb.get(op, 0) != ca.get(op, 0)}
        text = ", ".join(f"{op} {n:+d}" for op, n in sorted(delta.items())) or \
            "same instruction counts, other order or operands"
        log(f"DIFFERENT {name}: {sum(ca.values())} -> {sum(cb.values())} instructions; "
            f"{text}")
    log(f"compare: {len(names_a | names_b) - differ} of {len(names_a | names_b)} the same")
    return 0 if differ == 0 else 1


# ---------------------------------------------------------------------------------------
# Command line: one child process per target
# ---------------------------------------------------------------------------------------

def _child(args) -> int:
    os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
    os.environ["FLASHCOURSE_PACKED_LAUNCH"] = "0"
    sys.path.insert(0, str(ROOT))
    import warnings
    warnings.simplefilter("ignore")
    import flashcourse  # noqa: F401  (after the environment is set)
    results = run_target(args.arch[0], args.families, args.quick, args.out,
                         not args.no_ptxas, log=lambda s: print(s, flush=True),
                         match=args.match)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(as_json(results), indent=1))
    return 0 if all(r.ok for r in results) else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="*", default=list(DEFAULT_TARGETS), choices=list(TARGETS))
    ap.add_argument("--families", nargs="*", default=list(FAMILIES), choices=FAMILIES)
    ap.add_argument("--quick", action="store_true", help="the few cases the test runs")
    ap.add_argument("--out", type=Path, help="write each kernel's PTX into this folder")
    ap.add_argument("--json", type=Path, help="write the results to this file")
    ap.add_argument("--no-ptxas", action="store_true", help="stop at PTX")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                    help="targets compiled at once (one process each)")
    ap.add_argument("--match", help="only the cases whose name matches this regex")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--probe", action="store_true",
                    help="exit 0 if NVVM is found, else print why and exit 2")
    ap.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"),
                    help="set two --out folders' PTX side by side, then exit")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compare:
        return compare_dirs(*args.compare)
    if args.list:
        sys.path.insert(0, str(ROOT))
        for c in all_cases():
            if c.family in args.families and (not args.quick or set(c.quick) & set(args.arch)) \
                    and (not args.match or re.search(args.match, c.name)):
                print(f"{c.family:13} {c.name}" + (f"  (quick: {', '.join(c.quick)})"
                                                   if args.quick else ""))
        return 0
    missing = nvvm_missing()
    if missing:
        print(f"compile_ptx: NVVM not available: {missing}")
        return 2
    if args.probe:
        print("compile_ptx: NVVM found" + ("" if find_ptxas() else " (no ptxas)"))
        return 0
    if args.child:
        return _child(args)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        procs = []
        pending = list(args.arch)
        done = []
        while pending or procs:
            while pending and len(procs) < max(1, args.jobs):
                target = pending.pop(0)
                js = Path(tmp) / f"{target}.json"
                cmd = [sys.executable, __file__, "--child", "--arch", target, "--families",
                       *args.families, "--json-out", str(js)]
                cmd += ["--quick"] * args.quick + ["--no-ptxas"] * args.no_ptxas
                cmd += ["--out", str(args.out)] if args.out else []
                cmd += ["--match", args.match] if args.match else []
                procs.append((target, js, subprocess.Popen(cmd)))
            target, js, p = procs.pop(0)
            p.wait()
            if not js.exists():
                print(f"[{target}] the compile process failed (exit {p.returncode})")
                done.append({"kernel": "(process)", "target": target, "ok": False,
                             "errors": [f"exit {p.returncode}"]})
                continue
            done += json.loads(js.read_text())
    bad = [r for r in done if not r["ok"]]
    print(f"\ncompile_ptx: {len(done) - len(bad)} of {len(done)} kernel builds ok "
          f"({', '.join(args.arch)}; {time.perf_counter() - t0:.0f} s)")
    for r in bad:
        print(f"  FAIL [{r['target']}] {r['kernel']}: {'; '.join(r['errors'])}")
    if args.json:
        args.json.write_text(json.dumps(done, indent=1))
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
