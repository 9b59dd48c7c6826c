"""Hidden mutants found in review round 21 (REVIEW_2026-12-08_round21.md): see hidden_mutants.py.
Kept apart from hidden_mutants_numpy.py, which is near the size limit."""

from __future__ import annotations

from hidden_mutants import right, wrong
from hidden_mutants_numpy import L15, L16

RM, ZZ, F8 = "ring_merge", "zigzag_ranges", "fp8_forward"
_RET = "    return [[bounds[r], bounds[chunks - 1 - r]] for r in range(world)]"

# wrong: each passed or got a hint naming another mistake before; right: must still pass
CASES = [
    wrong(L16, RM, "b's weight as e^d / (1 + e^d)", [
        ("np.where(a_empty, 1.0, sigmoid(diff)))",
         "np.where(a_empty, 1.0, np.exp(diff) / (1.0 + np.exp(diff))))")], "far apart"),
    wrong(L16, RM, "lse grown by np.log of a sigmoid", [
        ("lse_a - logsigmoid(-diff)", "lse_a - np.log(sigmoid(-diff))")], "far apart"),
    right(L16, RM, "b's weight as 1 / (1 + e^-d), overflowing to 0 harmlessly", [
        ("np.where(a_empty, 1.0, sigmoid(diff)))",
         "np.where(a_empty, 1.0, 1.0 / (1.0 + np.exp(-diff))))")]),
    right(L16, RM, "lse from b's side", [
        ("lse_a - logsigmoid(-diff)", "lse_b - logsigmoid(diff)")]),
    wrong(L16, ZZ, "four numbers per rank in one flat list", [
        (_RET, "    return [[*bounds[r], *bounds[chunks - 1 - r]] for r in range(world)]")],
          "one flat list"),
    wrong(L16, ZZ, "a generator of ranks", [
        (_RET, "    return ([bounds[r], bounds[chunks - 1 - r]] for r in range(world))")],
          "one entry per rank"),
    wrong(L15, F8, "scales of q and k taken before the rotation", [
        ("    if use_hadamard:\n        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n"
         "    q, k, v = (fake_quantize_blocks(x, block_scales(x, block), block)"
         " for x in (q, k, v))",
         "    scales = [block_scales(x, block) for x in (q, k, v)]\n"
         "    if use_hadamard:\n        q, k = rotate_qk(q, k, hadamard_matrix(q.shape[-1]))\n"
         "    q, k, v = (fake_quantize_blocks(x, s, block) for x, s in zip((q, k, v), scales))")],
          "before the rotation"),
]
