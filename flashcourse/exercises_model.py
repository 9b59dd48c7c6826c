"""Exercise of notebook 13 (the GPT capstone): the activations attention keeps for the
backward, P of dense attention against FlashAttention's lse. Registered in `exercises`."""

from __future__ import annotations

from ._exercise import Exercise, _same_number

# -- notebook 13: the activations a GPT keeps for attention's backward ----------------------

#: exercise 13: nanoGPT's small model at its context length, a micro-batch of 8, bf16
GPT_13 = {"layers": 12, "batch": 8, "heads": 12, "t": 1024, "d": 64}


def saved_activations_13() -> Exercise:
    from .memory import saved_for_backward
    g = GPT_13
    per_head = {m: saved_for_backward(g["t"], g["t"], g["d"], method=m, bytes_per_element=2,
                                      bytes_per_score=2) for m in ("standard", "tiled")}
    copies = g["layers"] * g["batch"] * g["heads"]
    p_bytes = copies * per_head["standard"]["P"]
    lse_bytes = copies * per_head["tiled"]["L"]
    ratio = p_bytes / lse_bytes
    working = (f"(a) P: layers x B x H x T^2 x 2 B = {g['layers']} x {g['batch']} x {g['heads']}"
               f" x {g['t']}^2 x 2 = {p_bytes:,} B ({p_bytes / 2**30:.2f} GiB)\n"
               f"(b) lse: layers x B x H x T x 4 B (fp32) = {lse_bytes:,} B "
               f"({lse_bytes / 2**20:.1f} MiB)\n"
               f"(c) P / lse = T x 2 B / 4 B = {ratio:,.0f}")
    per_layer = p_bytes / g["layers"]
    return Exercise(
        "A 12-layer GPT, B = 8, H = 12, T = 1024, d = 64, bf16: the bytes that the attention "
        "of all layers keeps for the backward, (a) P of dense attention, (b) lse of "
        "FlashAttention, (c) their ratio",
        {"p_bytes": p_bytes, "lse_bytes": lse_bytes, "ratio": ratio}, working, rtol=1e-3,
        diagnoses={
            "p_bytes": [(lambda y: _same_number(y, per_layer, 1e-3),
                         "12 times too few: one layer (or one head; here H = 12 too); every "
                         "layer and every head keeps its own P"),
                        (lambda y: _same_number(y, p_bytes / g["batch"], 1e-3),
                         "8 times too few: every sequence of the batch (B = 8) keeps its own P"),
                        (lambda y: _same_number(y, 2 * p_bytes, 1e-3),
                         "bf16 stores 2 bytes per probability, not 4"),
                        (lambda y: any(_same_number(y, p_bytes / u, 1e-2)
                                       for u in (2**30, 1e9)),
                         "that is the size in GiB (or GB): give it in bytes")],
            "lse_bytes": [(lambda y: _same_number(y, lse_bytes / 2, 1e-3),
                           "lse is kept in fp32 (4 bytes per row), whatever the input type"),
                          (lambda y: _same_number(y, lse_bytes * g["d"], 1e-3),
                           "lse is one number per query row, not a row of d numbers"),
                          (lambda y: _same_number(y, lse_bytes / g["layers"], 1e-3),
                           "12 times too few: one layer (or one head; here H = 12 too); "
                           "every layer and every head keeps its own lse"),
                          (lambda y: _same_number(y, lse_bytes / g["batch"], 1e-3),
                           "8 times too few: every sequence of the batch (B = 8) keeps its "
                           "own lse"),
                          (lambda y: any(_same_number(y, lse_bytes / u, 1e-2)
                                         for u in (2**20, 1e6)),
                           "that is the size in MiB (or MB): give it in bytes")],
            "ratio": [(lambda y: _same_number(y, g["t"], 1e-3),
                       "T x s / 4 with s = 2 bytes for bf16 P and 4 for fp32 lse"),
                      (lambda y: _same_number(y, 1 / ratio, 1e-3),
                       "that is lse / P; (c) asks how many times larger P is: P / lse")],
        })
