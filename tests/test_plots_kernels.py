"""The kernel diagrams of notebooks 06 and 09 are figures with the kernel's own numbers."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from flashcourse.plots import kernels as K  # noqa: E402
from flashcourse.cuda.cuda_core.flash import FlashConfig  # noqa: E402


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts] + \
        [ax.get_title() for ax in fig.axes]


def test_flash_dataflow_is_a_figure_with_the_kernel_sizes():
    cfg = FlashConfig(64, 32, 128, 4, head_dim=48, shuffle=True)
    fig = K.plot_flash_dataflow(cfg)
    try:
        assert isinstance(fig, Figure)
        text = "\n".join(_texts(fig))
        # the shared-memory total is the kernel's own layout, padding included
        assert f"{cfg.shared_bytes:,} B" in text
        assert f"TM x TN = {cfg.tm} x {cfg.tn}" in text
        for name in ("Qt", "Ks", "Vs", "Ps", "acc", "m, l", "lse"):
            assert name in text
        # six numbered steps, each drawn on at least one arrow
        assert {t for t in _texts(fig) if len(t) == 1 and t.isdigit()} == set("123456")
        assert len(fig.axes[0].patches) >= 20
    finally:
        plt.close(fig)


def test_flash_dataflow_default_and_bad_config():
    fig = K.plot_flash_dataflow()
    plt.close(fig)
    with pytest.raises(TypeError, match="config must be"):
        K.plot_flash_dataflow((128, 64, 256, 8))


def test_backward_key_major_numbers_the_visited_tiles():
    # Tq = 37, Tk = 45, 8 x 8 tiles, causal: key block 2 (keys 16-23) is hidden from
    # query block 0 (rows 0-7 see keys <= 7 + 8 = 15) and visible to blocks 1-4
    fig = K.plot_backward_key_major(37, 45, 8, 8, 2, causal=True)
    try:
        assert isinstance(fig, Figure)
        text = _texts(fig)
        assert "skip" in text
        assert [t for t in text if t in {"1", "2", "3", "4", "5"}] == ["1", "2", "3", "4"]
        assert {f"dQ_{i}" for i in range(5)} <= set(text)
    finally:
        plt.close(fig)


def test_backward_key_major_not_causal_visits_every_query_block():
    fig = K.plot_backward_key_major(40, 24, 8, 8, 0, causal=False)
    try:
        text = _texts(fig)
        assert "skip" not in text
        assert [t for t in text if t.isdigit() and len(t) == 1] == ["1", "2", "3", "4", "5"]
    finally:
        plt.close(fig)


@pytest.mark.parametrize("kwargs, match", [
    (dict(column=6), "column must be a key-block index in \\[0, 5\\]"),
    (dict(column=-1), "column"),
    (dict(block_q=0), "block_q"),
    (dict(t_key=2.5), "t_key"),
])
def test_backward_key_major_rejects_bad_arguments(kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        K.plot_backward_key_major(**kwargs)


def test_html_table_escapes_and_checks_row_length():
    from flashcourse.plots.tables import html_table
    html = html_table(["name", "ratio"], [["a<b", 0.5], ["c", 2.0]], caption="x & y").data
    assert "a&lt;b" in html and "x &amp; y" in html and html.count("<tr>") == 3
    assert "text-align:right\">0.5" in html
    with pytest.raises(ValueError, match="rows\\[1\\] must have 2 cells"):
        html_table(["a", "b"], [[1, 2], [3]])
