# ruff: noqa: E501  (the edits quote the solution notebooks line for line)
"""Hidden mutants of the numpy labs (02, 03, 04, 09, 11b, 12, 14, 15, 16): see hidden_mutants.py."""

from __future__ import annotations

from hidden_mutants import call as _call, right, wrong

L02, L03, L04 = "lab02_online_softmax", "lab03_tiled_forward", "lab04_traffic"
L09, L11, L12 = "lab09_backward", "lab11b_paged_cache", "lab12_hopper_layouts"
L14, L15 = "lab14_variants", "lab15_fp8"
L16 = "lab16_context_parallelism"


CHECKS = {
    L02: {"online_update": _call("check_online_update", "online_update"),
          "merge_states": _call("check_merge_states", "merge_states"),
          "stream_softmax": _call("check_stream_softmax", "stream_softmax", "merge_states")},
    L03: {"flash_forward": _call("check_flash_forward", "flash_forward"),
          "fa1_forward": _call("check_fa1_forward", "fa1_forward"),
          "merge_partials": _call("check_merge_partials", "merge_partials")},
    L04: {"fa2": _call("check_fa2_traffic", "my_fa2_traffic"),
          "causal": _call("check_fa2_traffic_causal", "my_fa2_traffic_causal"),
          "backward": _call("check_backward_traffic", "my_backward_traffic")},
    L09: {"flash_backward": _call("check_flash_backward", "flash_backward"),
          "flash_backward_dq": _call("check_flash_backward_dq", "flash_backward_dq")},
    L11: {"token_address": _call("check_token_address", "my_token_address"),
          "gather": _call("check_gather", "my_gather"),
          "append": _call("check_append", "my_append"),
          "paged_attention": _call("check_paged_attention", "my_paged_attention")},
    L12: {"descriptor": _call("check_descriptor", "my_descriptor"),
          "swizzled_offset": _call("check_swizzled_offset", "my_swizzled_offset"),
          "swizzle": _call("check_swizzle_modes", "my_swizzle")},
    L14: {"sliding_window": _call("check_sliding_window", "sliding_window"),
          "document": _call("check_document", "document"),
          "softcap": _call("check_softcap", "softcap"),
          "build_block_mask": _call("check_build_block_mask", "build_block_mask"),
          "flex_forward": _call("check_flex_forward", "flex_forward")},
    L15: {"block_scales": _call("check_block_scales", "block_scales"),
          "fake_quantize": _call("check_fake_quantize", "fake_quantize_blocks"),
          "hadamard": _call("check_hadamard", "hadamard_matrix"),
          "rotate_qk": _call("check_rotate_qk", "rotate_qk"),
          "fp8_forward": _call("check_fp8_forward", "fp8_forward")},
    L16: {"ring_merge": _call("check_ring_merge", "ring_merge"),
          "zigzag_ranges": _call("check_zigzag_ranges", "zigzag_ranges"),
          "ring_work": _call("check_ring_work", "ring_work")},
}

# ---------------------------------------------------------------- lab 02: online softmax
OU, MS, SS = "online_update", "merge_states", "stream_softmax"
LAB02 = [
    wrong(L02, OU, "no finite stand-in for -inf", [
        ("m_safe = np.where(m_new == -np.inf, 0.0, m_new)", "m_safe = m_new")], "-inf"),
    wrong(L02, OU, "old sum not rescaled", [
        ("l_new = l * np.exp(m - m_safe) + np.exp(x - m_safe)",
         "l_new = l + np.exp(x - m_safe)")], "rescale"),
    wrong(L02, OU, "rescale factor upside down", [
        ("l * np.exp(m - m_safe)", "l * np.exp(m_safe - m)")], "wrong way"),
    wrong(L02, OU, "base 2 exponentials", [
        ("l_new = l * np.exp(m - m_safe) + np.exp(x - m_safe)",
         "l_new = l * np.exp2(m - m_safe) + np.exp2(x - m_safe)")], "base"),
    wrong(L02, OU, "running min", [("m_new = np.maximum(m, x)", "m_new = np.minimum(m, x)")],
          "max"),
    wrong(L02, OU, "new term not shifted", [
        ("+ np.exp(x - m_safe)", "+ np.exp(x)")], "shift"),
    wrong(L02, OU, "returns the old max", [("return m_new, l_new", "return m, l_new")], "max"),
    wrong(L02, MS, "b's sum not rescaled", [
        ("l_b * np.exp(m_b - m_safe)", "l_b")], "rescale"),
    wrong(L02, MS, "sums added as they are", [
        ("l = l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)", "l = l_a + l_b")],
          "rescale"),
    wrong(L02, MS, "no stand-in for two empty pieces", [
        ("m_safe = np.where(m == -np.inf, 0.0, m)", "m_safe = m")], "-inf"),
    wrong(L02, MS, "base 2 exponentials", [
        ("l = l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)",
         "l = l_a * np.exp2(m_a - m_safe) + l_b * np.exp2(m_b - m_safe)")], "base"),
    wrong(L02, SS, "last ragged chunk left out of the statistics", [
        ("for c0 in range(0, n, chunk):                               # pass 1",
         "for c0 in range(0, n - n % chunk, chunk):                   # pass 1")], "chunk"),
    wrong(L02, SS, "not divided by l", [
        ("np.where(l[:, None] > 0, p / l_safe, 0.0)", "np.where(l[:, None] > 0, p, 0.0)")],
          "divide by its final sum"),
    wrong(L02, SS, "each chunk normalised by its own sum", [
        ("p = np.exp(x[:, c0:c0 + chunk] - m_safe)                # (R, chunk)",
         "p = np.exp(x[:, c0:c0 + chunk] - m_safe)\n"
         "        l_safe = p.sum(axis=1, keepdims=True)")], "l"),
    right(L02, OU, "ufunc out= and isneginf", [
        ("m_safe = np.where(m_new == -np.inf, 0.0, m_new)",
         "m_safe = np.where(np.isneginf(m_new), 0, m_new)"),
        ("l_new = l * np.exp(m - m_safe) + np.exp(x - m_safe)",
         "l_new = np.empty_like(l)\n"
         "    np.multiply(l, np.exp(m - m_safe), out=l_new)\n"
         "    np.add(l_new, np.exp(x - m_safe), out=l_new)")]),
    right(L02, MS, "log-sum form", [
        ("l = l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)",
         "with np.errstate(divide='ignore'):\n"
         "        l = np.exp(np.logaddexp(np.log(l_a) + m_a, np.log(l_b) + m_b) - m_safe)")]),
    right(L02, SS, "online_update-free, one statistics array per chunk and empty_like out", [
        ("out = np.zeros((rows, n))", "out = np.empty_like(x, dtype=float)")]),
]

# ---------------------------------------------------------------- lab 03: tiled forward
FF, FA1, MP = "flash_forward", "fa1_forward", "merge_partials"
LAB03 = [
    wrong(L03, FF, "causal k_end one short", [
        ("k_end = max(0, min(t_k, q1 + offset))", "k_end = max(0, min(t_k, q1 + offset - 1))")],
          "k_end"),
    wrong(L03, FF, "mask hides the diagonal", [
        ("s = np.where(cols <= rows + offset, s, -np.inf)",
         "s = np.where(cols < rows + offset, s, -np.inf)")], "diagonal", where=FF),
    wrong(L03, FF, "top-left causal alignment", [
        ("offset = t_k - t_q                                          # bottom-right",
         "offset = 0                                                  # bottom-right")],
          "bottom-right", where=FF),
    wrong(L03, FF, "acc not rescaled", [
        ("acc = alpha[:, None] * acc + p @ v_j", "acc = acc + p @ v_j")], "acc", where=FF),
    wrong(L03, FF, "l not rescaled", [
        ("l = alpha * l + p.sum(axis=1)", "l = l + p.sum(axis=1)")], "rescale", where=FF),
    wrong(L03, FF, "scale forgotten", [
        ("s = scale * (q_i @ k_j.T)", "s = q_i @ k_j.T")], "scale"),
    wrong(L03, FF, "lse in base 2", [
        ("m[seen] + np.log(l[seen])", "m[seen] + np.log2(l[seen])")], "lse"),
    wrong(L03, FF, "lse without m", [
        ("lse[q0:q1][seen] = m[seen] + np.log(l[seen])",
         "lse[q0:q1][seen] = np.log(l[seen])")], "lse"),
    wrong(L03, FF, "P in base 2, alpha in base e", [
        ("p = np.exp(s - m_use[:, None])", "p = np.exp2(s - m_use[:, None])")], "base",
          where=FF),
    wrong(L03, FF, "not normalised by l", [
        ("o[q0:q1][seen] = acc[seen] / l[seen, None]", "o[q0:q1][seen] = acc[seen]")], "l"),
    wrong(L03, FF, "key block end not clipped", [
        ("k1 = min(k0 + block_k, t_k)\n            k_j, v_j = k[k0:k1], v[k0:k1]      ",
         "k1 = k0 + block_k\n            k_j, v_j = k[k0:k1], v[k0:k1]      ")], "ragged",
          where=FF),
    wrong(L03, FF, "row max over the wrong axis", [
        ("m_new = np.maximum(m, s.max(axis=1))", "m_new = np.maximum(m, s.max(axis=0))")],
          "axis", where=FF),
    wrong(L03, FA1, "ragged key block counted in full", [
        ('counter.read("K", (k1 - k0) * d)', 'counter.read("K", block_k * d)')], "K"),
    wrong(L03, FA1, "hidden tile not skipped", [
        ("if causal and k0 > q1 - 1 + offset:", "if causal and k0 > q1 + offset:")], "skip"),
    wrong(L03, FA1, "O written back but not counted", [
        ('            counter.write("O", (q1 - q0) * d)\n', "")], "O"),
    wrong(L03, FA1, "O kept unnormalised in outer memory", [
        ("a_t[:, None] * (p @ v_j)) / l_div", "a_t[:, None] * (p @ v_j))")], "normal"),
    wrong(L03, FA1, "tile's exp not rescaled in the merge", [
        ("+ a_t[:, None] * (p @ v_j)", "+ (p @ v_j)")], "both max"),
    wrong(L03, FA1, "statistics counted as elements", [
        ('counter.read("l", q1 - q0, kind="stat")', 'counter.read("l", q1 - q0)')], "stat"),
    wrong(L03, FA1, "causal tiles never skipped", [
        ("                continue\n", "                pass\n")], "hides in full"),
    wrong(L03, MP, "max instead of logaddexp", [
        ("lse = np.logaddexp(lse_a, lse_b)", "lse = np.maximum(lse_a, lse_b)")], "summed masses"),
    wrong(L03, MP, "outputs added unweighted", [
        ("o = w_a[:, None] * o_a + w_b[:, None] * o_b", "o = o_a + o_b")], "how much weight"),
    wrong(L03, MP, "weights in base 2", [
        ("w_a, w_b = np.exp(lse_a - lse_use), np.exp(lse_b - lse_use)",
         "w_a, w_b = np.exp2(lse_a - lse_use), np.exp2(lse_b - lse_use)")], "base"),
    wrong(L03, MP, "no stand-in for rows empty in both", [
        ("lse_use = np.where(np.isneginf(lse), 0.0, lse)", "lse_use = lse")], "-inf"),
    wrong(L03, MP, "naive log(exp + exp) overflows", [
        ("lse = np.logaddexp(lse_a, lse_b)", "lse = np.log(np.exp(lse_a) + np.exp(lse_b))")],
          "overflows for large lse"),
    wrong(L03, MP, "plain average", [
        ("o = w_a[:, None] * o_a + w_b[:, None] * o_b", "o = (o_a + o_b) / 2")], "how much weight"),
    right(L03, FF, "zeros_like / full_like outputs, in-place updates", [
        ("o, lse = np.zeros((t_q, d)), np.full(t_q, -np.inf)          # (Tq, d), (Tq,)",
         "o = np.zeros_like(q)\n    lse = np.full_like(q[:, 0], -np.inf)"),
        ("l = alpha * l + p.sum(axis=1)\n            acc = alpha[:, None] * acc + p @ v_j",
         "l *= alpha\n            l += p.sum(axis=1)\n            np.multiply(acc, alpha[:, None],"
         " out=acc)\n            acc += p @ v_j")], where=FF),
    right(L03, FF, "base 2 throughout, boolean-index mask", [
        ("s = np.where(cols <= rows + offset, s, -np.inf)",
         "s = s.copy()\n                s[cols > rows + offset] = -np.inf"),
        ("s = scale * (q_i @ k_j.T)", "s = scale * np.log2(np.e) * (q_i @ k_j.T)"),
        ("p = np.exp(s - m_use[:, None])", "p = np.exp2(s - m_use[:, None])"),
        ("alpha = np.exp(m - m_use)", "alpha = np.exp2(m - m_use)"),
        ("lse[q0:q1][seen] = m[seen] + np.log(l[seen])",
         "lse[q0:q1][seen] = (m[seen] + np.log2(l[seen])) * np.log(2.0)")], where=FF),
    right(L03, FA1, "zeros_like outer memory and in-place merge", [
        ("o, l, m = np.zeros((t_q, d)), np.zeros(t_q), np.full(t_q, -np.inf)   # outer memory",
         "o = np.zeros_like(q)\n    l = np.zeros_like(q[:, 0])\n"
         "    m = np.full_like(q[:, 0], -np.inf)")]),
    right(L03, MP, "explicit max and shifted sum", [
        ("lse = np.logaddexp(lse_a, lse_b)                            # (Tq,)\n"
         "    lse_use = np.where(np.isneginf(lse), 0.0, lse)              # rows empty in both parts",
         "mx = np.maximum(lse_a, lse_b)\n    mx = np.where(np.isneginf(mx), 0.0, mx)\n"
         "    lse = mx + np.log(np.exp(lse_a - mx) + np.exp(lse_b - mx))\n"
         "    lse_use = np.where(np.isneginf(lse), 0.0, lse)")]),
]

# ---------------------------------------------------------------- lab 04: traffic
LAB04 = [
    wrong(L04, "fa2", "query blocks rounded down", [("Tr = -(-Tq // Br)", "Tr = Tq // Br")],
          "round"),
    wrong(L04, "fa2", "V forgotten", [
        ("Tr * 2 * Tk * d * e", "Tr * Tk * d * e")], "V"),
    wrong(L04, "fa2", "lse at e bytes", [
        ("write_bytes = Tq * d * e + 4 * Tq\n    return read_bytes, write_bytes\n    ### END",
         "write_bytes = Tq * d * e + e * Tq\n    return read_bytes, write_bytes\n    ### END")],
          "lse"),
    wrong(L04, "fa2", "lse forgotten", [
        ("write_bytes = Tq * d * e + 4 * Tq\n    return read_bytes, write_bytes\n    ### END",
         "write_bytes = Tq * d * e\n    return read_bytes, write_bytes\n    ### END")], "lse"),
    wrong(L04, "fa2", "loops swapped: Q per key block", [
        ("read_bytes = Tq * d * e + Tr * 2 * Tk * d * e",
         "read_bytes = 2 * Tk * d * e + -(-Tk // Bc) * Tq * d * e")], "K and V"),
    wrong(L04, "causal", "diagonal tile skipped", [
        ("if k0 <= q1 - 1 + Tk - Tq:", "if k0 < q1 - 1 + Tk - Tq:")], "unless k0 > q1 - 1 + Tk - Tq"),
    wrong(L04, "causal", "top-left alignment", [
        ("if k0 <= q1 - 1 + Tk - Tq:", "if k0 <= q1 - 1:")], "bottom-right"),
    wrong(L04, "causal", "ragged key block counted in full", [
        ("read_bytes += 2 * (k1 - k0) * d * e", "read_bytes += 2 * Bc * d * e")], "real rows"),
    wrong(L04, "causal", "V forgotten", [
        ("read_bytes += 2 * (k1 - k0) * d * e", "read_bytes += (k1 - k0) * d * e")], "V"),
    wrong(L04, "backward", "key blocks rounded down", [
        ("Tc = -(-Tk // Bc)", "Tc = Tk // Bc")], "round"),
    wrong(L04, "backward", "D read forgotten", [
        ("read_bytes += Tc * (3 * Tq * d * e + 2 * 4 * Tq)",
         "read_bytes += Tc * (3 * Tq * d * e + 4 * Tq)")], "D"),
    wrong(L04, "backward", "dQ per key block not written", [
        ("    write_bytes += Tc * Tq * d * e\n", "")], "dQ"),
    wrong(L04, "backward", "statistics at e bytes", [
        ("read_bytes += Tc * (3 * Tq * d * e + 2 * 4 * Tq)",
         "read_bytes += Tc * (3 * Tq * d * e + 2 * e * Tq)")], "4 bytes"),
    right(L04, "fa2", "ceil written with + Br - 1", [
        ("Tr = -(-Tq // Br)", "Tr = (Tq + Br - 1) // Br")]),
    right(L04, "causal", "vectorised with numpy (numpy integers)", [
        ("    for q0 in range(0, Tq, Br):\n        q1 = min(q0 + Br, Tq)\n"
         "        for k0 in range(0, Tk, Bc):\n            k1 = min(k0 + Bc, Tk)\n"
         "            if k0 <= q1 - 1 + Tk - Tq:\n"
         "                read_bytes += 2 * (k1 - k0) * d * e\n",
         "    q1 = np.minimum(np.arange(0, Tq, Br) + Br, Tq)           # (Tr,)\n"
         "    k0 = np.arange(0, Tk, Bc)                                 # (Tc,)\n"
         "    width = np.minimum(k0 + Bc, Tk) - k0\n"
         "    seen = k0[None, :] <= q1[:, None] - 1 + Tk - Tq           # (Tr, Tc)\n"
         "    read_bytes += 2 * d * e * (seen * width[None, :]).sum()\n")]),
    right(L04, "backward", "math.ceil", [
        ("Tc = -(-Tk // Bc)", "import math\n    Tc = math.ceil(Tk / Bc)")]),
]

# ---------------------------------------------------------------- lab 09: backward
FB, FBQ = "flash_backward", "flash_backward_dq"
LAB09 = [
    wrong(L09, FB, "D summed over the wrong axis", [
        ("delta = (do * o).sum(axis=1)", "delta = (do * o).sum(axis=0)")], "D"),
    wrong(L09, FB, "P from a base-2 lse", [
        ("p = np.exp(s - lse_i[:, None])                      # (Br, Bc), exact P",
         "p = np.exp2(s - lse_i[:, None])")], "base"),
    wrong(L09, FB, "dS without D", [
        ("ds = p * (dp - delta[q0:q1, None])", "ds = p * dp")], "D"),
    wrong(L09, FB, "dq without scale", [
        ("dq[q0:q1] += scale * (ds @ k_j)", "dq[q0:q1] += ds @ k_j")], "scale"),
    wrong(L09, FB, "dk without scale", [
        ("dk_j += scale * (ds.T @ q_i)", "dk_j += ds.T @ q_i")], "scale"),
    wrong(L09, FB, "dP from K instead of V", [
        ("dp = do_i @ v_j.T", "dp = do_i @ k_j.T")], "dP"),
    wrong(L09, FB, "no causal skip of query blocks", [
        ("q_start = max(0, k0 - offset) // block_q * block_q", "q_start = 0")], "skip"),
    wrong(L09, FB, "skip ignores the bottom-right offset", [
        ("q_start = max(0, k0 - offset) // block_q * block_q",
         "q_start = k0 // block_q * block_q")], "offset"),
    wrong(L09, FB, "empty rows not handled", [
        ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])   # empty rows: P = 0",
         "lse_i = lse[q0:q1]")], "-inf"),
    wrong(L09, FB, "mask hides the diagonal", [
        ("s = np.where(cols <= rows + offset, s, -np.inf)",
         "s = np.where(cols < rows + offset, s, -np.inf)")], "diagonal"),
    wrong(L09, FB, "dk and dv swapped", [
        ("dk[k0:k1], dv[k0:k1] = dk_j, dv_j", "dk[k0:k1], dv[k0:k1] = dv_j, dk_j")], "swap"),
    wrong(L09, FB, "P recomputed without the scale", [
        ("s = scale * (q_i @ k_j.T)                           # (Br, Bc)",
         "s = q_i @ k_j.T")], "scale"),
    wrong(L09, FBQ, "causal k_end one short", [
        ("k_end = max(0, min(t_k, q1 + offset)) if causal else t_k",
         "k_end = max(0, min(t_k, q1 + offset - 1)) if causal else t_k")], "k_end"),
    wrong(L09, FBQ, "D from Q instead of O", [
        ("delta_i = (do_i * o[q0:q1]).sum(axis=1)", "delta_i = (do_i * q_i).sum(axis=1)")], "D"),
    wrong(L09, FBQ, "dq without scale", [
        ("dq[q0:q1] += scale * ((p * (do_i @ v[k0:k1].T - delta_i[:, None])) @ k[k0:k1])",
         "dq[q0:q1] += (p * (do_i @ v[k0:k1].T - delta_i[:, None])) @ k[k0:k1]")], "scale"),
    wrong(L09, FBQ, "P from a base-2 lse", [
        ("p = np.exp(s - lse_i[:, None])\n            dq[", "p = np.exp2(s - lse_i[:, None])\n"
         "            dq[")], "base"),
    right(L09, FB, "zeros_like gradients (the issue's case)", [
        ("dq, dk, dv = np.zeros((t_q, d)), np.zeros((t_k, d)), np.zeros((t_k, d))",
         "dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)"),
        ("dk_j, dv_j = np.zeros((k1 - k0, d)), np.zeros((k1 - k0, d))",
         "dk_j, dv_j = np.zeros_like(k_j), np.empty_like(v_j)\n        dv_j.fill(0.0)")]),
    right(L09, FB, "np.add.at and ufunc out=", [
        ("dv_j += p.T @ do_i                                  # (Bc, d)",
         "np.add(dv_j, p.T @ do_i, out=dv_j)"),
        ("dq[q0:q1] += scale * (ds @ k_j)                     # (Br, d)",
         "np.add.at(dq, np.arange(q0, q1), scale * (ds @ k_j))")]),
    right(L09, FB, "P in base 2 done right", [
        ("p = np.exp(s - lse_i[:, None])                      # (Br, Bc), exact P",
         "p = np.exp2((s - lse_i[:, None]) * np.log2(np.e))")]),
    right(L09, FBQ, "empty_like then fill, and full_like", [
        ("dq = np.zeros((t_q, d))", "dq = np.empty_like(q)\n    dq.fill(0)"),
        ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])\n        delta_i",
         "lse_i = np.where(np.isneginf(lse[q0:q1]), np.full_like(lse[q0:q1], np.inf),"
         " lse[q0:q1])\n        delta_i")]),
]

# ---------------------------------------------------------------- lab 11b: paged cache
TA, GA, AP, PA = "token_address", "gather", "append", "paged_attention"
LAB11 = [
    wrong(L11, TA, "column and slot swapped", [
        ("page = int(block_table[b, t // page_size])\n    return page, t % page_size",
         "page = int(block_table[b, t % page_size])\n    return page, t // page_size")],
          "slot"),
    wrong(L11, TA, "returns the table column, not the page", [
        ("page = int(block_table[b, t // page_size])", "page = t // page_size")], "table column"),
    wrong(L11, TA, "table indexed [column, sequence]", [
        ("int(block_table[b, t // page_size])", "int(block_table[t // page_size, b])")],
          "row"),
    wrong(L11, GA, "stacked along axis 0", [
        ("return np.stack(rows, axis=1)", "return np.stack(rows, axis=0)")], "heads first"),
    wrong(L11, GA, "last token left out", [
        ("for t in range(seq_len):", "for t in range(seq_len - 1):")], "seq_len"),
    wrong(L11, GA, "page size from the heads axis", [
        ("ps = pages.shape[2]", "ps = pages.shape[1]")], "page_size"),
    wrong(L11, AP, "no copy-on-write", [
        ("if cache.refs[page] > 1:", "if False:")], "copy"),
    wrong(L11, AP, "copy-on-write without copying", [
        ("                cache.k_pages[new] = cache.k_pages[page]\n"
         "                cache.v_pages[new] = cache.v_pages[page]\n", "")], "cop"),
    wrong(L11, AP, "shared page's count not decremented", [
        ("cache.refs[page] -= 1", "pass")], "ref"),
    wrong(L11, AP, "length not updated", [
        ("cache.seq_lens[b] = start + n", "pass")], "seq_lens"),
    wrong(L11, AP, "new page's count not set", [
        ("            cache.refs[page] = 1\n", "")], "ref"),
    wrong(L11, AP, "position off by one", [("t = start + i", "t = start + i + 1")],
          "one token too late"),
    wrong(L11, PA, "last page read in full", [
        ("cnt = block_table[b, i], min(ps, n - i * ps)", "cnt = block_table[b, i], ps")],
          "last page"),
    wrong(L11, PA, "acc not rescaled", [
        ("acc = alpha[:, None] * acc + np.einsum", "acc = acc + np.einsum")], "rescale"),
    wrong(L11, PA, "scale forgotten", [
        ('s = scale * np.einsum("hd,hkd->hk", q[b], k)', 's = np.einsum("hd,hkd->hk", q[b], k)')],
          "scale"),
    wrong(L11, PA, "pages counted rounding down", [
        ("range((n + ps - 1) // ps)", "range(n // ps)")], "last page"),
    wrong(L11, PA, "pool order instead of table order", [
        ("page, cnt = block_table[b, i], min(ps, n - i * ps)",
         "page, cnt = i, min(ps, n - i * ps)")], "block_table"),
    right(L11, TA, "divmod", [
        ("page = int(block_table[b, t // page_size])\n    return page, t % page_size",
         "col, slot = divmod(t, page_size)\n    return int(block_table[b, col]), int(slot)")]),
    right(L11, GA, "vectorised fancy indexing", [
        ("    rows = []\n    for t in range(seq_len):\n"
         "        page, slot = my_token_address(block_table, b, t, ps)\n"
         "        rows.append(pages[page, :, slot])                   # (Hkv, d)\n"
         "    return np.stack(rows, axis=1)                           # (Hkv, seq_len, d)",
         "    t = np.arange(seq_len)\n"
         "    picked = pages[block_table[b, t // ps], :, t % ps]      # (seq_len, Hkv, d)\n"
         "    return picked.transpose(1, 0, 2)")]),
    right(L11, AP, "free page taken from the front of the list", [
        ("page = cache.free.pop()", "page = cache.free.pop(0)"),
        ("new = cache.free.pop()", "new = cache.free.pop(0)")]),
    right(L11, PA, "zeros_like output, in-place rescale", [
        ("o = np.zeros((n_seq, h, d))", "o = np.zeros_like(q, dtype=np.float64)"),
        ("acc = alpha[:, None] * acc + np.einsum(\"hk,hkd->hd\", p, v)",
         "acc *= alpha[:, None]\n            acc += np.einsum(\"hk,hkd->hd\", p, v)")]),
]

# ---------------------------------------------------------------- lab 12: Hopper layouts
DE, SO, SW = "descriptor", "swizzled_offset", "swizzle"
LAB12 = [
    wrong(L12, DE, "start address not in 16-byte units", [
        ("(start >> 4) | (lbo", "start | (lbo")], "start"),
    wrong(L12, DE, "swizzle codes reversed", [
        ("{None: 0, 128: 1, 64: 2, 32: 3}", "{None: 0, 32: 1, 64: 2, 128: 3}")], "swizzle"),
    wrong(L12, DE, "lbo at bit 14", [("(lbo >> 4) << 16", "(lbo >> 4) << 14")], "lbo"),
    wrong(L12, DE, "sbo at bit 30", [("(sbo >> 4) << 32", "(sbo >> 4) << 30")], "sbo"),
    wrong(L12, DE, "swizzle code at bit 61", [("code << 62", "code << 61")], "swizzle"),
    wrong(L12, DE, "lbo in bytes", [("(lbo >> 4) << 16", "lbo << 16")], "lbo"),
    wrong(L12, SO, "no xor", [
        ("return plain ^ (((plain >> 7) & 7) << 4)", "return plain")], "xor"),
    wrong(L12, SO, "row stride 64 bytes", [("plain = row * 128 + 2 * k", "plain = row * 64 + 2 * k")],
          "128"),
    wrong(L12, SO, "one byte per element", [("plain = row * 128 + 2 * k", "plain = row * 128 + k")],
          "2 bytes"),
    wrong(L12, SO, "xor into bits 3..5", [
        ("return plain ^ (((plain >> 7) & 7) << 4)", "return plain ^ (((plain >> 7) & 7) << 3)")],
          "wrong bits"),     # HINT_XOR_BITS since round 15 (was the generic HINT_SWIZZLE)
    wrong(L12, SO, "three bits masked as two", [
        ("return plain ^ (((plain >> 7) & 7) << 4)", "return plain ^ (((plain >> 7) & 3) << 4)")],
          "row"),
    wrong(L12, SW, "mask without the - 1", [("mask = swizzle // 16 - 1", "mask = swizzle // 16")],
          "mask"),
    wrong(L12, SW, "no swizzle not handled", [
        ("    if swizzle is None:\n        return offset\n", "")], "None"),
    wrong(L12, SW, "mask from 32-byte units", [
        ("mask = swizzle // 16 - 1", "mask = swizzle // 32 - 1")], "mask"),
    wrong(L12, SW, "row taken from bit 6", [
        ("return offset ^ (((offset >> 7) & mask) << 4)",
         "return offset ^ (((offset >> 6) & mask) << 4)")], "bit"),
    right(L12, DE, "sum of fields in integer arithmetic", [
        ("return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | code << 62",
         "return start // 16 + (lbo // 16) * 2**16 + (sbo // 16) * 2**32 + code * 2**62")]),
    right(L12, SO, "chunk index xor row", [
        ("plain = row * 128 + 2 * k\n    return plain ^ (((plain >> 7) & 7) << 4)",
         "chunk, within = divmod(2 * k, 16)\n"
         "    return row * 128 + 16 * (chunk ^ (row % 8)) + within")]),
    right(L12, SW, "table of masks", [
        ("mask = swizzle // 16 - 1", "mask = {32: 1, 64: 3, 128: 7}[swizzle]")]),
]

# ---------------------------------------------------------------- lab 14: variants
SWN, DOC, SC, BBM, FX = "sliding_window", "document", "softcap", "build_block_mask", "flex_forward"
LAB14 = [
    wrong(L14, SWN, "window one short", [
        ("(distance >= 0) & (distance <= window)", "(distance >= 0) & (distance < window)")],
          "window"),
    wrong(L14, SWN, "no bottom-right offset", [
        ("offset = t_key - t_query\n\n    def window_mask",
         "offset = 0\n\n    def window_mask")], "top-left"),
    wrong(L14, SWN, "offset reversed", [
        ("offset = t_key - t_query\n\n    def window_mask",
         "offset = t_query - t_key\n\n    def window_mask")], "offset"),
    wrong(L14, SWN, "two-sided window (future keys visible)", [
        ("return (distance >= 0) & (distance <= window)",
         "return np.abs(distance) <= window")], "keys AFTER"),
    # mask_tile falls back to one call per pair when a mask cannot take arrays (by design)
    right(L14, SWN, "python `and`, a scalar mask", [
        ("(distance >= 0) & (distance <= window)", "(distance >= 0) and (distance <= window)")]),
    wrong(L14, DOC, "searchsorted side='left'", [('side="right") - 1', 'side="left") - 1')],
          "boundar"),
    wrong(L14, DOC, "document and causal together", [
        ("return doc[q_idx] == doc[kv_idx]", "return (doc[q_idx] == doc[kv_idx]) & (kv_idx <= q_idx)")],
          "causal"),
    wrong(L14, DOC, "earlier documents visible", [
        ("return doc[q_idx] == doc[kv_idx]", "return doc[kv_idx] <= doc[q_idx]")], "same document"),
    wrong(L14, SC, "gradient not squared", [("return 1.0 - t * t", "return 1.0 - t")],
          "not 1 - tanh(x)"),
    wrong(L14, SC, "cap not multiplied back", [
        ("return cap * np.tanh(score / cap)", "return np.tanh(score / cap)")], "cap"),
    wrong(L14, SC, "score not divided by cap", [
        ("return cap * np.tanh(score / cap)", "return cap * np.tanh(score)")], "cap"),
    wrong(L14, SC, "gradient times cap", [("return 1.0 - t * t", "return cap * (1.0 - t * t)")],
          "factor of cap"),
    wrong(L14, BBM, "full and partial swapped", [
        ("if tile.all():", "if tile.any() and not tile.all():"),
        ("elif tile.any():", "elif tile.all():")], "full"),
    wrong(L14, BBM, "full tiles also listed as partial", [
        ("elif tile.any():", "if tile.any():")], "both"),
    wrong(L14, BBM, "ragged last key block not clipped", [
        ("k0, k1 = j * block_k, min((j + 1) * block_k, t_key)",
         "k0, k1 = j * block_k, (j + 1) * block_k")], "past the end"),
    wrong(L14, BBM, "last key block never visited", [
        ("for j in range(n_k):", "for j in range(n_k - 1):")], "last"),
    wrong(L14, BBM, "query and key positions swapped", [
        ("tile = mask_tile(mask_mod, 0, 0, np.arange(q0, q1), np.arange(k0, k1))",
         "tile = mask_tile(mask_mod, 0, 0, np.arange(k0, k1), np.arange(q0, q1))")], "q_idx"),
    wrong(L14, FX, "partial tiles not masked", [("if partial:", "if False:")], "partial"),
    wrong(L14, FX, "mask evaluated on full tiles too", [("if partial:", "if True:")], "full"),
    wrong(L14, FX, "full tiles never visited", [
        ("visits = [(j, False) for j in full_kv_indices[i, :full_kv_num_blocks[i]]]",
         "visits = []")], "full"),
    wrong(L14, FX, "score_mod after the mask", [
        ("s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows, cols)\n"
         "            if partial:\n"
         "                s = np.where(mask_tile(mask_mod, 0, 0, rows, cols), s, -np.inf)",
         "s = scale * (q[q0:q1] @ k[k0:k1].T)\n"
         "            if partial:\n"
         "                s = np.where(mask_tile(mask_mod, 0, 0, rows, cols), s, -np.inf)\n"
         "            s = score_tile(score_mod, s, 0, 0, rows, cols)")], "score_mod"),
    wrong(L14, FX, "scale after score_mod", [
        ("s = score_tile(score_mod, scale * (q[q0:q1] @ k[k0:k1].T), 0, 0, rows, cols)",
         "s = scale * score_tile(score_mod, q[q0:q1] @ k[k0:k1].T, 0, 0, rows, cols)")], "scale"),
    wrong(L14, FX, "acc not rescaled", [
        ("acc = alpha[:, None] * acc + p @ v[k0:k1]", "acc = acc + p @ v[k0:k1]")], "rescale"),
    wrong(L14, FX, "lse without m", [
        ("lse[q0:q1] = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)",
         "lse[q0:q1] = np.where(seen, np.log(np.where(seen, l, 1.0)), -np.inf)")], "lse"),
    right(L14, SWN, "logical_and, bounds on kv_idx", [
        ("distance = q_idx + offset - kv_idx\n        return (distance >= 0) & (distance <= window)",
         "return np.logical_and(kv_idx <= q_idx + offset, kv_idx >= q_idx + offset - window)")]),
    right(L14, DOC, "document ids by np.repeat", [
        ('doc = np.searchsorted(cu, np.arange(cu[-1]), side="right") - 1          # (T,) documents',
         "doc = np.repeat(np.arange(len(cu) - 1), np.diff(cu))")]),
    right(L14, SC, "gradient through cosh", [
        ("t = np.tanh(score / cap)\n        return 1.0 - t * t",
         "return 1.0 / np.cosh(score / cap) ** 2")]),
    right(L14, BBM, "one mask for all tiles, sliced", [
        ("    for i in range(n_q):\n        ### BEGIN SOLUTION (12 lines)\n"
         "        q0, q1 = i * block_q, min((i + 1) * block_q, t_query)\n",
         "    whole = mask_tile(mask_mod, 0, 0, np.arange(t_query), np.arange(t_key))\n"
         "    for i in range(n_q):\n"
         "        q0, q1 = i * block_q, min((i + 1) * block_q, t_query)\n"),
        ("tile = mask_tile(mask_mod, 0, 0, np.arange(q0, q1), np.arange(k0, k1))",
         "tile = whole[q0:q1, k0:k1]")]),
    right(L14, FX, "partial tiles first, in-place updates", [
        ("visits = [(j, False) for j in full_kv_indices[i, :full_kv_num_blocks[i]]]\n"
         "        visits += [(j, True) for j in kv_indices[i, :kv_num_blocks[i]]]",
         "visits = [(j, True) for j in kv_indices[i, :kv_num_blocks[i]]]\n"
         "        visits += [(j, False) for j in full_kv_indices[i, :full_kv_num_blocks[i]]]"),
        ("acc = alpha[:, None] * acc + p @ v[k0:k1]",
         "acc *= alpha[:, None]\n            acc += p @ v[k0:k1]")]),
]

# ---------------------------------------------------------------- lab 15: FP8
BS, FQ, HA, RQ, F8 = "block_scales", "fake_quantize", "hadamard", "rotate_qk", "fp8_forward"
LAB15 = [
    wrong(L15, BS, "not divided by 448", [
        ("return (np.stack(amax, axis=-1) / 448.0)", "return (np.stack(amax, axis=-1))")], "448"),
    wrong(L15, BS, "max without abs", [
        ("amax = [np.abs(x[..., b * block:(b + 1) * block, :]).max(axis=(-2, -1))",
         "amax = [x[..., b * block:(b + 1) * block, :].max(axis=(-2, -1))")], "abs"),
    wrong(L15, BS, "ragged last block dropped", [
        ("n_blocks = -(-x.shape[-2] // block)", "n_blocks = x.shape[-2] // block")],
          "shorter block is missing"),
    wrong(L15, BS, "max over tokens only", [
        (".max(axis=(-2, -1))", ".max(axis=-2)")], "d"),
    wrong(L15, BS, "e5m2's 57344 instead of e4m3's 448", [("/ 448.0)", "/ 57344.0)")], "448"),
    wrong(L15, FQ, "not scaled back", [
        ("return (round_to_fp8(x / s_t) * s_t)", "return (round_to_fp8(x / s_t))")], "back"),
    wrong(L15, FQ, "multiplied by the scale first", [
        ("round_to_fp8(x / s_t) * s_t", "round_to_fp8(x * s_t) / s_t")], "divide"),
    wrong(L15, FQ, "scales tiled instead of repeated", [
        ("np.repeat(s, block, axis=-1)", "np.tile(s, block)")], "repeat"),
    wrong(L15, FQ, "no rounding", [("round_to_fp8(x / s_t) * s_t", "x / s_t * s_t")], "round"),
    wrong(L15, HA, "not normalised", [("return h / np.sqrt(d)", "return h")], "sqrt"),
    wrong(L15, HA, "divided by d", [("return h / np.sqrt(d)", "return h / d")], "sqrt"),
    wrong(L15, HA, "twice too large", [("while h.shape[0] < d:", "while h.shape[0] <= d:")],
          "shape"),
    wrong(L15, RQ, "k not rotated", [("return q @ h, k @ h", "return q @ h, k")], "k"),
    wrong(L15, RQ, "rotated by the transpose", [("return q @ h, k @ h", "return q @ h.T, k @ h.T")],
          "h transposed"),
    wrong(L15, F8, "v rotated too", [
        ("q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))",
         "q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n"
         "        v = v @ hadamard_matrix(q.shape[-1])")], "v"),
    wrong(L15, F8, "always rotated", [("if use_hadamard:", "if True:")], "use_hadamard"),
    wrong(L15, F8, "v not quantised", [
        ("for x in (q, k, v))\n    return forward_dequantized(q, k, v)",
         "for x in (q, k, v))\n    v = v\n    return forward_dequantized(q, k, v)"),
        ("q, k, v = (fake_quantize_blocks", "q, k, _ = (fake_quantize_blocks")], "v"),
    wrong(L15, F8, "rotated after quantising", [
        ("    if use_hadamard:\n        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n"
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block) for x in (q, k, v))\n",
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block) for x in (q, k, v))\n"
         "    if use_hadamard:\n        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n")],
          "before"),
    right(L15, BS, "padded and reshaped", [
        ("    n_blocks = -(-x.shape[-2] // block)                               # ceil(T / block)\n"
         "    amax = [np.abs(x[..., b * block:(b + 1) * block, :]).max(axis=(-2, -1))\n"
         "            for b in range(n_blocks)]                                 # n_blocks x (...,)\n"
         "    return (np.stack(amax, axis=-1) / 448.0).astype(np.float32)       # (..., n_blocks)",
         "    t, d = x.shape[-2:]\n    n_blocks = -(-t // block)\n"
         "    pad = [(0, 0)] * (x.ndim - 2) + [(0, n_blocks * block - t), (0, 0)]\n"
         "    xp = np.pad(np.abs(x), pad)\n"
         "    xb = xp.reshape(*x.shape[:-2], n_blocks, block * d)\n"
         "    return (xb.max(axis=-1) / np.float32(448)).astype(np.float32)")]),
    right(L15, FQ, "loop over blocks into empty_like", [
        ("    s_t = np.repeat(s, block, axis=-1)[..., :x.shape[-2], None]       # (..., T, 1)\n"
         "    return (round_to_fp8(x / s_t) * s_t).astype(np.float32)",
         "    out = np.empty_like(x, dtype=np.float32)\n"
         "    for j in range(s.shape[-1]):\n"
         "        sj = s[..., j, None, None]\n"
         "        blk = x[..., j * block:(j + 1) * block, :]\n"
         "        out[..., j * block:(j + 1) * block, :] = round_to_fp8(blk / sj) * sj\n"
         "    return out")]),
    right(L15, HA, "Kronecker products", [
        ("        h = np.block([[h, h], [h, -h]])",
         "        h = np.kron(h, np.array([[1.0, 1.0], [1.0, -1.0]]))")]),
    right(L15, RQ, "einsum", [
        ("return q @ h, k @ h", 'return np.einsum("...td,de->...te", q, h), '
         'np.einsum("...td,de->...te", k, h)')]),
]

# ---------------------------------------------------------------- lab 16: context parallelism
RM, ZZ, RW = "ring_merge", "zigzag_ranges", "ring_work"
LAB16 = [
    wrong(L16, RM, "weight of a instead of b", [("sigmoid(diff)))", "sigmoid(-diff)))")],
          "swapped"),
    wrong(L16, RM, "lse never grows", [("    return o, lse\n", "    return o, lse_a\n")],
          "unchanged"),
    wrong(L16, RM, "logaddexp weights from raw exponentials", [
        ("    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)",
         "    w = np.exp(lse_b) / (np.exp(lse_a) + np.exp(lse_b))\n"
         "    return o_a + w[..., None] * (o_b - o_a), np.logaddexp(lse_a, lse_b)\n"
         "    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)")], "overflow"),
    wrong(L16, RM, "no guard for empty rows", [
        ("    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)",
         "    return (o_a + sigmoid(lse_b - lse_a)[..., None] * (o_b - o_a),\n"
         "            lse_a - logsigmoid(lse_a - lse_b))\n"
         "    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)")], "-inf"),
    wrong(L16, ZZ, "mirror over the ranks", [
        ("bounds[chunks - 1 - r]]", "bounds[world - 1 - r]]")], "2 world - 1 - r"),
    wrong(L16, ZZ, "inclusive stops", [
        ("int(starts[c + 1]))", "int(starts[c + 1] - 1))")], "off by one"),
    wrong(L16, ZZ, "remainder dropped", [
        ("    sizes = [base + (1 if c < extra else 0) for c in range(chunks)]",
         "    sizes = [n // chunks] * chunks")], "belong to no rank"),
    wrong(L16, ZZ, "remainder on the last chunk", [
        ("    sizes = [base + (1 if c < extra else 0) for c in range(chunks)]",
         "    sizes = [base] * chunks\n    sizes[-1] += extra")], "leftover"),
    wrong(L16, ZZ, "edges c n // (2 world)", [
        ("    sizes = [base + (1 if c < extra else 0) for c in range(chunks)]",
         "    sizes = [(c + 1) * n // chunks - c * n // chunks for c in range(chunks)]")],
          "leftover"),
    wrong(L16, RM, "lse grown with o's difference", [
        ("lse_a - logsigmoid(-diff)", "lse_a - logsigmoid(diff)")], "other way round"),
    wrong(L16, RM, "an empty a keeps its own o", [
        ("np.where(a_empty, 1.0, sigmoid(diff))", "np.where(a_empty, 0.0, sigmoid(diff))")],
          "wrong only in rows"),
    right(L16, RM, "max subtracted by hand, lists returned", [
        ("    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)",
         "    m = np.maximum(lse_a, lse_b)\n"
         "    m = np.where(np.isneginf(m), 0.0, m)\n"
         "    ea, eb = np.exp(lse_a - m), np.exp(lse_b - m)\n"
         "    tot = np.where(ea + eb > 0, ea + eb, 1.0)\n"
         "    o = (ea[..., None] * o_a + eb[..., None] * o_b) / tot[..., None]\n"
         "    with np.errstate(divide='ignore'):\n"
         "        lse = np.where(ea + eb > 0, m + np.log(tot), -np.inf)\n"
         "    return [o, lse]\n"
         "    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)")]),
    wrong(L16, RW, "ring turning backwards", [("(r - s) % world]", "(world + r + s) % world]")],
          "wrong way"),
    wrong(L16, RW, "diagonal left out", [("keys[None, :] <= positions[r][:, None]",
                                           "positions[r][:, None] > keys[None, :]")], "diagonal"),
    right(L16, RM, "logaddexp and exp of differences, guarded", [
        ("    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)",
         "    lse = np.logaddexp(lse_a, lse_b)\n"
         "    safe = np.where(np.isneginf(lse), 0.0, lse)\n"
         "    wa = np.exp(np.where(np.isneginf(lse_a), -np.inf, lse_a - safe))\n"
         "    return wa[..., None] * o_a + (1.0 - wa)[..., None] * o_b, lse\n"
         "    a_empty, b_empty = np.isneginf(lse_a), np.isneginf(lse_b)")]),
    right(L16, ZZ, "np.array_split of the positions", [
        ("    chunks = 2 * world\n",
         "    parts = np.array_split(np.arange(n), 2 * world)\n"
         "    b = [(int(p[0]), int(p[-1]) + 1) for p in parts]\n"
         "    return [[b[r], b[2 * world - 1 - r]] for r in range(world)]\n"
         "    chunks = 2 * world\n")]),
    right(L16, RW, "closed form per range pair", [
        ("    positions = [np.concatenate",
         "    def seen(qa, qb, ka, kb):\n"
         "        i = np.arange(qa, qb)\n"
         "        return int(np.clip(np.minimum(kb, i + 1) - ka, 0, None).sum())\n"
         "    return np.array([[sum(seen(*qr, *kr) for qr in layout[r]\n"
         "                          for kr in layout[(r - s) % world])\n"
         "                      for s in range(world)] for r in range(world)])\n"
         "    positions = [np.concatenate")]),
]

CASES = LAB02 + LAB03 + LAB04 + LAB09 + LAB11 + LAB12 + LAB14 + LAB15 + LAB16
