# ruff: noqa: E501  (the edits quote the solution notebooks line for line)
"""Hidden mutants of the CUDA labs (05, 06, 10, 10b), on the simulator: see hidden_mutants.py.

Each case compiles one small kernel and runs the checker's few small launches."""

from __future__ import annotations

from hidden_mutants import call as _call, right, wrong

L05, L06 = "lab05_cuda_puzzles", "lab06_cuda_kernel"
L10, L10B = "lab10_tensor_cores", "lab10b_tensor_core_backward"


def _puzzle(name: str):
    return lambda ns: ns["puzzle"](name).check(ns[name], verbose=False)


PUZZLES = ("map_guard", "broadcast_2d", "halo_sum", "block_reduce", "butterfly", "matmul_tiled",
           "matmul_micro", "row_sums", "transpose", "softmax_rows", "flash_block", "histogram",
           "stage_reverse")
PARTS06 = ("micro_tile_scores", "row_max", "row_sum", "online_update")
PARTS10 = ("load_a", "load_b", "quad_max", "quad_sum", "scores_tile", "softmax_tile", "pv_tile")
PARTS10B = ("row_delta", "transposed_scores", "ds_tile", "grad_tile", "store_grads")

CHECKS = {
    L05: {name: _puzzle(name) for name in PUZZLES},
    L06: {"micro_tile_scores": _call("check_micro_tile_scores", "micro_tile_scores"),
          "row_reductions": _call("check_row_reductions", "row_max", "row_sum"),
          "online_update": _call("check_online_update", "online_update"),
          "kernel": _call("check_kernel", *PARTS06),
          "key_blocks": lambda ns: ns["check_key_blocks"](
              ns["key_blocks"], tuple(ns[p] for p in PARTS06), verbose=False)},
    L10: {"fragments": _call("check_fragments", "load_a", "load_b"),
          "quad": _call("check_quad", "quad_max", "quad_sum"),
          "scores_tile": _call("check_scores_tile", "scores_tile"),
          "softmax_tile": _call("check_softmax_tile", "softmax_tile"),
          "pv_tile": _call("check_pv_tile", "pv_tile"),
          "mask": _call("check_mask", "mask_tile"),
          "kernel": lambda ns: ns["check_kernel"]({p: ns[p] for p in PARTS10}, verbose=False)},
    L10B: {"row_delta": _call("check_row_delta", "row_delta"),
           "transposed_scores": _call("check_transposed_scores", "transposed_scores"),
           "ds_tile": _call("check_ds_tile", "ds_tile"),
           "grad_tile": _call("check_grad_tile", "grad_tile"),
           "store_grads": _call("check_store_grads", "store_grads"),
           "kernel": lambda ns: ns["check_kernel"]({p: ns[p] for p in PARTS10B},
                                                   verbose=False)},
}

_FAKE_FLASH = '''
class _NotAKernel:
    """Looks like a launch (obj[grid, block](...)) but is plain numpy on the host."""
    def __getitem__(self, config):
        def launch(q, k, v, o, tq, tk, d, scale):
            qh, kh, vh = (np.asarray(a) for a in (q, k, v))
            s = scale * qh[:tq, :d] @ kh[:tk, :d].T
            p = np.exp(s - s.max(axis=1, keepdims=True))
            o[:tq, :d] = (p / p.sum(axis=1, keepdims=True)) @ vh[:tk, :d]
        return launch


flash_block = _NotAKernel()
'''

_PLAIN_SOFTMAX_FLASH = '''
@cuda.jit
def flash_block(q, k, v, o, tq, tk, d, scale):
    r = cuda.threadIdx.x
    row = cuda.local.array(64, float32)          # the whole score row: no online update
    if r < tq:
        m = NEG_INF
        for c in range(tk):
            s = F0
            for x in range(d):
                s += q[r, x] * k[c, x]
            row[c] = s * scale
            m = max(m, row[c])
        l = F0
        for c in range(tk):
            row[c] = math.exp(row[c] - m)
            l += row[c]
        for x in range(d):
            acc = F0
            for c in range(tk):
                acc += row[c] * v[c, x]
            o[r, x] = acc / l
'''

# ---------------------------------------------------------------- lab 05: puzzles
LAB05 = [
    wrong(L05, "map_guard", "no guard", [("    if i < n:\n        out[i] = float32(2)",
                                         "    if True:\n        out[i] = float32(2)")], "ragged edge"),
    wrong(L05, "map_guard", "block index forgotten", [
        ("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x\n    if i < n:\n"
         "        out[i] = float32(2)",
         "i = cuda.threadIdx.x\n    if i < n:\n        out[i] = float32(2)")], "block's offset"),
    wrong(L05, "map_guard", "float64 literals", [
        ("out[i] = float32(2) * a[i] + float32(1)", "out[i] = 2.0 * a[i] + 1.0")], "float64"),
    wrong(L05, "map_guard", "no @cuda.jit", [("@cuda.jit\ndef map_guard", "def map_guard")],
          "cuda.jit"),
    wrong(L05, "broadcast_2d", "b indexed by row", [
        ("out[r, c] = a[r, c] * b[c]", "out[r, c] = a[r, c] * b[r]")], "b"),
    wrong(L05, "broadcast_2d", "columns unguarded", [
        ("if r < rows and c < cols:\n        out[r, c]", "if r < rows:\n        out[r, c]")],
          "ragged edge"),
    wrong(L05, "halo_sum", "no barrier", [
        ("        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n    cuda.syncthreads()\n",
         "        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n")], "barrier"),
    wrong(L05, "halo_sum", "halo never loaded", [
        ("    if t == TPB3 - 1:\n        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n", "")],
          "halo"),
    wrong(L05, "halo_sum", "barrier inside the guard", [
        ("    cuda.syncthreads()\n    if i < n:\n        out[i] = sh[t] + sh[t + 1]",
         "    if i < n:\n        cuda.syncthreads()\n        out[i] = sh[t] + sh[t + 1]")],
          "every thread"),
    wrong(L05, "block_reduce", "serial sum by thread 0", [
        ("    stride = TPB4 // 2\n    while stride > 0:\n        if t < stride:\n"
         "            s_sum[t] += s_sum[t + stride]\n"
         "            s_max[t] = max(s_max[t], s_max[t + stride])\n"
         "        cuda.syncthreads()\n        stride //= 2\n",
         "    if t == 0:\n        for j in range(1, TPB4):\n            s_sum[0] += s_sum[j]\n"
         "            s_max[0] = max(s_max[0], s_max[j])\n")], "tree"),
    wrong(L05, "block_reduce", "no barrier between steps", [
        ("            s_max[t] = max(s_max[t], s_max[t + stride])\n        cuda.syncthreads()\n",
         "            s_max[t] = max(s_max[t], s_max[t + stride])\n")], "barrier"),
    wrong(L05, "block_reduce", "barrier inside `if t < stride`", [
        ("            s_max[t] = max(s_max[t], s_max[t + stride])\n        cuda.syncthreads()\n",
         "            s_max[t] = max(s_max[t], s_max[t + stride])\n            cuda.syncthreads()\n")],
          "every thread"),
    wrong(L05, "block_reduce", "padding 0 for the max", [
        ("        s_max[t] = NEG_INF", "        s_max[t] = F0")], "-inf"),
    wrong(L05, "butterfly", "offsets from 16", [("offset = GROUP5 // 2", "offset = 16")], "group"),
    wrong(L05, "butterfly", "one step missing", [("while offset > 0:", "while offset > 1:")],
          "step", where="butterfly"),
    wrong(L05, "butterfly", "shuffle inside an if", [
        ("        s += shfl_xor(s, offset, scratch, lane)\n",
         "        if lane < 16:\n            s += shfl_xor(s, offset, scratch, lane)\n")], "lane"),
    wrong(L05, "matmul_tiled", "second barrier missing", [
        ("            acc += As[ty, kk] * Bs[kk, tx]\n        cuda.syncthreads()\n",
         "            acc += As[ty, kk] * Bs[kk, tx]\n")], "barrier"),
    wrong(L05, "matmul_tiled", "tile transposed in shared", [
        ("acc += As[ty, kk] * Bs[kk, tx]", "acc += As[kk, ty] * Bs[tx, kk]")], "As"),
    wrong(L05, "matmul_tiled", "loads unguarded", [
        ("As[ty, tx] = a[row, ka] if (row < m and ka < k) else F0", "As[ty, tx] = a[row, ka]")],
          "ragged"),
    wrong(L05, "matmul_tiled", "float64 accumulator", [
        ("    acc = F0\n    for kt", "    acc = 0.0\n    for kt")], "float64"),
    wrong(L05, "matmul_micro", "store unguarded", [
        ("            if row < m and col < n:\n                c[row, col] = acc[i * TN7 + j]",
         "            c[row, col] = acc[i * TN7 + j]")], "ragged"),
    wrong(L05, "matmul_micro", "acc not zeroed", [
        ("    for x in range(TM7 * TN7):\n        acc[x] = F0\n", "")], "zero"),
    wrong(L05, "row_sums", "no barrier", [
        ("        sh[r, c] = a[r, c]\n    cuda.syncthreads()\n", "        sh[r, c] = a[r, c]\n")],
          "barrier"),
    wrong(L05, "row_sums", "threads past the rows write", [
        ("    if t < rows:\n        s = F0", "    if True:\n        s = F0")], "ragged edge"),
    wrong(L05, "transpose", "not transposed", [
        ("out[c, lane] = tile[lane, c]", "out[lane, c] = tile[lane, c]")], "transpose"),
    wrong(L05, "transpose", "no barrier", [
        ("        tile[r, lane] = a[r, lane]\n    cuda.syncthreads()\n",
         "        tile[r, lane] = a[r, lane]\n")], "barrier"),
    wrong(L05, "softmax_rows", "partner sums not rescaled", [
        ("l = l * math.exp(m - m_use) + l_o * math.exp(m_o - m_use)", "l = l + l_o")],
          "without rescaling"),
    wrong(L05, "softmax_rows", "output not shifted by m", [
        ("out[r, c] = math.exp(x[r, c] - m) / l", "out[r, c] = math.exp(x[r, c]) / l")], "m"),
    wrong(L05, "softmax_rows", "no shuffle: each lane its own statistics", [
        ("    offset = 16\n    while offset > 0:", "    offset = 0\n    while offset > 0:")],
          "lanes"),
    wrong(L05, "flash_block", "acc not rescaled", [
        ("acc[x] = acc[x] * alpha + p * vs[c, x]", "acc[x] = acc[x] + p * vs[c, x]")],
          "rescale"),
    wrong(L05, "flash_block", "no barrier before overwriting the tile", [
        ("    for k0 in range(0, tk, BC11):\n        cuda.syncthreads()\n",
         "    for k0 in range(0, tk, BC11):\n")], "barrier"),
    wrong(L05, "flash_block", "plain softmax over a local score row", [], "online",
          extra=_PLAIN_SOFTMAX_FLASH),
    wrong(L05, "flash_block", "not a CUDA kernel (numpy on the host)", [], "cuda.jit",
          extra=_FAKE_FLASH),
    wrong(L05, "flash_block", "scale forgotten", [
        ("qr[x] = q[r, x] * scale if", "qr[x] = q[r, x] if")], "scale"),
    wrong(L05, "histogram", "shared counts without atomics", [
        ("cuda.atomic.add(sh, int(x[i]), ONE)", "sh[int(x[i])] += ONE")], "race"),
    wrong(L05, "histogram", "global counts without atomics", [
        ("cuda.atomic.add(hist, t, sh[t])", "hist[t] += sh[t]")], "atomic"),
    wrong(L05, "histogram", "no barrier after zeroing", [
        ("        sh[t] = F0\n    cuda.syncthreads()\n", "        sh[t] = F0\n")], "barrier"),
    wrong(L05, "stage_reverse", "no wait for the copy", [("    wait_all()\n", "")], "wait"),
    wrong(L05, "stage_reverse", "rows past the end copied", [
        ("nbytes = 16 if row < rows else 0", "nbytes = 16")], "rows"),
    wrong(L05, "stage_reverse", "not reversed", [
        ("sm[COLS13 * i + COLS13 - 1 - t]", "sm[COLS13 * i + t]")], "revers"),
    right(L05, "map_guard", "cuda.grid and a literal cast", [
        ("i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x\n    if i < n:\n"
         "        out[i] = float32(2) * a[i] + float32(1)",
         "idx = cuda.grid(1)\n    if idx < n:\n        out[idx] = a[idx] * float32(2.0) + ONE")]),
    right(L05, "halo_sum", "thread 0 loads the halo", [
        ("    if t == TPB3 - 1:\n        sh[TPB3] = a[i + 1] if i + 1 < n else F0\n",
         "    if t == 0:\n        h = cuda.blockIdx.x * TPB3 + TPB3\n"
         "        sh[TPB3] = a[h] if h < n else F0\n")]),
    right(L05, "butterfly", "offsets ascending", [
        ("    offset = GROUP5 // 2\n    while offset > 0:", "    offset = 1\n    while offset < GROUP5:"),
        ("        offset //= 2\n    out_sum[i] = s", "        offset *= 2\n    out_sum[i] = s")]),
    right(L05, "block_reduce", "for loop over strides", [
        ("    stride = TPB4 // 2\n    while stride > 0:\n        if t < stride:",
         "    for step in range(1, 20):\n        stride = TPB4 >> step\n        if stride == 0:\n"
         "            break\n        if t < stride:"),
        ("        cuda.syncthreads()\n        stride //= 2\n", "        cuda.syncthreads()\n")]),
    right(L05, "transpose", "named lane from cuda.grid", [
        ("lane = cuda.threadIdx.x", "lane = cuda.grid(1)")], where="transpose"),
    right(L05, "histogram", "zeroing by a strided loop", [
        ("    if t < NB12:\n        sh[t] = F0\n    cuda.syncthreads()",
         "    for j in range(t, NB12, TPB12):\n        sh[j] = F0\n    cuda.syncthreads()")]),
]

# ---------------------------------------------------------------- lab 06: CUDA kernel
MT, RR, OU6, KB = "micro_tile_scores", "row_reductions", "online_update", "key_blocks"
LAB06 = [
    wrong(L06, MT, "rows of the micro-tile contiguous", [
        ("qa[i] = qs[kk, ty + RT * i]", "qa[i] = qs[kk, ty * TM + i]")], "row"),
    wrong(L06, MT, "K tile read transposed", [("kb[j] = ks[tx + CT * j, kk]",
                                                 "kb[j] = ks[kk, tx + CT * j]")], "ks"),
    wrong(L06, MT, "s not zeroed", [("    for x in range(TM * TN):\n        s[x] = F0\n", "")],
          "not reset"),
    wrong(L06, RR, "max starts at CT", [("    offset = CT // 2\n    while offset > 0:\n"
                                         "        x = max(", "    offset = CT\n    while offset > 0:\n"
                                         "        x = max(")], "row"),
    wrong(L06, RR, "sum misses its last step", [
        ("    while offset > 0:\n        x += shfl_xor", "    while offset > 1:\n        x += shfl_xor")],
          "step"),
    wrong(L06, OU6, "acc not rescaled", [
        ("    for j in range(TD):\n        acc[i * TD + j] *= alpha\n", "")], "acc"),
    wrong(L06, OU6, "lp not rescaled", [("lp[i] = lp[i] * alpha + psum", "lp[i] = lp[i] + psum")],
          "rescale"),
    wrong(L06, OU6, "exp2", [("p = math.exp(s[i * TN + j] - m_use)",
                               "p = math.exp2(s[i * TN + j] - m_use)")], "base"),
    wrong(L06, OU6, "float64 literal", [("    psum = F0\n", "    psum = 0.0\n")], "float64"),
    wrong(L06, OU6, "no stand-in for -inf", [
        ("m_use = m_new if m_new != NEG_INF else F0", "m_use = m_new")], "-inf"),
    wrong(L06, KB, "one tile short", [("return min(n, last // BC + 1)", "return min(n, last // BC)")],
          "last"),
    wrong(L06, KB, "offset ignored", [
        ("last = min(q0 + BR, tq) - 1 + off", "last = min(q0 + BR, tq) - 1")], "off"),
    # last <= tk - 1 always (off = tk - tq), so the clip is redundant: a right solution
    right(L06, KB, "no clip to the key tiles", [
        ("return min(n, last // BC + 1)", "return last // BC + 1")]),
    right(L06, RR, "offsets ascending", [
        ("    offset = CT // 2\n    while offset > 0:\n        x = max(x, shfl_xor(x, offset, scratch, tid))\n"
         "        offset //= 2",
         "    offset = 1\n    while offset < CT:\n        x = max(x, shfl_xor(x, offset, scratch, tid))\n"
         "        offset *= 2")]),
    right(L06, KB, "ceil by negation, early causal exit", [
        ("    n = (tk + BC - 1) // BC\n    if causal == 0:\n        return n",
         "    n = -(-tk // BC)\n    if not causal:\n        return n")]),
    right(L06, OU6, "p summed after the loop", [
        ("        s[i * TN + j] = p\n        psum += p\n", "        s[i * TN + j] = p\n"),
        ("    lp[i] = lp[i] * alpha + psum",
         "    for j in range(TN):\n        psum += s[i * TN + j]\n    lp[i] = alpha * lp[i] + psum")]),
]

# ---------------------------------------------------------------- lab 10: tensor cores
FR, QD, ST, SM, PV, MK = "fragments", "quad", "scores_tile", "softmax_tile", "pv_tile", "mask"
LAB10 = [
    wrong(L10, FR, "A rows and columns halves swapped", [
        ("row = r0 + g + 8 * (w % 2)\n        col = c0 + 2 * t + 8 * (w // 2)",
         "row = r0 + g + 8 * (w // 2)\n        col = c0 + 2 * t + 8 * (w % 2)")], "words 1 and 2"),
    wrong(L10, FR, "B read with the tile transposed", [
        ("b[w] = pack(tile[n0 + g, kk], tile[n0 + g, kk + 1])",
         "b[w] = pack(tile[kk, n0 + g], tile[kk + 1, n0 + g])")], "other way round"),
    wrong(L10, QD, "offsets 16 and 8 (no quad)", [
        ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
         "    x = max(x, shfl_xor(x, 16, red, lane))\n    x = max(x, shfl_xor(x, 8, red, lane))")],
          "offsets 1 and 2"),
    wrong(L10, QD, "sum misses a step", [
        ("    x += shfl_xor(x, 1, red, lane)\n    x += shfl_xor(x, 2, red, lane)",
         "    x += shfl_xor(x, 1, red, lane)")], "only 2 of the 4 lanes"),
    wrong(L10, ST, "s not zeroed", [("    for x in range(4 * NS):\n        s[x] = F0\n", "")],
          "not reset"),
    wrong(L10, ST, "last k step missing", [("for kk in range(KT):\n            load_b(ks",
                                            "for kk in range(KT - 1):\n            load_b(ks")],
          "KT"),
    wrong(L10, SM, "acc not rescaled", [
        ("            acc[4 * n + 2 * hf] *= alpha\n            acc[4 * n + 2 * hf + 1] *= alpha\n",
         "            pass\n")], "acc"),
    wrong(L10, SM, "lp not rescaled", [("lp[hf] = lp[hf] * alpha + ps", "lp[hf] = lp[hf] + ps")],
          "rescale"),
    wrong(L10, SM, "no quad max", [("        x = quad_max(x, red, lane)\n", "")], "one lane only"),
    wrong(L10, SM, "exp2", [("p = math.exp(s[4 * n + 2 * hf + c] - m_use)",
                              "p = math.exp2(s[4 * n + 2 * hf + c] - m_use)")], "base"),
    wrong(L10, SM, "shfl_xor_sync used directly", [
        ("        x = quad_max(x, red, lane)\n",
         "        x = max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, 1))\n"
         "        x = max(x, cuda.shfl_xor_sync(0xFFFFFFFF, x, 2))\n")], "shfl_xor"),
    wrong(L10, PV, "P pairs packed in the wrong order", [
        ("        pa[1] = pack(s[j0 + 2], s[j0 + 3])\n        pa[2] = pack(s[j0 + 4], s[j0 + 5])",
         "        pa[1] = pack(s[j0 + 4], s[j0 + 5])\n        pa[2] = pack(s[j0 + 2], s[j0 + 3])")],
          "wrong fragment order"),
    wrong(L10, PV, "V's first 8 dimensions for every n8 tile", [
        ("load_b(vt, 8 * n, 16 * kp, w[0], b)", "load_b(vt, 0, 16 * kp, w[0], b)")], "vt"),
    wrong(L10, MK, "causal mask hides the diagonal", [
        ("col > row + off", "col >= row + off")], "diagonal"),
    wrong(L10, MK, "ragged key tile not masked", [
        ("if col >= tk or (causal != 0 and col > row + off):",
         "if causal != 0 and col > row + off:")], "tk"),
    wrong(L10, MK, "rows and columns swapped in the C map", [
        ("col = k0 + 8 * n + 2 * t + (i % 2)\n            row = q0 + g + 8 * (i // 2)",
         "col = k0 + 8 * n + g + 8 * (i // 2)\n            row = q0 + 2 * t + (i % 2)")], "C"),
    right(L10, QD, "quad steps in the other order", [
        ("    x = max(x, shfl_xor(x, 1, red, lane))\n    x = max(x, shfl_xor(x, 2, red, lane))",
         "    x = max(x, shfl_xor(x, 2, red, lane))\n    x = max(x, shfl_xor(x, 1, red, lane))")]),
    right(L10, MK, "lane split by shifts", [
        ("    g = lane // 4\n    t = lane % 4\n    for n in range(NS):\n        for i in range(4):\n"
         "            col",
         "    g = lane >> 2\n    t = lane & 3\n    for n in range(NS):\n        for i in range(4):\n"
         "            col")]),
    right(L10, SM, "row max in a helper loop", [
        ("        for n in range(NS):\n            x = max(x, max(s[4 * n + 2 * hf], s[4 * n + 2 * hf + 1]))",
         "        for e in range(2 * NS):\n            x = max(x, s[4 * (e // 2) + 2 * hf + e % 2])")]),
]

# ---------------------------------------------------------------- lab 10b: tensor-core backward
RD, TS, DS, GT, SG = "row_delta", "transposed_scores", "ds_tile", "grad_tile", "store_grads"
LAB10B = [
    wrong(L10B, RD, "O times O", [("x += o[row, c] * do[row, c]", "x += o[row, c] * o[row, c]")],
          "do"),
    wrong(L10B, RD, "last column left out", [("for c in range(d):", "for c in range(d - 1):")],
          "d"),
    wrong(L10B, TS, "dP from Q", [("load_b(dos, 8 * n, 16 * kk, w[0], b)",
                                   "load_b(qs, 8 * n, 16 * kk, w[0], b)")], "dP"),
    wrong(L10B, TS, "dp not zeroed", [("        s[x] = F0\n        dp[x] = F0\n", "        s[x] = F0\n")],
          "zero"),
    wrong(L10B, DS, "scale forgotten", [("p = math.exp(s[4 * n + i] * scale - lt[col])",
                                         "p = math.exp(s[4 * n + i] - lt[col])")], "scale"),
    wrong(L10B, DS, "D forgotten", [("dp[4 * n + i] = p * (dp[4 * n + i] - dl[col])",
                                     "dp[4 * n + i] = p * dp[4 * n + i]")], "D", where=DS),
    wrong(L10B, DS, "lse indexed by the key row", [
        ("    t = lane % 4\n    for n in range(NS):\n        for i in range(4):\n"
         "            col = 8 * n + 2 * t + (i % 2)\n            p = math.exp(s[4 * n + i] * scale - lt[col])",
         "    g = lane // 4\n    t = lane % 4\n    for n in range(NS):\n        for i in range(4):\n"
         "            col = 8 * n + 2 * t + (i % 2)\n"
         "            p = math.exp(s[4 * n + i] * scale - lt[g + 8 * (i // 2)])")], "QUERY", where=DS),
    wrong(L10B, DS, "P base 2 without log2 e", [
        ("p = math.exp(s[4 * n + i] * scale - lt[col])",
         "p = math.exp2(s[4 * n + i] * scale - lt[col])")], "base", where=DS),
    wrong(L10B, GT, "Y from the row-major copy", [("load_b(yt, 8 * n, 16 * kp, w[0], b)",
                                                    "load_b(ys, 8 * n, 16 * kp, w[0], b)")], "yt"),
    wrong(L10B, GT, "pairs packed out of order", [
        ("        pa[1] = pack(x[j0 + 2], x[j0 + 3])\n        pa[2] = pack(x[j0 + 4], x[j0 + 5])",
         "        pa[1] = pack(x[j0 + 4], x[j0 + 5])\n        pa[2] = pack(x[j0 + 2], x[j0 + 3])")],
          "pa"),
    wrong(L10B, SG, "dK not scaled", [("dk[key, col] = dka[4 * n + i] * scale",
                                       "dk[key, col] = dka[4 * n + i]")], "scale"),
    wrong(L10B, SG, "no bounds check", [("            if key < tk and col < d:\n"
                                         "                dk[key, col]",
                                         "            if True:\n                dk[key, col]")],
          "tk"),
    wrong(L10B, SG, "dK and dV swapped", [
        ("                dk[key, col] = dka[4 * n + i] * scale\n"
         "                dv[key, col] = dva[4 * n + i]",
         "                dk[key, col] = dva[4 * n + i] * scale\n"
         "                dv[key, col] = dka[4 * n + i]")], "swap"),
    right(L10B, RD, "two partial sums", [
        ("    x = F0\n    for c in range(d):\n        x += o[row, c] * do[row, c]\n    return x",
         "    x0 = F0\n    x1 = F0\n    for c in range(0, d - 1, 2):\n"
         "        x0 += o[row, c] * do[row, c]\n        x1 += o[row, c + 1] * do[row, c + 1]\n"
         "    if d % 2 == 1:\n        x0 += o[row, d - 1] * do[row, d - 1]\n    return x0 + x1")]),
    right(L10B, SG, "lane split by shifts", [
        ("    g = lane // 4\n    t = lane % 4\n    for n in range(NO):",
         "    g = lane >> 2\n    t = lane & 3\n    for n in range(NO):")]),
]

# ---------------------------------------------------------------- round 18 (mutants report)
# The wrong ones each passed, or got another hint, before round 18; the right ones are the
# unusual correct solutions tried in that round.
ROUND18 = [
    wrong(L05, "flash_block", "row max started at 0", [
        ("    m = NEG_INF\n    l = F0\n    for k0", "    m = F0\n    l = F0\n    for k0")],
          "starts at 0, not -inf"),
    wrong(L05, "flash_block", "copy loop stepped by 32", [
        ("for e in range(r, BC11 * D11, BR11):", "for e in range(r, BC11 * D11, 32):")],
          "ever loaded"),
    wrong(L05, "flash_block", "no barrier after the copy", [
        ("            vs[c, x] = v[k0 + c, x] if ok else F0\n        cuda.syncthreads()\n",
         "            vs[c, x] = v[k0 + c, x] if ok else F0\n")], "barrier"),
    wrong(L05, "flash_block", "running max never stored", [("                m = m_new\n", "")],
          "never stored"),
    wrong(L05, "flash_block", "last partial key tile skipped", [
        ("for k0 in range(0, tk, BC11):", "for k0 in range(0, tk - BC11 + 1, BC11):")],
          "shorter key tile"),
    wrong(L05, "softmax_rows", "lane max started at 0", [
        ("    m = NEG_INF\n    l = F0\n    for c in range(lane, cols, 32):",
         "    m = F0\n    l = F0\n    for c in range(lane, cols, 32):")], "starts at 0, not -inf"),
    wrong(L05, "softmax_rows", "only out[r, lane] written", [
        ("    for c in range(lane, cols, 32):\n        out[r, c] = math.exp(x[r, c] - m) / l",
         "    if lane < cols:\n        out[r, lane] = math.exp(x[r, lane] - m) / l")],
          "never written"),
    wrong(L05, "matmul_tiled", "store unguarded", [
        ("    if row < m and col < n:\n        c[row, col] = acc", "    c[row, col] = acc")],
          "wrote c past its edge"),
    right(L05, "flash_block", "scale after the dot product", [
        ("qr[x] = q[r, x] * scale if (r < tq and x < d) else F0",
         "qr[x] = q[r, x] if (r < tq and x < d) else F0"),
        ("                for x in range(D11):\n                    s += qr[x] * ks[c, x]\n",
         "                for x in range(D11):\n                    s += qr[x] * ks[c, x]\n"
         "                s = s * scale\n")]),
    right(L05, "flash_block", "break at the first key past tk", [
        ("            if k0 + c < tk:\n                s = F0",
         "            if k0 + c >= tk:\n                break\n            if True:\n"
         "                s = F0")]),
    right(L05, "softmax_rows", "two butterflies: the max, then the sum", [
        ("    offset = 16\n    while offset > 0:\n        m_o = shfl_xor(m, offset, scratch, lane)\n"
         "        l_o = shfl_xor(l, offset, scratch, lane)\n        m_new = max(m, m_o)\n"
         "        m_use = m_new if m_new != NEG_INF else F0\n"
         "        l = l * math.exp(m - m_use) + l_o * math.exp(m_o - m_use)\n        m = m_new\n"
         "        offset //= 2\n",
         "    offset = 16\n    while offset > 0:\n        m = max(m, shfl_xor(m, offset, scratch, lane))\n"
         "        offset //= 2\n    l = F0\n    for c in range(lane, cols, 32):\n"
         "        l += math.exp(x[r, c] - m)\n    offset = 16\n    while offset > 0:\n"
         "        l += shfl_xor(l, offset, scratch, lane)\n        offset //= 2\n")]),
    wrong(L06, KB, "one past the last key", [
        ("last = min(q0 + BR, tq) - 1 + off", "last = min(q0 + BR, tq) + off")], "tile too many"),
    wrong(L06, KB, "causal = 0 ignored", [("    if causal == 0:\n        return n\n", "")],
          "causal = 0"),
    right(L06, KB, "a ceiling from one past the last key, q1 unclipped", [
        ("    last = min(q0 + BR, tq) - 1 + off                           # last key the last row sees\n"
         "    if last < 0:\n        return 0\n    return min(n, last // BC + 1)",
         "    end = q0 + BR + off\n    if end <= 0:\n        return 0\n"
         "    return min(n, (end + BC - 1) // BC)")]),
    right(L06, OU6, "if / else stand-in, acc rescaled first", [
        ("m_use = m_new if m_new != NEG_INF else F0",
         "if m_new > NEG_INF:\n        m_use = m_new\n    else:\n        m_use = F0"),
        ("    psum = F0\n    for j in range(TN):",
         "    for j in range(TD):\n        acc[i * TD + j] = acc[i * TD + j] * alpha\n"
         "    psum = F0\n    for j in range(TN):"),
        ("    for j in range(TD):\n        acc[i * TD + j] *= alpha\n", "")]),
]

CASES = LAB05 + LAB06 + LAB10 + LAB10B + ROUND18
