# ruff: noqa: E501  (the edits quote the solution notebooks line for line)
"""Hidden mutants of the numpy labs 02, 03, 04 and 09 found in round 18 (MUTANTS_2026-12-07_round18.md):
see hidden_mutants.py. Kept apart from hidden_mutants_numpy.py, which is near the size limit."""

from __future__ import annotations

from hidden_mutants import right, wrong
from hidden_mutants_numpy import FA1, FB, FBQ, FF, L02, L03, L04, L09, MP, MS, OU, SS

# ---------------------------------------------------------------- round 18 (mutants report)
# wrong: each passed or got another hint before; right: unusual correct solutions tried
_FF_MASK = "                s = np.where(cols <= rows + offset, s, -np.inf)\n            ### END"
_FA1_MASK = "                s = np.where(cols <= rows + offset, s, -np.inf)\n            m_t"
CASES = [
    wrong(L02, SS, "row state started at m = 0", [
        ("m, l = np.full(rows, -np.inf), np.zeros(rows)", "m, l = np.zeros(rows), np.zeros(rows)")],
          "starts at max 0"),
    wrong(L02, OU, "exp of the max and of x taken apart", [
        ("l * np.exp(m - m_safe) + np.exp(x - m_safe)",
         "l * np.exp(m) / np.exp(m_safe) + np.exp(x) / np.exp(m_safe)")], "overflow"),
    right(L02, OU, "nan_to_num stand-in", [("m_safe = np.where(m_new == -np.inf, 0.0, m_new)",
                                            "m_safe = np.nan_to_num(m_new)")]),
    right(L02, OU, "stacked max, isinf stand-in, copy then in place", [
        ("m_new = np.maximum(m, x)", "m_new = np.max(np.stack([m, x]), axis=0)"),
        ("m_safe = np.where(m_new == -np.inf, 0.0, m_new)",
         "m_safe = np.where(np.isinf(m_new), 0, m_new)"),
        ("l_new = l * np.exp(m - m_safe) + np.exp(x - m_safe)",
         "l_new = l.copy()\n    l_new *= np.exp(m - m_safe)\n    l_new += np.exp(x - m_safe)")]),
    right(L02, MS, "fmax, nan_to_num and a guarded factor per side", [
        ("m = np.maximum(m_a, m_b)", "m = np.fmax(m_a, m_b)"),
        ("m_safe = np.where(m == -np.inf, 0.0, m)", "m_safe = np.nan_to_num(m, neginf=0.0)"),
        ("l = l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)",
         "ea = np.where(np.isneginf(m_a), 0.0, np.exp(m_a - m_safe))\n"
         "    eb = np.where(np.isneginf(m_b), 0.0, np.exp(m_b - m_safe))\n    l = l_a * ea + l_b * eb")]),
    right(L02, SS, "merge order swapped, chunks concatenated", [
        ("m, l = merge_states(m, l, m_c, l_c)", "m, l = merge_states(m_c, l_c, m, l)"),
        ("out = np.zeros((rows, n))", "pieces = []"),
        ("out[:, c0:c0 + chunk] = np.where(l[:, None] > 0, p / l_safe, 0.0)",
         "pieces.append(np.where(l[:, None] > 0, p / l_safe, 0.0))"),
        ("return out", "return np.concatenate(pieces, axis=1)")]),
    right(L02, SS, "pass 1 folds column by column through merge_states", [
        ("        m_c = part.max(axis=1)\n"
         "        l_c = np.exp(part - np.where(np.isneginf(m_c), 0.0, m_c)[:, None]).sum(axis=1)\n"
         "        m, l = merge_states(m, l, m_c, l_c)",
         "        for j in range(part.shape[1]):\n"
         "            m, l = merge_states(m, l, part[:, j], np.where(np.isneginf(part[:, j]), 0.0, 1.0))")]),
    wrong(L03, FF, "running max started at 0", [
        ("m = np.full(q1 - q0, -np.inf)                           # (Br,) running max",
         "m = np.zeros(q1 - q0)")], "starts at 0, not -inf"),
    wrong(L03, FF, "rescale factor inverted", [("alpha = np.exp(m - m_use)", "alpha = np.exp(m_use - m)")], "wrong way", where=FF),
    wrong(L03, FF, "hidden scores -1e30", [
        (_FF_MASK, _FF_MASK.replace("-np.inf", "-1e30"))], "large negative number"),
    wrong(L03, FF, "mask applied to P after the exponential", [
        (_FF_MASK, "                hide = cols > rows + offset\n            ### END"),
        ("p = np.exp(s - m_use[:, None])                      # (Br, Bc)",
         "p = np.exp(s - m_use[:, None])\n            if causal:\n"
         "                p = np.where(hide, 0.0, p)")], "applied to P after", where=FF),
    wrong(L03, FA1, "outer-memory max started at 0", [
        ("np.zeros(t_q), np.full(t_q, -np.inf)   # outer memory",
         "np.zeros(t_q), np.zeros(t_q)   # outer memory")], "starts at 0, not -inf"),
    wrong(L03, FA1, "hidden scores -1e9", [(_FA1_MASK, _FA1_MASK.replace("-np.inf", "-1e9"))], "large negative number"),
    wrong(L03, FA1, "mask applied to P after the exponential", [
        (_FA1_MASK, "                hide = cols > rows + offset\n            m_t"),
        ("            l_t = p.sum(axis=1) ",
         "            p = np.where(hide, 0.0, p) if causal else p\n            l_t = p.sum(axis=1) ")],
          "applied to P after"),
    right(L03, FF, "np.tri mask, last tile cut at k_end, k_end unclamped", [
        ("k_end = max(0, min(t_k, q1 + offset))", "k_end = q1 + offset"),
        ("k1 = min(k0 + block_k, t_k)\n            k_j, v_j = k[k0:k1], v[k0:k1]      ",
         "k1 = min(k0 + block_k, k_end)\n            k_j, v_j = k[k0:k1], v[k0:k1]      "),
        (_FF_MASK, "                s = np.where(np.tri(q1 - q0, k1 - k0, k=q0 + offset - k0,"
         " dtype=bool), s, -np.inf)\n            ### END")], where=FF),
    right(L03, FF, "key blocks in reverse, seen from m, nan_to_num", [
        ("for k0 in range(0, k_end, block_k):", "for k0 in reversed(range(0, k_end, block_k)):"),
        ("seen = l > 0 ", "seen = m > -np.inf "),
        ("o[q0:q1][seen] = acc[seen] / l[seen, None]",
         "with np.errstate(all='ignore'):\n            o[q0:q1] = np.nan_to_num(acc / l[:, None])")],
          where=FF),
    right(L03, FF, "all key blocks with a break, np.divide, loops over rows", [
        ("for k0 in range(0, k_end, block_k):",
         "for k0 in range(0, t_k, block_k):\n            if causal and k0 > q1 - 1 + offset:\n"
         "                break"),
        ("l = alpha * l + p.sum(axis=1)\n            acc = alpha[:, None] * acc + p @ v_j",
         "for i in range(q1 - q0):\n                l[i] = alpha[i] * l[i] + p[i].sum()\n"
         "                acc[i] = alpha[i] * acc[i] + p[i] @ v_j"),
        ("o[q0:q1][seen] = acc[seen] / l[seen, None]",
         "o[q0:q1] = np.divide(acc, l[:, None], out=np.zeros_like(acc), where=l[:, None] > 0)")],
          where=FF),
    right(L03, FA1, "skip written k0 >= q1 + offset, query blocks in reverse, lse unguarded", [
        ("if causal and k0 > q1 - 1 + offset:", "if causal and k0 >= q1 + offset:"),
        ("        for q0 in range(0, t_q, block_q):\n            # Step 3",
         "        for q0 in reversed(range(0, t_q, block_q)):\n            # Step 3"),
        ("lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)",
         "with np.errstate(divide='ignore'):\n        lse = m + np.log(l)")]),
    right(L03, MP, "guarded sigmoid-style weights into an empty_like loop", [
        ("w_a, w_b = np.exp(lse_a - lse_use), np.exp(lse_b - lse_use)",
         "w_a = np.where(np.isneginf(lse_a), 0.0, np.exp(lse_a - lse_use))\n"
         "    w_b = np.where(np.isneginf(lse_b), 0.0, 1.0 - w_a)"),
        ("o = w_a[:, None] * o_a + w_b[:, None] * o_b",
         "o = np.empty_like(o_a)\n    for i in range(o.shape[0]):\n"
         "        o[i] = w_a[i] * o_a[i] + w_b[i] * o_b[i]")]),
    wrong(L04, "fa2", "Tr as floor + 1", [("Tr = -(-Tq // Br)", "Tr = Tq // Br + 1")], "floor plus one"),
    wrong(L04, "fa2", "Tr left a fraction", [("Tr = -(-Tq // Br)", "Tr = Tq / Br")], "fraction"),
    wrong(L04, "backward", "Tc as floor + 1", [("Tc = -(-Tk // Bc)", "Tc = Tk // Bc + 1")], "floor plus one"),
    right(L04, "fa2", "a loop over the query blocks", [
        ("read_bytes = Tq * d * e + Tr * 2 * Tk * d * e",
         "read_bytes = 0\n    for q0 in range(0, Tq, Br):\n"
         "        read_bytes += min(Br, Tq - q0) * d * e + 2 * Tk * d * e")]),
    right(L04, "causal", "key blocks outside, query blocks inside", [
        ("    for q0 in range(0, Tq, Br):\n        q1 = min(q0 + Br, Tq)\n"
         "        for k0 in range(0, Tk, Bc):\n            k1 = min(k0 + Bc, Tk)\n"
         "            if k0 <= q1 - 1 + Tk - Tq:\n",
         "    for k0 in range(0, Tk, Bc):\n        k1 = min(k0 + Bc, Tk)\n"
         "        for q0 in range(0, Tq, Br):\n            q1 = min(q0 + Br, Tq)\n"
         "            if k0 < q1 + Tk - Tq:\n")]),
    right(L04, "causal", "the key rows each block sees, by a ceiling", [
        ("    for q0 in range(0, Tq, Br):\n        q1 = min(q0 + Br, Tq)\n        for k0 in range(0, Tk, Bc):\n"
         "            k1 = min(k0 + Bc, Tk)\n            if k0 <= q1 - 1 + Tk - Tq:\n"
         "                read_bytes += 2 * (k1 - k0) * d * e\n",
         "    for q0 in range(0, Tq, Br):\n        k_end = max(0, min(Tk, min(q0 + Br, Tq) + Tk - Tq))\n"
         "        read_bytes += 2 * min(Tk, -(-k_end // Bc) * Bc) * d * e\n")]),
    wrong(L03, FF, "q scaled in place", [
        ("    offset = t_k - t_q                                          # bottom-right alignment",
         "    q *= scale\n    offset = t_k - t_q"),
        ("s = scale * (q_i @ k_j.T)", "s = q_i @ k_j.T")], "in place", where=FF),
    wrong(L03, MP, "o_a overwritten in place", [
        ("o = w_a[:, None] * o_a + w_b[:, None] * o_b",
         "o_a *= w_a[:, None]\n    o_a += w_b[:, None] * o_b\n    o = o_a")], "in place"),
    wrong(L09, FB, "the stand-in written into the caller's lse", [
        ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])   # empty rows: P = 0",
         "lse[q0:q1][np.isneginf(lse[q0:q1])] = np.inf\n            lse_i = lse[q0:q1]")],
          "in place"),
    wrong(L09, FBQ, "the stand-in written into the caller's lse", [
        ("        lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])\n        delta_i",
         "        lse[q0:q1][np.isneginf(lse[q0:q1])] = np.inf\n        lse_i = lse[q0:q1]\n"
         "        delta_i")], "in place"),
    wrong(L09, FB, "dK_j and dV_j never stored", [("dk[k0:k1], dv[k0:k1] = dk_j, dv_j", "pass")], "all zeros"),
    right(L09, FB, "einsum D, lse stand-in 0, dk and dv added", [
        ("delta = (do * o).sum(axis=1)", "delta = np.einsum('ij,ij->i', do, o)"),
        ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])   # empty rows: P = 0",
         "lse_i = np.where(np.isneginf(lse[q0:q1]), 0.0, lse[q0:q1])"),
        ("dk[k0:k1], dv[k0:k1] = dk_j, dv_j", "dk[k0:k1] += dk_j\n        dv[k0:k1] += dv_j")]),
    right(L09, FB, "both loops in reverse, P masked after the exponential", [
        ("for q0 in range(q_start, t_q, block_q):", "for q0 in reversed(range(q_start, t_q, block_q)):"),
        ("    for k0 in range(0, t_k, block_k):\n        # Step 2",
         "    for k0 in reversed(range(0, t_k, block_k)):\n        # Step 2"),
        ("                s = np.where(cols <= rows + offset, s, -np.inf)\n"
         "            p = np.exp(s - lse_i[:, None])                      # (Br, Bc), exact P",
         "                p = np.where(cols <= rows + offset, np.exp(s - lse_i[:, None]), 0.0)\n"
         "            else:\n                p = np.exp(s - lse_i[:, None])")], where=FB),
    right(L09, FBQ, "a local dQ_i, all key blocks with a break", [
        ("dq[q0:q1] += scale * ((p * (do_i @ v[k0:k1].T - delta_i[:, None])) @ k[k0:k1])",
         "dq_i = dq[q0:q1].copy()\n"
         "            dq_i += scale * ((p * (do_i @ v[k0:k1].T - delta_i[:, None])) @ k[k0:k1])\n"
         "            dq[q0:q1] = dq_i"),
        ("for k0 in range(0, k_end, block_k):\n            k1 = min(k0 + block_k, t_k)\n            s = scale",
         "for k0 in range(0, t_k, block_k):\n            if k0 >= k_end:\n                break\n"
         "            k1 = min(k0 + block_k, t_k)\n            s = scale")], where=FBQ),
]
CASES += [
    wrong(L02, SS, "the merge's result dropped", [
        ("        m, l = merge_states(m, l, m_c, l_c)\n", "        merge_states(m, l, m_c, l_c)\n")],
          "still the empty state"),
    wrong(L02, SS, "integer output array", [
        ("out = np.zeros((rows, n))", "out = np.zeros((rows, n), dtype=int)")], "integers"),
    wrong(L02, SS, "pass 2 with the last chunk's max", [
        ("p = np.exp(x[:, c0:c0 + chunk] - m_safe)",
         "p = np.exp(x[:, c0:c0 + chunk] - np.where(np.isneginf(m_c), 0.0, m_c)[:, None])")],
          "FINAL max"),
]
