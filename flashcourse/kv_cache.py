"""How big the KV cache of a model is, against a GPU's memory (the readout; the explorer
is `flashcourse.widgets.kv_cache.kv_cache_explorer`).

During generation a transformer keeps, for every layer, the keys and values of every
token seen so far: the *KV cache*. Its size is

    M_kv = batch x layers x 2 x Tk x Hkv x d x e        bytes

    batch   requests decoded together         layers  transformer layers
    2       K and V                           Tk      tokens in the context (positions)
    Hkv     key/value heads per layer         d       head dimension
    e       bytes per element (2 for fp16/bf16, 1 for fp8)

Each decoding step reads all of it once (flashcourse.decode_io), so the cache sets both
how long a context fits and how fast a token can be produced: t >= M_kv / bandwidth.
The score matrix of a decoding step is only Tq x Tk = 1 x Tk per head and is never
the problem.

Model shapes (MODELS) are from the models' papers and released configurations:
    Llama-3-8B    32 layers, 32 query heads, 8 KV heads, d = 128, 8.0e9 parameters
                  (Llama Team, "The Llama 3 Herd of Models", 2024, Table 3;
                  config.json of meta-llama/Meta-Llama-3-8B)
    Llama-3-70B   80 layers, 64 query heads, 8 KV heads, d = 128, 70.6e9 parameters
                  (same Table 3; config.json of meta-llama/Meta-Llama-3-70B)
    Mistral-7B    32 layers, 32 query heads, 8 KV heads, d = 128 (Jiang et al., "Mistral 7B",
                  2023, Table 1); 7.3e9 parameters (Mistral AI's release announcement)
    Llama-2-7B    32 layers, 32 query heads, 32 KV heads (no GQA), d = 128, 6.7e9
                  parameters (Touvron et al., "Llama 2", 2023, Table 1 and section 2.2:
                  GQA only in the 34B and 70B models)
The parameter counts give the memory the weights take (parameters x e) beside the cache.
"""

from __future__ import annotations

from dataclasses import dataclass


from ._checks import check_count
from .gpus import GPU, GPUS
from .memory import format_bytes

BYTES_PER_ELEMENT = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1}


@dataclass(frozen=True)
class ModelShape:
    """The attention shape of one published model."""

    name: str
    layers: int
    heads_q: int
    heads_kv: int
    head_dim: int
    parameters: float
    source: str


MODELS = {
    "Llama-3-8B": ModelShape("Llama-3-8B", 32, 32, 8, 128, 8.0e9,
                             "Llama 3 Herd of Models (2024), Table 3; HF config.json"),
    "Llama-3-70B": ModelShape("Llama-3-70B", 80, 64, 8, 128, 70.6e9,
                              "Llama 3 Herd of Models (2024), Table 3; HF config.json"),
    "Mistral-7B": ModelShape("Mistral-7B", 32, 32, 8, 128, 7.3e9,
                             "Mistral 7B (Jiang et al., 2023), Table 1; 7.3B parameters "
                             "per the release"),
    "Llama-2-7B": ModelShape("Llama-2-7B", 32, 32, 32, 128, 6.7e9,
                             "Llama 2 (Touvron et al., 2023), Table 1 (no GQA at 7B)"),
}


def _count(value, what: str) -> int:
    return check_count(value, what)


def kv_cache_bytes(batch: int, layers: int, t_key: int, heads_kv: int, head_dim: int,
                   bytes_per_element: int = 2) -> int:
    """M_kv = batch x layers x 2 x Tk x Hkv x d x e (bytes).

    >>> kv_cache_bytes(1, 32, 8192, 8, 128)          # Llama-3-8B, 8k tokens, fp16
    1073741824
    """
    return (_count(batch, "batch") * _count(layers, "layers") * 2 * _count(t_key, "Tk")
            * _count(heads_kv, "Hkv") * _count(head_dim, "d")
            * _count(bytes_per_element, "bytes per element"))


@dataclass(frozen=True)
class KVCacheReadout:
    model: ModelShape
    batch: int
    t_key: int
    dtype: str
    gpu: GPU
    cache_bytes: int             # the whole batch's KV cache
    per_token_bytes: int         # one more token of context for one request
    weights_bytes: int           # parameters x e
    mha_cache_bytes: int         # the same model with Hkv = Hq (no GQA)
    max_t_key: int               # longest context whose cache fits beside the weights
    step_floor_s: float          # reading the cache once at the GPU's bandwidth
    fits: bool
    lines: tuple = ()


def _named(value, name: str, table: dict, kind: type, what: str):
    """table[value] for a name in table, value itself when it is a `kind` (what: how the
    message names that type); ValueError naming `name` for an unknown name, TypeError for
    anything else."""
    if isinstance(value, str):
        if value not in table:
            raise ValueError(f"{name} must be one of {', '.join(table)}, got {value!r}")
        return table[value]
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be one of {', '.join(table)} or {what}, got {value!r} "
                        f"({type(value).__name__})")
    return value


def kv_cache_readout(model="Llama-3-8B", batch=1, t_key=8192, dtype="fp16",
                     gpu="H200") -> KVCacheReadout:
    """The KV cache of `model` for `batch` requests of Tk tokens, against `gpu`'s memory.

    Raises ValueError naming the setting for an unknown model, dtype or GPU, or a
    batch/Tk below 1; TypeError naming model or gpu for one that is neither a name nor a
    ModelShape / GPU.
    """
    model = _named(model, "model", MODELS, ModelShape, "a ModelShape")
    b = _count(batch, "batch")
    tk = _count(t_key, "Tk (tokens in the context)")
    if dtype not in BYTES_PER_ELEMENT:
        raise ValueError(f"dtype must be one of {', '.join(BYTES_PER_ELEMENT)}, got {dtype!r}")
    e = BYTES_PER_ELEMENT[dtype]
    gpu = _named(gpu, "gpu", GPUS, GPU, "a flashcourse.gpus.GPU")
    m = model
    cache = kv_cache_bytes(b, m.layers, tk, m.heads_kv, m.head_dim, e)
    per_token = kv_cache_bytes(1, m.layers, 1, m.heads_kv, m.head_dim, e)
    mha = kv_cache_bytes(b, m.layers, tk, m.heads_q, m.head_dim, e)
    weights = int(m.parameters * e)
    room = gpu.memory_bytes - weights
    max_tk = max(0, room // (per_token * b))
    floor = cache / gpu.bandwidth_bytes_per_s
    fits = cache + weights <= gpu.memory_bytes
    g = m.heads_q // m.heads_kv
    lines = (
        f"{m.name}: {m.layers} layers x 2 (K, V) x {m.heads_kv} KV heads x d = {m.head_dim} "
        f"x {e} B = {format_bytes(per_token)} per token of context",
        f"KV cache for batch {b:,} x Tk = {tk:,} tokens: {format_bytes(cache)}",
        f"weights ({m.parameters / 1e9:.1f}e9 parameters x {e} B): {format_bytes(weights)}",
        f"{gpu.name} memory: {format_bytes(gpu.memory_bytes)}: cache + weights "
        + ("fit" if fits else f"do NOT fit ({(cache + weights) / gpu.memory_bytes:.1f}x too "
                              f"large)")
        + f"; the longest context that fits beside the weights: {max_tk:,} tokens",
        (f"GQA saves {g}x: with {m.heads_q} KV heads (multi-head attention) the cache "
         f"would be {format_bytes(mha)}" if g > 1 else
         "no GQA: every query head has its own K and V"),
        f"reading the cache once per generated token at {gpu.bandwidth_bytes_per_s / 1e12:.2f}"
        f" TB/s takes at least {floor * 1e3:,.3g} ms (one decoding step, all layers)",
        f"the score row of one decoding step: 1 x Tk x 4 B = {format_bytes(4 * tk)} per head "
        f"and layer, never the problem",
    )
    return KVCacheReadout(m, b, tk, dtype, gpu, cache, per_token, weights, mha, int(max_tk),
                          floor, fits, lines)
