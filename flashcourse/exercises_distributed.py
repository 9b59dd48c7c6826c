"""exercises_distributed: notebook 16's two exercises, functions the learner writes, checked
the way the labs check theirs (`labs._harness`: yours against expected, each typical mistake
replayed on the case's inputs and named by its own hint). Lab 16 has its own parts (the
merge, the zigzag map); these are others.

Exercise 1, when the ring hides the link. The learner writes

    ring_break_even(flops_per_s, link_bytes_per_s, element_bytes, heads, kv_heads) -> float

the positions per rank c = n / world above which one (non-causal) ring step's compute,
4 c^2 d H / F, is at least its transfer of one K and one V block, 2 c H_kv d e / B:
c = F e H_kv / (2 B H). Compared with `distributed.model.min_hidden_shard` times H_kv / H,
within one position (a count of positions may be returned rounded, up or down).

Exercise 2, bytes per rank of the three designs. The learner writes

    comm_bytes(design, n, world, heads, kv_heads, d, element_bytes) -> float

for "ring", "allgather" and "ulysses", compared with
`distributed.designs.comm_bytes_per_rank`.
"""

from __future__ import annotations

import numpy as np

from .distributed.designs import comm_bytes_per_rank, kv_heads_per_rank
from .distributed.model import min_hidden_shard
from .labs._harness import Case, Result, mistake_diagnoses, real_array, run_checks

# -- exercise 1: the break-even block --------------------------------------------------------

HINT_EVEN = ("Compare with the rule: set 4 c^2 d H / F (the step's FLOPs over the FLOP rate) "
             "equal to 2 c H_kv d e / B (one K and one V block over the link) and solve for c: "
             "c = F e H_kv / (2 B H). d cancels.")
HINT_EVEN_NO_GQA = ("Yours is F e / (2 B): right for H_kv = H, but with grouped-query "
                    "attention only H_kv heads of K and V travel while all H query heads "
                    "compute. Multiply by H_kv / H.")
HINT_EVEN_GQA_INVERTED = ("Your GQA factor is upside down: fewer K/V heads mean fewer bytes, "
                          "so shorter blocks suffice. The factor is H_kv / H (at most 1).")
HINT_EVEN_ONE_TENSOR = ("Yours is half the right block: the ring sends K and V, two blocks of "
                        "c H_kv d e bytes each, per step.")
HINT_EVEN_HALF_OR_NO_E = ("Yours is half the right block. Either only one of K and V travels "
                          "in yours (the ring sends both, two blocks of c H_kv d e bytes each "
                          "per step), or the element size e (here 2 bytes, fp16/bf16) is "
                          "missing from your bytes: c = F e H_kv / (2 B H).")
HINT_EVEN_ONE_MATMUL = ("Yours is twice the right block: the forward does two products, "
                        "S = QK^T and O = PV, each 2 c^2 d FLOPs per head: 4 c^2 d H in all.")
HINT_EVEN_INVERTED = ("Yours is upside down: a faster link (larger B) must need shorter "
                      "blocks, a faster GPU (larger F) longer ones. c = F e H_kv / (2 B H).")


EVEN_STEPS = ("Step by step: the step computes 4 c^2 d H FLOPs (two products of 2 c^2 d per "
              "head) at F FLOP/s, and sends 2 c H_kv d e bytes (one K and one V block) at B "
              "bytes/s; set the two times equal, divide both sides by c d, and solve for c: "
              "the result is a product of F, e and H_kv over 2, B and H.")


def _level2(diagnoses, text):
    """The diagnoses with `text` as their second, more explicit level."""
    return [d if len(d) > 2 else (*d, text) for d in diagnoses]


def _even_mistake(f, b, e, h, hkv, mistake):
    right = min_hidden_shard(element_bytes=e, flops_per_s=f, link_bytes_per_s=b) * hkv / h
    return {None: right, "no gqa": right * h / hkv, "gqa inverted": right * (h / hkv) ** 2,
            "one tensor": right / 2, "one matmul": right * 2,
            "inverted": 2.0 * b * h / (f * e * hkv)}[mistake]


MISTAKES_EVEN = [("no gqa", (HINT_EVEN_NO_GQA,)), ("gqa inverted", (HINT_EVEN_GQA_INVERTED,)),
                 ("one tensor", (HINT_EVEN_ONE_TENSOR,)), ("one matmul", (HINT_EVEN_ONE_MATMUL,)),
                 ("inverted", (HINT_EVEN_INVERTED,))]


def _close(yours, want, atol=0.0) -> bool:
    try:
        y = np.asarray(yours, np.float64)
    except (TypeError, ValueError):
        return False
    return y.shape == np.shape(want) and np.allclose(y, want, rtol=1e-9, atol=atol)


def _close_position(yours, want) -> bool:
    """Within one position: a break-even block rounded (up, down or to nearest) is right."""
    return _close(yours, want, atol=1.0)


def _even_case(name, f, b, e, h, hkv):
    # with e = 2, leaving out e halves the block exactly as sending only K does
    mistakes = [(m, (HINT_EVEN_HALF_OR_NO_E,) if m == "one tensor" and e == 2 else hint)
                for m, hint in MISTAKES_EVEN]
    diagnoses = mistake_diagnoses(lambda m: _even_mistake(f, b, e, h, hkv, m), mistakes,
                                  _close_position)

    def run(fn):
        return real_array(fn(f, b, e, h, hkv)), _even_mistake(f, b, e, h, hkv, None)
    return Case(name, run, HINT_EVEN, _level2(diagnoses, EVEN_STEPS), rtol=1e-9, atol=1.0,
                hint2=EVEN_STEPS)


EVEN_CASES = [("H100 dense fp16 (989 TFLOP/s), NVLink 450 GB/s, H = H_kv = 32",
               989e12, 450e9, 2, 32, 32),
              ("the same over PCIe Gen5 (64 GB/s), GQA H = 32, H_kv = 8", 989e12, 64e9, 2, 32, 8),
              ("fp8 (1 byte), 1979 TFLOP/s, 100 GB/s, H = 12, H_kv = 4",
               1979e12, 100e9, 1, 12, 4)]


def check_ring_break_even(ring_break_even, *, verbose: bool = True,
                          hint_level: int = 1) -> Result:
    """Check `ring_break_even(flops_per_s, link_bytes_per_s, element_bytes, heads, kv_heads)`."""
    cases = [_even_case(*c) for c in EVEN_CASES]
    return run_checks("ring_break_even(F, B, e, H, H_kv)", ring_break_even, cases,
                      verbose=verbose, hint_level=hint_level)


def reference_ring_break_even(flops_per_s, link_bytes_per_s, element_bytes, heads, kv_heads):
    """The solution."""
    return flops_per_s * element_bytes * kv_heads / (2.0 * link_bytes_per_s * heads)


# -- exercise 2: bytes per rank ---------------------------------------------------------------

HINT_BYTES = ("Compare with the rules: ring and all-gather send 2 (w - 1) (n / w) H_kv d e "
              "(every other rank's K and V once); Ulysses sends (w - 1) (n / w) d e (2 H / w + "
              "2 H_kv / w): each all-to-all keeps 1 / w of what the rank holds and sends the "
              "rest, for Q and K, V in, and O out.")
HINT_BYTES_W_STEPS = ("You counted w blocks, the whole sequence's K and V (2 n H_kv d e): a "
                      "rank already holds its own n / w positions, so w - 1 blocks travel (a "
                      "ring needs w - 1 steps; an all-gather brings the other w - 1 shards).")
HINT_BYTES_Q_HEADS = ("You sent H heads of K and V: only the H_kv key/value heads exist to send "
                      "(grouped-query attention shares each among H / H_kv query heads).")
HINT_BYTES_ONLY_K = ("Only K travels in yours: V goes around the ring (or the all-gather) too, "
                     "2 tensors.")
HINT_BYTES_NO_E = ("Yours counts elements, not bytes: multiply by the element size e "
                   "(element_bytes: 2 for fp16/bf16, 4 for fp32).")
HINT_BYTES_HALF_OR_NO_E = ("Yours is half the right count. Either only K travels in yours (V "
                           "goes around the ring, or through the all-gather, too: 2 tensors), "
                           "or the element size e (here 2 bytes, fp16/bf16) is missing: "
                           "2 (w - 1) (n / w) H_kv d e bytes.")
HINT_BYTES_NO_OUT = ("Your Ulysses leaves out the all-to-all that brings O back to sequence "
                     "shards: (w - 1) (n / w) (H / w) d e more.")
HINT_BYTES_ULYSSES_RING = ("Your Ulysses sends what the ring sends (every other rank's K and V): "
                           "Ulysses' all-to-alls move Q, K and V in and O out, and each rank "
                           "keeps 1 / w of every tensor: (w - 1) (n / w) d e (2 H / w + "
                           "2 H_kv / w).")
HINT_BYTES_KEEP = ("Your Ulysses sends all it holds: in an all-to-all a rank keeps its own "
                   "1 / w share, so it sends (w - 1) / w of its data.")


BYTES_STEPS = ("Step by step: a rank holds rows = n / w positions. Ring and all-gather: each of "
               "the w - 1 other ranks' blocks passes once, K and V, H_kv heads of d elements of "
               "e bytes each, for rows positions. Ulysses: of its rows positions of Q (H heads), "
               "K and V (H_kv heads each) and later of O (H heads) a rank keeps 1 / w and sends "
               "(w - 1) / w; multiply by d e.")


def _bytes_mistake(design, n, w, h, hkv, d, e, mistake):
    right = comm_bytes_per_rank(design, n, w, heads=h, kv_heads=hkv, d=d, element_bytes=e)
    rows = n / w
    if mistake is None:
        return right
    if mistake == "no e":
        return right / e
    if design in ("ring", "allgather"):
        return {"w steps": right * w / (w - 1), "q heads": right * h / hkv,
                "only k": right / 2}.get(mistake, right)
    kv = kv_heads_per_rank(hkv, w)
    return {"no out": (w - 1) * rows * d * e * (h / w + 2 * kv),
            "keep": w * rows * d * e * (2 * h / w + 2 * kv),
            "q heads": (w - 1) * rows * d * e * (2 * h / w + 2 * h / w),
            "only k": (w - 1) * rows * d * e * (2 * h / w + kv),
            "ring formula": 2.0 * (w - 1) * rows * hkv * d * e}.get(mistake, right)


MISTAKES_BYTES = [("w steps", (HINT_BYTES_W_STEPS,)), ("q heads", (HINT_BYTES_Q_HEADS,)),
                  ("only k", (HINT_BYTES_ONLY_K,)), ("no e", (HINT_BYTES_NO_E,)),
                  ("no out", (HINT_BYTES_NO_OUT,)), ("keep", (HINT_BYTES_KEEP,)),
                  ("ring formula", (HINT_BYTES_ULYSSES_RING,))]


def _bytes_case(design, n, w, h, hkv, d, e):
    args = (design, n, w, h, hkv, d, e)
    # with e = 2, leaving out e halves the ring's bytes exactly as sending only K does
    half = e == 2 and design in ("ring", "allgather")
    mistakes = [(m, (HINT_BYTES_HALF_OR_NO_E,) if half and m in ("only k", "no e") else hint)
                for m, hint in MISTAKES_BYTES]
    diagnoses = mistake_diagnoses(lambda m: _bytes_mistake(*args, m), mistakes, _close)
    name = f"{design}: n = {n:,}, w = {w}, H = {h}, H_kv = {hkv}, d = {d}, e = {e}"

    def run(fn):
        return real_array(fn(*args)), _bytes_mistake(*args, None)
    return Case(name, run, HINT_BYTES, _level2(diagnoses, BYTES_STEPS), rtol=1e-9, atol=0.0,
                hint2=BYTES_STEPS)


# Each learner's first failure is one whose hint names their own slip: the fp32 ring case
# (e = 4) comes first, where leaving out e (a quarter) and sending only K (a half) differ,
# as they do not with e = 2; the small GQA Ulysses case comes before the 131,072 one, where
# the ring's count for Ulysses equals Ulysses with H heads of K and V (2 H_kv = 4 H / w)
BYTES_CASES = [("ring", 1000, 4, 4, 4, 64, 4), ("ring", 131072, 8, 32, 8, 128, 2),
               ("allgather", 131072, 8, 32, 8, 128, 2),
               ("ulysses", 24576, 4, 16, 4, 64, 2), ("ulysses", 131072, 8, 32, 8, 128, 2),
               ("ulysses", 1000, 4, 4, 4, 64, 4), ("allgather", 24576, 3, 6, 2, 80, 2)]


def check_comm_bytes(comm_bytes, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """Check `comm_bytes(design, n, world, heads, kv_heads, d, element_bytes)`."""
    cases = [_bytes_case(*c) for c in BYTES_CASES]
    return run_checks("comm_bytes(design, n, world, H, H_kv, d, e)", comm_bytes, cases,
                      verbose=verbose, hint_level=hint_level)


def reference_comm_bytes(design, n, world, heads, kv_heads, d, element_bytes):
    """The solution (for world dividing kv_heads)."""
    rows = n / world
    if design in ("ring", "allgather"):
        return 2.0 * (world - 1) * rows * kv_heads * d * element_bytes
    return (world - 1) * rows * d * element_bytes * (2 * heads + 2 * kv_heads) / world


HINTS = tuple(v for k, v in dict(globals()).items()
              if k.startswith("HINT_") or k.endswith("_STEPS"))
