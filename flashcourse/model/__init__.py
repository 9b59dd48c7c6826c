"""A small character-level GPT in numpy whose attention is the course's own (notebook 13).

    layers     Embedding, LayerNorm, Linear, GELU, MLP, cross_entropy: forward + backward
    attention  causal self-attention; inner attention "dense" (keeps P), "tiled" (the
               course's `flashcourse.tiled` forward and backward, keeps O and lse) or
               "variants" (`flashcourse.variants.tiled` driven by a block mask); the
               document mask of packed rows
    adamw      AdamW and gradient clipping
    gpt        the model, `train` and `generate`
    text       the shipped public-domain text, its character tokenizer, random windows
               and packed rows of whole sentences (cu_seqlens)
"""
