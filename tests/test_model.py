"""The numpy GPT of notebook 13 (flashcourse.model): every backward against central
differences in float64, and the GPT trained with the course's tiled attention against the
same GPT with dense attention, step by step."""

import numpy as np
import pytest

from flashcourse.model import adamw, attention, gpt, layers, text

RNG = np.random.default_rng(13)
#: central differences with h = 1e-6 in float64 are good to about h^2 + 1e-16 / h ~ 1e-10
#: absolute; a wrong formula is off by O(1)
FD_H, FD_RTOL = 1e-6, 1e-6


def numeric_grad(f, x, h=FD_H):
    """d f / d x by central differences, f a scalar function of the array x (changed in place)."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        old = x[idx]
        x[idx] = old + h
        fp = f()
        x[idx] = old - h
        fm = f()
        x[idx] = old
        g[idx] = (fp - fm) / (2 * h)
    return g


def rel(a, b):
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-300))


def check_layer(layer, x, *, call=None):
    """A random linear loss L = sum(y * w) of the layer's output: its backward's dx and
    parameter gradients against central differences."""
    call = call or layer.forward
    y = call(x)
    w = RNG.standard_normal(y.shape)
    loss = lambda: float((call(x) * w).sum())
    layer.zero_grad()
    call(x)
    dx = layer.backward(w)
    assert rel(dx, numeric_grad(loss, x)) < FD_RTOL
    for name, p in layer.params.items():
        assert rel(layer.grads[name], numeric_grad(loss, p)) < FD_RTOL, name


def test_layernorm_linear_gelu_mlp_backward_match_finite_differences():
    x = RNG.standard_normal((2, 3, 5))                     # odd sizes
    ln = layers.LayerNorm(5, np.float64)
    ln.params["g"][:] = RNG.standard_normal(5)
    ln.params["b"][:] = RNG.standard_normal(5)
    check_layer(ln, x)
    lin = layers.Linear(5, 7, RNG, np.float64, std=1.0)
    lin.params["b"][:] = RNG.standard_normal(7)
    check_layer(lin, x)
    check_layer(layers.GELU(), 3 * x)                       # the curved part too
    check_layer(layers.MLP(5, RNG, np.float64, proj_std=0.5), x)


def test_embedding_backward_sums_repeated_ids():
    emb = layers.Embedding(4, 3, RNG, np.float64)
    idx = np.array([[0, 2, 2], [3, 0, 2]])
    dy = RNG.standard_normal((2, 3, 3))
    emb.forward(idx)
    emb.backward(dy)
    want = np.zeros((4, 3))
    for (b, t), i in np.ndenumerate(idx):
        want[i] += dy[b, t]
    assert np.array_equal(emb.grads["W"], want)


def test_cross_entropy_gradient_and_value():
    logits = RNG.standard_normal((6, 5))
    y = RNG.integers(0, 5, 6)
    loss, d = layers.cross_entropy(logits, y)
    p = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    assert loss == pytest.approx(-np.log(p[np.arange(6), y]).mean(), rel=1e-14)
    num = numeric_grad(lambda: layers.cross_entropy(logits, y)[0], logits)
    assert rel(d, num) < FD_RTOL
    with pytest.raises(ValueError, match=r"targets must be token ids in \[0, 5\)"):
        layers.cross_entropy(logits, np.array([0, 1, 2, 3, 4, 5]))
    with pytest.raises(ValueError, match="logits"):
        layers.cross_entropy(logits, y[:3])


@pytest.mark.parametrize("name", ["dense", "tiled"])
def test_causal_self_attention_backward(name):
    """T = 7 with 3 x 3 tiles: ragged, causal, head dim 3 (odd)."""
    inner = attention.make_attention(name, block_q=3, block_k=3)
    layer = attention.CausalSelfAttention(6, 2, inner, RNG, np.float64, proj_std=0.3)
    for lin in (layer.qkv, layer.proj):
        lin.params["W"][:] = RNG.standard_normal(lin.params["W"].shape) * 0.5
    x = RNG.standard_normal((2, 7, 6))
    y = layer.forward(x)
    w = RNG.standard_normal(y.shape)
    loss = lambda: float((layer.forward(x) * w).sum())
    for lin in (layer.qkv, layer.proj):
        lin.zero_grad()
    layer.forward(x)
    dx = layer.backward(w)
    assert rel(dx, numeric_grad(loss, x)) < FD_RTOL
    for lin in (layer.qkv, layer.proj):
        for pname, p in lin.params.items():
            assert rel(lin.grads[pname], numeric_grad(loss, p)) < FD_RTOL


def test_dense_and_tiled_inner_attention_agree_with_the_reference():
    from flashcourse import reference
    q, k, v = (RNG.standard_normal((2, 3, 11, 5)) for _ in range(3))
    do = RNG.standard_normal((2, 3, 11, 5))
    o_ref, _ = reference.attention(q, k, v, causal=True)
    g_ref = reference.attention_backward(q, k, v, do, causal=True)
    for name in ("dense", "tiled"):
        a = attention.make_attention(name, block_q=4, block_k=3)
        assert rel(a.forward(q, k, v), o_ref) < 1e-13
        for g, r in zip(a.backward(do), g_ref):
            assert rel(g, r) < 1e-13


def tiny_model(attn, dtype="float64", seed=0, vocab=11):
    cfg = gpt.GPTConfig(vocab_size=vocab, block_size=9, n_layer=2, n_head=2, n_embd=6,
                        attention=attn, block_q=4, block_k=3, dtype=dtype)
    return gpt.GPT(cfg, seed=seed)


def test_whole_gpt_backward_matches_finite_differences():
    model = tiny_model("tiled")
    for _, p, _ in model.parameters():                      # larger weights: curved regime
        p += 0.3 * RNG.standard_normal(p.shape)
    x = RNG.integers(0, 11, (2, 9))
    y = RNG.integers(0, 11, (2, 9))
    model.zero_grad()
    model.forward(x, y)
    model.backward()
    loss = lambda: model.forward(x, y)[1]
    for name, p, g in model.parameters():
        assert rel(g, numeric_grad(loss, p)) < FD_RTOL, name


def test_adamw_step_matches_the_formula():
    p = RNG.standard_normal((3, 4))
    b = RNG.standard_normal(4)
    gp, gb = RNG.standard_normal((3, 4)), RNG.standard_normal(4)
    p0, b0 = p.copy(), b.copy()
    opt = adamw.AdamW([("p", p, gp), ("b", b, gb)], lr=0.1, betas=(0.9, 0.95), eps=1e-8,
                      weight_decay=0.1)
    opt.step()
    # step 1: m/(1-b1) = g, v/(1-b2) = g^2, so the step is lr * g / (|g| + eps)
    assert np.allclose(p, p0 * (1 - 0.01) - 0.1 * gp / (np.abs(gp) + 1e-8), rtol=1e-14)
    assert np.allclose(b, b0 - 0.1 * gb / (np.abs(gb) + 1e-8), rtol=1e-14)   # no decay
    g = [np.full(3, 3.0), np.full(1, 4.0)]
    assert adamw.clip_grad_norm(g, 1.0) == pytest.approx(np.sqrt(27 + 16))
    assert np.sqrt(sum((x ** 2).sum() for x in g)) == pytest.approx(1.0, rel=1e-5)


@pytest.mark.slow
def test_tiled_and_dense_gpt_train_to_the_same_losses_float64():
    """Done-when of the capstone: one seed, 100 AdamW steps, every step's loss equal to
    1e-10 relative (float64); the tiled model really used tiles (T = 9, 4 x 3 tiles)."""
    ids = np.tile(RNG.integers(0, 11, 13), 30)              # a learnable, periodic text
    hist = {a: gpt.train(tiny_model(a), ids, steps=100, batch=4, lr=1e-2, seed=3)
            for a in ("tiled", "dense")}
    t, d = np.array(hist["tiled"].loss), np.array(hist["dense"].loss)
    assert np.all(np.abs(t - d) <= 1e-10 * np.abs(d)), np.max(np.abs(t - d) / d)
    assert d[-10:].mean() < d[0] - 0.1                      # it learned something


@pytest.mark.slow
def test_tiled_and_dense_gpt_float32_within_rounding():
    """float32: per-step losses within float32 rounding of the float64 run's (the two
    float32 runs round differently, so each is compared with float64 at 3e-5 relative,
    about 250 float32 epsilons after 100 steps of AdamW; measured: 1e-6 to 3e-6)."""
    ids = np.tile(RNG.integers(0, 11, 13), 30)
    ref = np.array(gpt.train(tiny_model("dense"), ids, steps=100, batch=4, lr=1e-2,
                             seed=3).loss)
    for a in ("tiled", "dense"):
        got = np.array(gpt.train(tiny_model(a, "float32"), ids, steps=100, batch=4, lr=1e-2,
                                 seed=3).loss)
        assert np.all(np.abs(got - ref) <= 3e-5 * ref), (a, np.max(np.abs(got - ref) / ref))


def test_memory_kept_for_backward_dense_keeps_p_tiled_keeps_lse():
    x = RNG.integers(0, 11, (3, 9))
    kept = {}
    for a in ("dense", "tiled"):
        m = tiny_model(a)
        m.forward(x, x)
        kept[a] = m.saved_bytes()
    b, h, t, hd, layers_ = 3, 2, 9, 3, 2
    qkv = 3 * b * h * t * hd * 8
    assert kept["dense"]["attention"] == layers_ * (qkv + b * h * t * t * 8)          # P
    assert kept["tiled"]["attention"] == layers_ * (qkv + b * h * t * hd * 8 + b * h * t * 8)
    assert kept["dense"]["other"] == kept["tiled"]["other"]


def test_text_is_shipped_and_tokenizes_round_trip():
    s = text.load_text()
    assert 50_000 < len(s) < 300_000 and "gutenberg" not in s.lower()
    assert s.startswith("BARTLEBY, THE SCRIVENER.")
    tok = text.CharTokenizer(s)
    assert tok.decode(tok.encode(s[:500])) == s[:500]
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("\u00e9")
    x, y = text.get_batch(tok.encode(s), 4, 16, np.random.default_rng(0))
    assert x.shape == y.shape == (4, 16) and np.array_equal(x[:, 1:], y[:, :-1])


def test_strip_gutenberg_keeps_the_body_only():
    raw = ("The Project Gutenberg EBook of X\r\n\r\n*** START OF THIS PROJECT GUTENBERG "
           "EBOOK X ***\r\n\r\nProduced by Someone\r\n\r\nCall me Ishmael.\r\n\r\nEnd of "
           "Project Gutenberg's X\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nlicence")
    assert text.strip_gutenberg(raw) == "Call me Ishmael.\n"
    with pytest.raises(ValueError, match="START OF"):
        text.strip_gutenberg("no markers")


def test_bad_configuration_and_input_get_one_clear_error():
    with pytest.raises(ValueError, match="n_embd must be a multiple of n_head"):
        gpt.GPTConfig(vocab_size=5, n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="attention must be one of"):
        gpt.GPTConfig(vocab_size=5, attention="flash")
    with pytest.raises(ValueError, match="dtype must be one of"):
        gpt.GPTConfig(vocab_size=5, dtype="float16")
    m = tiny_model("tiled")
    with pytest.raises(ValueError, match="more than block_size"):
        m.forward(np.zeros((1, 10), dtype=int))
    with pytest.raises(ValueError, match="integer token ids"):
        m.forward(np.zeros((1, 3)))
    with pytest.raises(RuntimeError, match="forward with targets"):
        m.backward()


def test_generate_extends_the_prompt_within_the_vocabulary():
    m = tiny_model("tiled")
    out = gpt.generate(m, [1, 2, 3], 12, seed=0)
    assert out.shape == (15,) and list(out[:3]) == [1, 2, 3] and out.max() < 11
    assert np.array_equal(out, gpt.generate(m, [1, 2, 3], 12, seed=0))
