"""Quiz of lab 04 (traffic)."""

from ..quiz import Question

QUESTIONS = [
    Question("In the fa2 loop, what happens to the bytes read for K and V when Br is halved?",
             ["They double", "They halve", "They stay the same", "They depend only on Bc"],
             answer=0,
             why="K and V are read in full once per query block; halving Br doubles the number "
                 "of query blocks, ceil(Tq / Br).",
             feedback=("", "Smaller query blocks mean MORE of them, each re-reading K and V.",
                       "The number of query blocks changes with Br.",
                       "Bc sets how K is cut into tiles, not how often all of K is read.")),
    Question("Which term of standard attention's traffic is absent from the tiled count?",
             ["4 Tq Tk s: writing and reading S and P", "Tq d e: reading Q",
              "Tq d e: writing O", "The FLOPs 4 Tq Tk d"],
             answer=0,
             why="Score and probability tiles live and die on chip. FLOPs are not traffic, and "
                 "they are unchanged by tiling.",
             feedback=("", "Q is still read (once per row in fa2).",
                       "O is still written once.", "FLOPs are arithmetic, not traffic.")),
    Question("A causal tile on the diagonal is partly visible. What does fa2 do with it?",
             ["Loads K_j and V_j and masks the hidden pairs on chip",
              "Skips it", "Loads only the visible rows of K_j"],
             answer=0,
             why="Only tiles hidden in full are skipped; a partial tile is loaded whole and its "
                 "hidden scores are set to -inf before the softmax update.",
             feedback=("", "Skipping it would drop visible pairs: the result would be wrong.",
                       "Different queries of the tile see different keys, so the tile is loaded "
                       "whole.")),
]
