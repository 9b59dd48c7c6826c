"""Quiz of notebook 11 (Flash-Decoding)."""

from ..quiz import Question

QUESTIONS = [
    Question("B x H = 8 heads decode one token each (Tq = 1) on a 132-SM GPU with the "
             "FlashAttention-2 grid. How many SMs have work?",
             ["8", "132", "66", "8 x ceil(Tk / Bc)"], answer=0,
             why=("The FA2 grid has B x H x ceil(Tq / Br) = 8 x 1 blocks, one per SM; the other "
                  "124 SMs idle while each block walks all Tk keys alone."),
             feedback=("",
                       "The grid has one block per (head, query block); with Tq = 1 that is only "
                       "8 blocks, whatever the GPU's size.",
                       "Blocks are not split in half: each of the 8 blocks occupies one SM.",
                       "That is the Flash-Decoding grid, which splits the keys; the FA2 grid "
                       "does not.")),
    Question("Two splits have lse_a = 2.0 and lse_b = 2.0 (equal softmax mass). What is the "
             "combined lse, and how are o_a and o_b weighted?",
             ["2 + ln 2, and 1/2 each", "4.0, and 1/2 each", "2.0, and 1/2 each",
              "2 + ln 2, and 1 each"], answer=0,
             why=("m = 2, w_a = w_b = e^0 = 1, so lse = 2 + ln(2) and o = (o_a + o_b) / 2: "
                  "equal mass, equal weight."),
             feedback=("",
                       "The masses e^lse add, not the lse values: log(e^2 + e^2) = 2 + ln 2.",
                       "Two equal masses make twice the mass: the lse grows by ln 2.",
                       "Each split's o is already normalised; weights must sum to 1.")),
    Question("A split lies past the end of the keys. What does it contribute to the combine?",
             ["Nothing: lse_s = -inf gives weight exp(-inf - m) = 0",
              "Its o_s = 0 pulls the mean towards zero", "It makes the result NaN"],
             answer=0,
             why=("An empty split has no softmax mass. Only when every split of a row is empty "
                  "must the code guard -inf - (-inf); then o = 0 and lse = -inf."),
             feedback=("",
                       "The combine weights by softmax mass, not by count: an empty split weighs "
                       "0.",
                       "Only if EVERY split is empty does -inf - (-inf) appear; one empty split "
                       "is harmless.")),
    Question("Llama-3-8B uses 8 KV heads for 32 query heads. Against multi-head attention, "
             "its KV cache and the time to read it per token are:",
             ["4 times smaller", "the same: the query heads still read it",
              "32 times smaller", "8 times smaller"], answer=0,
             why=("G = Hq / Hkv = 4 query heads share each KV head, and a decoding kernel that "
                  "keeps a group's query heads in one block reads each K and V row once."),
             feedback=("",
                       "A kernel that keeps a group's query heads in one block reads each shared "
                       "K and V row once for all of them.",
                       "The ratio is query heads per KV head, 32 / 8, not the query head count.",
                       "8 is the number of KV heads; the saving is 32 / 8.")),
]
