"""The KV-cache explorer: a model's KV cache beside its weights and a GPU's memory.

    from flashcourse.widgets.kv_cache import kv_cache_explorer
    kv_cache_explorer()                      # last line of a cell (notebook 11)

Menus for the model (published shapes), the element format and the GPU; sliders for the
batch and log2 Tk. The numbers come from `flashcourse.kv_cache.kv_cache_readout` (pure,
tested); the bar shows weights + cache against the GPU's memory.
"""

from __future__ import annotations

from ..gpus import GPUS
from ..kv_cache import BYTES_PER_ELEMENT, MODELS, kv_cache_readout
from ._base import LABEL_STYLE, Explorer, check_int_arg, classed, html_box, lines_html, menu, row

LOG2_T_KEY = (7, 20)                  # Tk from 128 to 1,048,576 tokens
BATCH = (1, 256)


class KVCacheExplorer(Explorer):
    """The KV-cache explorer (a VBox). Controls are in `.controls`."""

    css_class = "fc-kv-cache"
    blanked = ("details",)

    def __init__(self, model="Llama-3-8B", batch=1, log2_t_key=13, dtype="fp16", gpu="H200"):
        import ipywidgets as w

        self.model = menu(list(MODELS), model, "model", "model")
        self.dtype = menu(list(BYTES_PER_ELEMENT), dtype, "dtype", "dtype")
        self.gpu = menu(list(GPUS), gpu, "gpu", "GPU")
        slider = dict(continuous_update=False, style=LABEL_STYLE,
                      layout=w.Layout(width="320px"))
        self.batch = w.IntSlider(value=check_int_arg(batch, "batch", *BATCH), min=BATCH[0],
                                 max=BATCH[1], description="batch", **slider)
        self.log2_t_key = w.IntSlider(value=check_int_arg(log2_t_key, "log2_t_key", *LOG2_T_KEY),
                                      min=LOG2_T_KEY[0], max=LOG2_T_KEY[1],
                                      description="log2 Tk", **slider)
        classed(self.batch, "fc-slider-batch")
        classed(self.log2_t_key, "fc-slider-log2tk")
        self.controls = {"model": self.model, "dtype": self.dtype, "gpu": self.gpu,
                         "batch": self.batch, "log2_t_key": self.log2_t_key}
        self.details = html_box("fc-kv-cache-readout")
        super().__init__(
            "<b>KV cache</b>: M_kv = batch &times; layers &times; 2 &times; Tk &times; Hkv "
            "&times; d &times; e bytes, beside the weights and the GPU's memory",
            [row(self.model, self.dtype, self.gpu), row(self.batch, self.log2_t_key)],
            self.details, plot_px=(640, 150), plot_class="fc-kv-cache-plot",
            side_by_side=False)
        self.watch(*self.controls.values())
        self.refresh()

    def update(self):
        r = kv_cache_readout(self.model.value, self.batch.value, 2 ** self.log2_t_key.value,
                             self.dtype.value, self.gpu.value)
        self.draw(lambda fig: _paint(fig, r))
        self.readout = r
        self.details.value = lines_html(r.lines)


def _paint(fig, r):
    """One bar: weights, then the cache, against the GPU's memory (GiB)."""
    gib = 1024 ** 3
    ax = fig.add_subplot()
    weights, cache = r.weights_bytes / gib, r.cache_bytes / gib
    ax.barh([0], [weights], color="C7", label="weights")
    ax.barh([0], [cache], left=[weights], color="C0", label="KV cache")
    ax.axvline(r.gpu.memory_bytes / gib, color="C3", ls="--", label=f"{r.gpu.name} memory")
    ax.set_xlim(0, max(weights + cache, r.gpu.memory_bytes / gib) * 1.05)
    ax.set_yticks([])
    ax.set_xlabel("GiB", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.legend(fontsize=9, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


def kv_cache_explorer(**kwargs) -> KVCacheExplorer:
    """Widget: a model's KV cache against a GPU's memory.

    Keyword arguments set the starting values (model, batch, log2_t_key, dtype, gpu); a
    value that is not on offer raises a ValueError naming it. Returns the widget without
    displaying it: put the call last in a cell.
    """
    return KVCacheExplorer(**kwargs)
