"""Packed training rows in the numpy GPT of notebook 13: several documents in one row of T
positions, the document mask (causal inside a document, nothing across), positions that
restart in each document. The course's block-mask attention ("variants") against dense
attention with the same mask as a (T, T) matrix, and the checks that no document sees
another."""

import numpy as np
import pytest

from flashcourse.model import attention, gpt, text
from flashcourse.variants import block_mask as vbm

RNG = np.random.default_rng(48)
#: T = 13 positions on 4 x 3 tiles (ragged at both ends), three documents in row 0
CU = [np.array([0, 5, 6, 13]), np.array([0, 13]), np.array([0, 2, 9, 13])]


def tiny_model(attn, dtype="float64", seed=0, vocab=11, n_layer=2):
    cfg = gpt.GPTConfig(vocab_size=vocab, block_size=13, n_layer=n_layer, n_head=2,
                        n_embd=6, attention=attn, block_q=4, block_k=3, dtype=dtype)
    model = gpt.GPT(cfg, seed=seed)
    rng = np.random.default_rng(seed + 1)       # one seed, one model, whatever the attention
    for _, p, _ in model.parameters():          # larger weights: attention not uniform
        p += 0.3 * rng.standard_normal(p.shape)
    return model


def embedding_grad(model, x, y, cu, positions):
    """dL/d(embedded input) (B, T, C) of the loss restricted to `positions` (a (B, T)
    bool array): the gradient the model sends to the token embeddings, per position."""
    model.zero_grad()
    model.forward(x, y, cu)
    model.saved["dlogits"] = np.where(positions[..., None], model.saved["dlogits"], 0.0)
    seen = {}
    wte_backward = model.wte.backward

    def record(dy):
        seen["dx"] = dy.copy()
        return wte_backward(dy)
    model.wte.backward = record
    model.backward()
    return seen["dx"]


@pytest.mark.parametrize("attn", ["variants", "dense"])
def test_a_document_gets_no_gradient_from_another_documents_loss(attn):
    """The loss at the positions of one document, differentiated with respect to every
    input position: exactly zero outside that document, non-zero inside; and without
    cu_seqlens (plain causal rows) the same gradient reaches earlier documents, so the
    check can fail."""
    model = tiny_model(attn)
    x = RNG.integers(0, 11, (3, 13))
    y = RNG.integers(0, 11, (3, 13))
    doc = np.zeros((3, 13), bool)
    doc[0, 6:13] = True                          # the third document of row 0
    dx = embedding_grad(model, x, y, CU, doc)     # (B, T, C)
    assert np.all(dx[~doc] == 0.0)
    assert np.all(np.abs(dx[doc]).sum(axis=-1) > 0)
    causal = embedding_grad(model, x, y, None, doc)
    assert np.all(np.abs(causal[0, :6]).sum(axis=-1) > 0)


@pytest.mark.parametrize("attn", ["variants", "dense"])
def test_changing_other_documents_leaves_a_documents_logits_alone(attn):
    """Finite change of the input: new tokens in the other documents of a row leave one
    document's logits unchanged to 1e-13 relative (the masked terms are exact zeros; only
    the matrix products' blocking may round differently); the same document alone in a
    row of its own gives the same logits too (its positions restart at 0)."""
    model = tiny_model(attn)
    x = RNG.integers(0, 11, (3, 13))
    logits, _ = model.forward(x, None, CU)
    x2 = x.copy()
    x2[0, :6] = (x2[0, :6] + 1 + RNG.integers(0, 9, 6)) % 11   # every other token changed
    logits2, _ = model.forward(x2, None, CU)
    ref = np.abs(logits[0, 6:]).max()
    assert np.abs(logits2[0, 6:] - logits[0, 6:]).max() <= 1e-13 * ref
    assert np.abs(logits2[0, :6] - logits[0, :6]).max() > 1e-3 * ref   # the change is real
    alone, _ = model.forward(x[:1, 6:], None, [np.array([0, 7])])
    assert np.abs(alone[0] - logits[0, 6:]).max() <= 1e-13 * ref
    causal, _ = model.forward(x2, None)          # no documents: the change leaks through
    causal_before, _ = model.forward(x, None)
    assert np.abs(causal[0, 6:] - causal_before[0, 6:]).max() > 1e-6 * ref


def test_variants_and_dense_masked_inner_attention_agree_and_skip_tiles():
    """One packed batch through the inner attentions: outputs and gradients equal to
    1e-13 relative (float64); the block-mask attention forms fewer tiles than a causal
    block mask would, and exactly the non-empty ones, forward and backward."""
    b, h, t, d = 3, 2, 13, 5
    q, k, v, do = (RNG.standard_normal((b, h, t, d)) for _ in range(4))
    dense, var = attention.make_attention("dense"), attention.make_attention("variants", 4, 3)
    o_d = dense.forward(q, k, v, CU)
    o_v = var.forward(q, k, v, CU)
    assert np.abs(o_v - o_d).max() <= 1e-13 * np.abs(o_d).max()
    for g_v, g_d in zip(var.backward(do), dense.backward(do)):
        assert np.abs(g_v - g_d).max() <= 1e-13 * np.abs(g_d).max()
    nonempty = sum(vbm.create_block_mask(attention.packed_mask(c, t), None, None, t, t, 4, 3)
                   .tiles()["full"] + vbm.create_block_mask(attention.packed_mask(c, t), None,
                                                            None, t, t, 4, 3).tiles()["partial"]
                   for c in CU)
    assert var.tiles == 2 * h * nonempty          # forward + backward, every head
    causal = vbm.create_block_mask(attention.packed_mask(np.array([0, t]), t), None, None,
                                   t, t, 4, 3).tiles()
    assert nonempty < b * (causal["full"] + causal["partial"])


@pytest.mark.slow
def test_variants_and_dense_masked_gpt_train_to_the_same_losses_float64():
    """100 AdamW steps on packed rows of short documents, one seed: every step's loss
    equal to 1e-10 relative (float64) between the course's block-mask attention and
    dense attention with the document mask as a matrix; the model learned something."""
    docs = [RNG.integers(0, 11, n) for n in (3, 5, 8, 2, 13, 6, 4, 9)]
    docs = [np.tile(dd, 4)[: 2 + (i * 5) % 12] for i, dd in enumerate(docs)]
    hist = {a: gpt.train(tiny_model(a, n_layer=1), documents=docs, steps=100, batch=3,
                         lr=1e-2, seed=3) for a in ("variants", "dense")}
    a, d = np.array(hist["variants"].loss), np.array(hist["dense"].loss)
    assert np.all(np.abs(a - d) <= 1e-10 * np.abs(d)), np.max(np.abs(a - d) / d)
    assert d[-10:].mean() < d[0] - 0.1


def test_packed_batch_holds_whole_documents_and_targets_inside_them():
    docs = [np.arange(10 * i, 10 * i + n) for i, n in enumerate((3, 7, 2, 20, 5))]
    x, y, cu = text.get_packed_batch(docs, 16, 13, np.random.default_rng(0))
    assert x.shape == y.shape == (16, 13) and len(cu) == 16
    for row in range(16):
        c = cu[row]
        assert c[0] == 0 and c[-1] == 13 and np.all(np.diff(c) > 0)
        for s, e in zip(c[:-1], c[1:]):
            first = x[row, s]
            assert first % 10 == 0                 # each document starts at its beginning
            assert np.array_equal(x[row, s:e], np.arange(first, first + e - s))
            assert np.array_equal(y[row, s:e], x[row, s:e] + 1)   # targets in the document
    pos = gpt.document_positions(cu, 13)
    assert np.array_equal(pos[0], np.concatenate([np.arange(n) for n in np.diff(cu[0])]))


def test_split_sentences():
    s = "Ah Bartleby!  Ah humanity! I said.\nNo.\nWhy? Yes..."
    assert text.split_sentences(s) == ["Ah Bartleby!", "Ah humanity!", "I said.", "No.",
                                       "Why?", "Yes..."]


def test_bad_cu_seqlens_and_packed_arguments_get_a_clear_error():
    m = tiny_model("variants")
    x = RNG.integers(0, 11, (3, 13))
    bad = {"must end at the sequence length T = 13": [CU[0], CU[1], np.array([0, 5, 12])],
           "must start at 0 and be strictly increasing": [CU[0], CU[1], np.array([0, 5, 5, 13])],
           "one array per row of the batch: 3 rows, got 2": CU[:2],
           "wrap it in a list": np.array([0, 13]),
           r"cu_seqlens\[1\] must be a 1-D integer array": [CU[0], np.array([0.0, 13.0]), CU[2]]}
    for message, cu in bad.items():
        for attn in ("variants", "dense"):
            with pytest.raises(ValueError, match=message):
                tiny_model(attn).forward(x, x, cu)
        with pytest.raises(ValueError, match=message):
            attention.make_attention("variants").forward(*(np.zeros((3, 2, 13, 4)),) * 3, cu)
    with pytest.raises(ValueError, match="causal only"):
        tiny_model("tiled").forward(x, x, CU)
    with pytest.raises(ValueError, match="causal only"):
        attention.make_attention("tiled").forward(*(np.zeros((3, 2, 13, 4)),) * 3, CU)
    with pytest.raises(ValueError, match="either ids .* or documents="):
        gpt.train(m, steps=1)
    with pytest.raises(ValueError, match=r"documents\[1\] must be a 1-D integer array of "
                                         r"at least 2 ids"):
        text.get_packed_batch([np.arange(4), np.array([3])], 2, 13, RNG)
