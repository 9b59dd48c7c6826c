"""Quiz of notebook 09 (the backward pass by recomputation)."""

from ..quiz import Question

QUESTIONS = [
    Question("Doubling N (Tq = Tk = N, fixed d and tiles): what happens to the memory the "
             "backward saves by not storing P, and to the ratio of its modelled traffic with "
             "recomputation to the forward's?",
             ["The saving grows about 4x (P is N x N; lse is N numbers); the traffic ratio "
              "stays about the same",
              "Both grow about 4x",
              "The saving stays the same; the traffic ratio doubles"],
             answer=0,
             why="Storing P costs N^2 s bytes per head, against 4 N bytes for lse: the saving "
                 "grows with N^2. Both passes re-read K and V once per query block, so both "
                 "traffics grow the same way with N and their ratio hardly depends on N (only the "
                 "linear terms, which fade at large N, differ).",
             feedback=("", "The saving is quadratic, but forward and backward traffic scale "
                       "alike, so their ratio is flat in N.",
                       "P is N x N, so the saving of not storing it grows with N^2.")),
    Question("What does FlashAttention keep from the forward so that the backward can "
             "rebuild P?",
             ["O and the per-row log-sum-exp L (one number per query row)",
              "The full probability matrix P in fp16",
              "Nothing: the backward runs the whole forward again, including its online softmax"],
             answer=0,
             why=("P_ij = exp(S_ij - L_i) is exact given L; S_ij is recomputed from Q and K. "
                  "O is needed for D = rowsum(dO * O)."),
             feedback=("", "Storing P is exactly what FlashAttention avoids: N x N per head.",
                       "With L saved, one pass suffices: P = exp(S - L) needs no running max.")),
    Question("Why can dS be computed one tile at a time, although the softmax couples a whole "
             "row?",
             ["Because sum_k P_ik dP_ik equals D_i = dO_i . O_i, computed once per row up front",
              "Because the softmax Jacobian is diagonal",
              "Because the row term is small and can be dropped"],
             answer=0,
             why=("Substituting dP = dO V^T and O = P V turns the row sum into a dot product of "
                  "two rows the backward already has; nothing is dropped or approximated."),
             feedback=("", "The Jacobian is diag(p) - p p^T: the row term is what couples it.",
                       "Nothing is dropped: the backward is exact.")),
    Question("How many FLOPs does FlashAttention's backward do, compared with its forward?",
             ["2.5 times (five matrix products instead of two)",
              "2 times, the same as standard attention's backward",
              "The same: recomputation is free"],
             answer=0,
             why=("The standard backward has four products (8 n d); recomputing S adds one "
                  "(10 n d), against the forward's 4 n d."),
             feedback=("", "Recomputing S = Q K^T adds a fifth product to the standard four.",
                       "Recomputation costs arithmetic; it pays because it saves traffic.")),
    Question("A GPU kernel loops over query blocks inside one thread block per key block. "
             "Why does dQ need atomic adds or a second pass?",
             ["Every key block contributes to every dQ_i, and those blocks run concurrently",
              "Because dQ is larger than dK",
              "Because float32 cannot hold dQ"],
             answer=0,
             why=("dK_j and dV_j belong to one thread block, but dQ_i sums over all key blocks: "
                  "concurrent plain stores would lose additions."),
             feedback=("", "dQ has Tq x d entries; size is not the issue, concurrent writes "
                       "are.", "float32 holds it; the problem is lost updates.")),
]
