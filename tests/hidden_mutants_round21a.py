# ruff: noqa: E501  (the edits quote the solution notebooks line for line)
"""Hidden mutants of labs 02, 03, 04, 06 and 09 tried in review round 21 a
(REVIEW_2026-12-08_round21_a.md): see hidden_mutants.py. Wrong: each got the generic hint
before; right: unusual correct solutions that must keep passing."""

from __future__ import annotations

from hidden_mutants import right, wrong
from hidden_mutants_cuda import L06
from hidden_mutants_numpy import FA1, FB, FBQ, FF, L02, L03, L04, L09, MP, MS, OU

_DS = "ds = p * (dp - delta[q0:q1, None])                  # (Br, Bc)"
_DQ_PASS = "dq[q0:q1] += scale * ((p * (do_i @ v[k0:k1].T - delta_i[:, None])) @ k[k0:k1])"
CASES = [
    wrong(L03, FF, "running max never stored", [("            m = m_new\n", "")], "never updated",
          where=FF),
    wrong(L09, FB, "dS written D - dP", [(_DS, "ds = p * (delta[q0:q1, None] - dp)")], "wrong sign"),
    wrong(L09, FB, "dV from dS", [
        ("            dv_j += p.T @ do_i                                  # (Bc, d)\n", ""),
        (_DS, _DS + "\n            dv_j += ds.T @ do_i")], "dV_j is built from dS"),
    wrong(L09, FB, "dK from dO", [("dk_j += scale * (ds.T @ q_i)", "dk_j += scale * (ds.T @ do_i)")],
          "gradient of K takes"),
    wrong(L09, FBQ, "dS written D - dP", [
        (_DQ_PASS, _DQ_PASS.replace("do_i @ v[k0:k1].T - delta_i[:, None]",
                                    "delta_i[:, None] - do_i @ v[k0:k1].T"))], "wrong sign"),
    wrong(L04, "fa2", "O read back once per key block", [
        ("read_bytes = Tq * d * e + Tr * 2 * Tk * d * e",
         "read_bytes = Tq * d * e + Tr * 2 * Tk * d * e + -(-Tk // Bc) * Tq * d * e")],
          "array once per key block"),
    wrong(L03, FA1, "merge weights without the stand-in", [
        ("a_old, a_t = np.exp(m_i - m_use), np.exp(m_t - m_use)",
         "a_old, a_t = np.exp(m_i - m_new), np.exp(m_t - m_new)")], "without the finite stand-in"),
    wrong(L03, FF, "lse started at 0", [
        ("o, lse = np.zeros((t_q, d)), np.full(t_q, -np.inf)          # (Tq, d), (Tq,)",
         "o, lse = np.zeros((t_q, d)), np.zeros(t_q)")], "lse is not -inf"),
    wrong(L03, FA1, "lse 0 where l = 0", [
        ("lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)",
         "lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), 0.0)")], "lse is not -inf"),
    right(L03, FF, "running max started at -1e30", [
        ("m = np.full(q1 - q0, -np.inf)                           # (Br,) running max",
         "m = np.full(q1 - q0, -1e30)")]),
    right(L03, FA1, "outer-memory max started at -1e30", [
        ("np.zeros(t_q), np.full(t_q, -np.inf)   # outer memory",
         "np.zeros(t_q), np.full(t_q, -1e30)   # outer memory")]),
    right(L09, FB, "stand-in 0 for an empty row's lse (its scores are all -inf)", [
        ("lse_i = np.where(np.isneginf(lse[q0:q1]), np.inf, lse[q0:q1])   # empty rows: P = 0",
         "lse_i = np.where(np.isneginf(lse[q0:q1]), 0.0, lse[q0:q1])")]),
    right(L02, OU, "stand-in 1.0 from isfinite", [
        ("m_safe = np.where(m_new == -np.inf, 0.0, m_new)",
         "m_safe = np.where(np.isfinite(m_new), m_new, 1.0)")]),
    right(L02, MS, "sums merged in log space", [
        ("l = l_a * np.exp(m_a - m_safe) + l_b * np.exp(m_b - m_safe)",
         "l = np.exp(np.logaddexp(np.log(l_a) + m_a, np.log(l_b) + m_b) - m_safe)")]),
    right(L03, FF, "k_end = q1 + offset, not clipped", [
        ("k_end = max(0, min(t_k, q1 + offset))", "k_end = q1 + offset")]),
    right(L03, FA1, "lse unguarded, merge weights regrouped", [
        ("lse = np.where(seen, m + np.log(np.where(seen, l, 1.0)), -np.inf)", "lse = m + np.log(l)"),
        ("o[q0:q1] = ((a_old * l_i)[:, None] * o[q0:q1] + a_t[:, None] * (p @ v_j)) / l_div",
         "o[q0:q1] = (a_old[:, None] * l_i[:, None] * o[q0:q1] + (a_t[:, None] * p) @ v_j) / l_div")]),
    right(L03, MP, "w_b = 1 - w_a, lse by logaddexp.reduce", [
        ("lse = np.logaddexp(lse_a, lse_b)                            # (Tq,)",
         "lse = np.logaddexp.reduce(np.stack([lse_a, lse_b]), axis=0)"),
        ("w_a, w_b = np.exp(lse_a - lse_use), np.exp(lse_b - lse_use)",
         "w_a = np.exp(lse_a - lse_use)\n    w_b = 1.0 - w_a")]),
    right(L04, "causal", "visible test written k0 < q1 + Tk - Tq", [
        ("if k0 <= q1 - 1 + Tk - Tq:", "if k0 < q1 + Tk - Tq:")]),
    right(L09, FB, "q_start not rounded to a block, dV as (dO^T P)^T", [
        ("q_start = max(0, k0 - offset) // block_q * block_q", "q_start = max(0, k0 - offset)"),
        ("dv_j += p.T @ do_i", "dv_j += (do_i.T @ p).T")]),
    right(L06, "row_reductions", "max butterfly with ascending offsets", [
        ("    offset = CT // 2\n    while offset > 0:\n        x = max(x, shfl_xor(x, offset, scratch, tid))\n        offset //= 2",
         "    offset = 1\n    while offset < CT:\n        x = max(x, shfl_xor(x, offset, scratch, tid))\n        offset *= 2")]),
]
