"""Device functions shared by several kernels (imported, never copied).

Each kernel builder calls these while it builds its kernel, so the functions compile into
that kernel exactly as if they were written inside it. Kernel versions themselves stay in
their own modules, side by side.
"""

from __future__ import annotations

import math

from numba import cuda, float32, uint32

from ...constants import F0, LN2_F, NEG_INF
from ...gpu import using_simulator
from ...variants.mods import jit_ready


def inlined(fn):
    """`fn` as a device function that a GPU build always inlines into the kernel calling it
    (as if written there); the simulator's jit has no `forceinline` and needs none."""
    if using_simulator():
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, forceinline=True)(fn)


def ir_inlined(fn):
    """`fn` as a device function that a GPU build inlines at Numba's IR level
    (inline="always"): compiled exactly as if its lines stood in the kernel. A `inlined`
    (forceinline) function is optimised on its own before NVVM inlines it, which can order
    or share its arithmetic otherwise than the kernel would; a kernel step that must leave
    the compiled code as it was uses this. The simulator runs it as a plain device
    function."""
    if using_simulator():
        return cuda.jit(device=True)(fn)
    return cuda.jit(device=True, inline="always")(fn)


def shared_arrays(simulator: bool, scr: int = 1, red: int = 1):
    """A device function shared() -> (sm, smf, scr, red) that a kernel calls first: its
    dynamic shared memory as 32-bit words (sm) and as float32 (smf, the same bytes;
    16-byte aligned on a GPU, for cp.async and ldmatrix), and the simulator's two scratch
    arrays of `scr` and `red` floats (the simulated mma's fragment exchange and the quad
    reductions, which a GPU does in registers: there both are smf, never touched)."""
    if simulator:
        @cuda.jit(device=True)
        def shared():
            sm = cuda.shared.array(0, uint32)
            smf = cuda.shared.array(0, float32)
            scr_ = cuda.shared.array(scr, float32)
            red_ = cuda.shared.array(red, float32)
            return sm, smf, scr_, red_
        return shared

    @cuda.jit(device=True, forceinline=True)
    def shared():
        sm = cuda.shared.array(0, uint32, alignment=16)
        smf = cuda.shared.array(0, float32, alignment=16)
        return sm, smf, smf, smf
    return shared


def exp2_log2(simulator: bool | None = None):
    """(exp2, log2) on float32: the hardware's math.exp2 / math.log2 where Numba has them
    on a GPU; on the simulator (or a Python without math.exp2, 3.10) exp(x ln 2) and
    log(x) / ln 2. simulator: build for the simulator; None = `using_simulator()`."""
    if simulator is None:
        simulator = using_simulator()
    if simulator or not hasattr(math, "exp2"):
        @cuda.jit(device=True)
        def exp2(x):
            return math.exp(x * LN2_F)

        @cuda.jit(device=True)
        def log2(x):
            return math.log(x) / LN2_F
        return exp2, log2
    return math.exp2, math.log2


def row_col(D: int):
    """rc(e) -> (e // D, e % D): the row and column of element e of a row-major tile of D
    columns (as a kernel's copy loops take their elements in turn)."""
    @ir_inlined
    def rc(e):
        r = e // D
        return r, e - r * D
    return rc


@inlined
def reset_state(acc, n_acc, m, l, n_rows):
    """The empty online-softmax state of a thread: acc[:n_acc] = 0 (unnormalised O),
    m[:n_rows] = -inf (running max), l[:n_rows] = 0 (running sum). Inlined into the
    kernel, with its loop counts as the kernel's constants."""
    for i in range(n_acc):
        acc[i] = F0
    for i in range(n_rows):
        m[i] = NEG_INF
        l[i] = F0


@inlined
def zero2(x, y, n):
    """x[:n] = y[:n] = 0: two fragment arrays of a thread (accumulators, S and dP)
    cleared; inlined, with n the kernel's constant."""
    for i in range(n):
        x[i] = F0
        y[i] = F0


@inlined
def visible_key_blocks(tk, causal, q_end, BC):
    """Key blocks of Bc keys that a query block sees: all ceil(Tk / Bc), or with a causal
    mask those up to its last row's diagonal (q_end = q0 + Br + Tk - Tq keys); 0 if none."""
    kend = tk
    if causal != 0:
        kend = min(tk, q_end)
    return (kend + BC - 1) // BC if kend > 0 else 0


#: the orders `query_block_order` knows (what a causal launch runs first)
BLOCK_ORDERS = ("launch", "head_reversed", "heaviest_first")
#: the order the kernels that call `query_block_order()` are built with (an A/B sets it
#: and rebuilds: results/h200_tf32_order_ab_log.txt measured all three within 0.5%)
CAUSAL_ORDER = "heaviest_first"


def query_block_order(order: str | None = None):
    """A device function (causal) -> (query block, head) of this thread block, for a grid
    of (query blocks, heads). GPUs are observed to start blocks in launch order (x fastest;
    CUDA promises no order), so the order decides which blocks are left for the last wave.
    With a causal mask query block i sees i + 1 key blocks, and a wave that ends on heavy
    blocks leaves SMs idle:

      "launch"          block (x, y) = (query block x, head y): in each head light first
      "head_reversed"   x reversed: in each head heaviest first (one head per wave or so
                        at N = 16384, several heads per wave at N = 4096)
      "heaviest_first"  the launch index x + X y read head-fastest and reversed: the
                        heaviest block of every head, then the next heaviest of every
                        head, ...; the lightest blocks run last (the longest-processing-
                        time-first rule of scheduling)

    Without a mask every order is the launch order (all blocks weigh the same). order None:
    `CAUSAL_ORDER`, read when called (when a kernel is built)."""
    if order is None:
        order = CAUSAL_ORDER
    if order not in BLOCK_ORDERS:
        raise ValueError(f"order must be one of {BLOCK_ORDERS}, got {order!r}")

    if order == "launch":
        @inlined
        def block_of(causal):
            return cuda.blockIdx.x, cuda.blockIdx.y
    elif order == "head_reversed":
        @inlined
        def block_of(causal):
            if causal != 0:
                return cuda.gridDim.x - 1 - cuda.blockIdx.x, cuda.blockIdx.y
            return cuda.blockIdx.x, cuda.blockIdx.y
    else:
        @inlined
        def block_of(causal):
            if causal != 0:
                lin = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
                return cuda.gridDim.x - 1 - lin // cuda.gridDim.y, lin % cuda.gridDim.y
            return cuda.blockIdx.x, cuda.blockIdx.y
    return block_of


#: the orders `key_block_order` knows, and the one the backward kernels are built with
KEY_ORDERS = ("launch", "heaviest_first")
CAUSAL_KEY_ORDER = "heaviest_first"


def key_block_order(order: str | None = None):
    """The backward's twin of `query_block_order`: a device function (causal) -> (key
    block, head) for a grid of (key blocks, heads). With a causal mask key block j sees
    the query blocks from its diagonal on, so key block 0 is the heaviest and launch
    order is already heaviest first within each head:

      "launch"          block (x, y) = (key block x, head y)
      "heaviest_first"  the launch index x + X y read head-fastest: key block 0 of every
                        head, then key block 1 of every head, ...

    Without a mask both are the launch order. order None: `CAUSAL_KEY_ORDER`, read when
    called (when a kernel is built)."""
    order = CAUSAL_KEY_ORDER if order is None else order
    if order not in KEY_ORDERS:
        raise ValueError(f"order must be one of {KEY_ORDERS}, got {order!r}")
    if order == "launch":
        return query_block_order("launch")

    @inlined
    def block_of(causal):
        if causal != 0:
            lin = cuda.blockIdx.x + cuda.gridDim.x * cuda.blockIdx.y
            return lin // cuda.gridDim.y, lin % cuda.gridDim.y
        return cuda.blockIdx.x, cuda.blockIdx.y
    return block_of


@inlined
def lane_ids():
    """(tid, warp, lane, g, t) of this thread in a 1-D block: warp tid // 32, lane tid % 32,
    and the lane's place in the mma fragments (`ptx.mma`): groupID g = lane // 4 and
    threadID_in_group t = lane % 4."""
    tid = cuda.threadIdx.x
    warp = tid // 32
    lane = tid % 32
    return tid, warp, lane, lane // 4, lane % 4


def mod_device(fn):
    """A learner's mask_mod or score_mod (plain Python, `variants.mods.jit_ready` checks it)
    as a CUDA device function that a variants kernel calls; plain `cuda.jit(device=True)`,
    which the compiler inlines or calls as it sees fit."""
    return cuda.jit(device=True)(jit_ready(fn))


def _shfl_xor_shared(x, offset, scratch, tid):
    """x of thread tid ^ offset, exchanged through shared memory (all threads call it)."""
    cuda.syncthreads()
    scratch[tid] = x
    cuda.syncthreads()
    return scratch[tid ^ offset]


def _shfl_xor_warp(x, offset, scratch, tid):
    """x of thread tid ^ offset, by a warp shuffle (scratch is unused on a GPU)."""
    return cuda.shfl_xor_sync(0xFFFFFFFF, x, offset)


#: The exchange step of a butterfly, shfl_xor(x, offset, scratch, tid): a warp shuffle on a
#: GPU, shared memory on the simulator (which has no shuffles; scratch: one float32 per
#: thread of the block). All threads of the block must call it together.
shfl_xor = cuda.jit(device=True)(_shfl_xor_shared if using_simulator() else _shfl_xor_warp)

