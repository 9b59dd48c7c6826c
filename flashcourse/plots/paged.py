"""Pictures of a paged KV cache (notebook 11b and its explorer).

    draw_pool(ax, owner, fill, page_size)
        the pool as a grid of pages, each coloured by the request that owns it (dark grey:
        shared by several, light grey: free); the unfilled slots at the end of a request's
        last page in a pale tint of its colour (the waste inside pages)
    draw_contiguous(ax, lengths, max_len, page_size)
        one bar per request: the max_len slots a contiguous allocation reserves, the
        tokens it holds, and where its last page ends
    draw_block_tables(ax, block_table, seq_lens, page_size, refs)
        the block table as a grid of page numbers; a page shared by several sequences
        (refs > 1) in dark grey
    draw_schedule(ax, schedule, sms, blocks_per_sm)
        blocks on the resident slots of each SM over time (`cuda.decoding.paged.
        simulated_schedule`), coloured by request
    draw_busy_slots(ax, schedules, labels, slots)
        busy slots over time, one line per schedule
The numbers come from `flashcourse.paged_cache` (page_map, slot_usage) and the plan's
host model (`flashcourse.cuda.decoding.paged`).
"""

from __future__ import annotations

import numpy as np

from ..paged_cache import FREE, SHARED

FREE_COLOUR = "#f0f0f0"
SHARED_COLOUR = "#4d4d4d"
SUB = 8                              # columns per page cell: the fill in eighths
MAX_REQUEST_COLOURS = 20


def request_colour(b: int):
    """The colour of request b (matplotlib's tab20, the stronger shade first)."""
    from matplotlib import colormaps
    cmap = colormaps["tab20"]
    b = int(b) % MAX_REQUEST_COLOURS
    return cmap(2 * b % 20 + (b >= 10))


def _pale(rgb, amount: float = 0.72):
    r, g, b = rgb[:3]
    return (r + (1 - r) * amount, g + (1 - g) * amount, b + (1 - b) * amount)


def _rgb(colour):
    from matplotlib.colors import to_rgb
    return to_rgb(colour)


def pool_columns(num_pages: int) -> int:
    """Pages per row of the pool picture: about twice as many columns as rows."""
    return max(1, min(num_pages, int(np.ceil(np.sqrt(2 * num_pages)))))


def pool_image(owner, fill, page_size):
    """(rows, cols x SUB, 3) RGB picture of the pool: page p at row p // cols, columns
    SUB x (p % cols) ..; a used page's first round(SUB x fill / page_size) columns in its
    owner's colour and the rest pale (at least one column each way when the page is
    neither empty nor full)."""
    owner, fill = np.asarray(owner), np.asarray(fill)
    if owner.shape != fill.shape or owner.ndim != 1:
        raise ValueError(f"owner and fill must be (num_pages,) arrays of one shape, got "
                         f"{owner.shape} and {fill.shape}")
    n = owner.size
    cols = pool_columns(n)
    rows = -(-n // cols)
    img = np.ones((rows, cols * SUB, 3))
    for p in range(n):
        r, c = divmod(p, cols)
        cell = img[r, c * SUB:(c + 1) * SUB]
        if owner[p] == FREE:
            cell[:] = _rgb(FREE_COLOUR)
            continue
        base = _rgb(SHARED_COLOUR) if owner[p] == SHARED else request_colour(owner[p])[:3]
        full = int(round(SUB * fill[p] / page_size))
        if 0 < fill[p] < page_size:
            full = min(max(full, 1), SUB - 1)
        cell[:] = _pale(base)
        cell[:full] = base
    return img, cols


def draw_pool(ax, owner, fill, page_size: int, title: str = "") -> None:
    """The pool: one cell per page (see the module docstring), a legend beside it."""
    from matplotlib.patches import Patch
    img, cols = pool_image(owner, fill, page_size)
    rows = img.shape[0]
    ax.imshow(img, aspect="auto", interpolation="nearest",
              extent=(0, cols, rows, 0))
    if cols * rows <= 1024:                               # page borders, where they show
        for x in range(1, cols):
            ax.axvline(x, color="white", lw=0.6)
        for y in range(1, rows):
            ax.axhline(y, color="white", lw=0.6)
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_xlabel(f"{np.asarray(owner).size} pages of {page_size} token slots, "
                  f"{cols} per row (page p at row p // {cols})", fontsize=9)
    owners = sorted({int(o) for o in np.asarray(owner) if o >= 0})
    handles = [Patch(color=request_colour(b), label=f"request {b}") for b in owners[:12]]
    handles += [Patch(color=SHARED_COLOUR, label="shared"),
                Patch(color=_pale(request_colour(0)),
                      label="pale: empty slots\nof a page (wasted)"),
                Patch(facecolor=FREE_COLOUR, edgecolor="#bbbbbb", label="free page")]
    ax.legend(handles=handles, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    if title:
        ax.set_title(title, fontsize=10)


def draw_contiguous(ax, lengths, max_len: int, page_size: int, title: str = "") -> None:
    """One bar per request: max_len reserved (grey), its tokens (its colour), a black
    tick where its last page ends (pages x page_size)."""
    lengths = [int(x) for x in lengths]
    if not lengths:
        raise ValueError("lengths must hold at least one request")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    y = np.arange(len(lengths))
    ax.barh(y, [max_len] * len(lengths), color="#dddddd", height=0.7)
    ax.barh(y, lengths, color=[request_colour(b) for b in range(len(lengths))], height=0.7)
    ends = [-(-n // page_size) * page_size for n in lengths]
    ax.scatter(ends, y, marker="|", s=160, color="black", zorder=3)
    handles = [Patch(color="#dddddd", label=f"reserved: max_len = {max_len:,}"),
               Patch(color="#888888", label="tokens (the request's colour)"),
               Line2D([], [], color="black", marker="|", ls="", markersize=12,
                      label=f"end of its last page ({page_size} slots)")]
    ax.set_yticks(y)
    ax.set_yticklabels([f"request {b}" for b in range(len(lengths))], fontsize=9)
    ax.invert_yaxis()
    ax.set_xlim(0, max(max_len, max(ends)) * 1.02)
    ax.set_xlabel("token slots", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.legend(handles=handles, fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    if title:
        ax.set_title(title, fontsize=10)


def draw_block_tables(ax, block_table, seq_lens, page_size: int, refs=None,
                      title: str = "") -> None:
    """The block table: row b, column i holds the pool page of tokens i x page_size ..
    (i + 1) x page_size - 1 of sequence b; entries past the sequence are blank. A page
    with refs > 1 (shared) is drawn dark grey, others in the sequence's colour."""
    table = np.asarray(block_table)
    lens = np.asarray(seq_lens)
    rows, width = table.shape
    used = max(1, max(-(-int(n) // page_size) for n in lens))
    img = np.ones((rows, used, 3))
    for b in range(rows):
        for i in range(-(-int(lens[b]) // page_size)):
            p = int(table[b, i])
            shared = refs is not None and refs[p] > 1
            img[b, i] = _rgb(SHARED_COLOUR) if shared else _pale(request_colour(b), 0.35)
            ax.text(i, b, str(p), ha="center", va="center", fontsize=9,
                    color="white" if shared else "black")
    ax.imshow(img, aspect="auto", interpolation="nearest")
    for x in np.arange(used + 1) - 0.5:
        ax.axvline(x, color="white", lw=1)
    for yy in np.arange(rows + 1) - 0.5:
        ax.axhline(yy, color="white", lw=1)
    ax.set_xticks(range(used))
    ax.set_xticklabels([f"{i}" for i in range(used)], fontsize=9)
    ax.set_yticks(range(rows))
    ax.set_yticklabels([f"seq {b} ({int(n)} tok.)" for b, n in enumerate(lens)], fontsize=9)
    ax.set_xlabel(f"table column i (tokens {page_size} i .. {page_size} i + "
                  f"{page_size - 1})", fontsize=9)
    if title:
        ax.set_title(title, fontsize=10)


def draw_schedule(ax, schedule, sms: int, blocks_per_sm: int, title: str = "") -> None:
    """Each block of `schedule` [(slot, start, end, request), ...] as a bar on its slot's
    row; slot s runs on SM s % sms (the first blocks go to different SMs), rows grouped
    by SM. Times in thousands of keys."""
    if not schedule:
        raise ValueError("schedule must hold at least one block")
    for slot, start, end, b in schedule:
        sm, lane = slot % sms, slot // sms
        row = sm * blocks_per_sm + lane
        ax.barh(row, (end - start) / 1e3, left=start / 1e3, height=0.8,
                color=request_colour(b), edgecolor="white", linewidth=0.3)
    for k in range(1, sms):
        ax.axhline(k * blocks_per_sm - 0.5, color="#999999", lw=0.6)
    ax.set_ylim(sms * blocks_per_sm - 0.5, -0.5)
    ax.set_yticks([k * blocks_per_sm + (blocks_per_sm - 1) / 2 for k in range(sms)])
    ax.set_yticklabels([f"SM {k}" for k in range(sms)], fontsize=9)
    ax.set_xlabel("time (thousands of keys read by one block)", fontsize=9)
    ax.tick_params(labelsize=9)
    finish = max(e for _, _, e, _ in schedule) / 1e3
    ax.axvline(finish, color="black", ls="--", lw=1)
    if title:
        ax.set_title(title, fontsize=10)


def busy_slots(schedule, times):
    """Blocks running at each of `times` (keys) in `schedule`."""
    starts = np.array([s for _, s, _, _ in schedule], float)
    ends = np.array([e for _, _, e, _ in schedule], float)
    t = np.asarray(times, float)[:, None]
    return ((starts[None, :] <= t) & (t < ends[None, :])).sum(axis=1)


def draw_busy_slots(ax, schedules, labels, slots: int, title: str = "") -> None:
    """Busy slots over time for each schedule, against the `slots` the GPU holds."""
    if len(schedules) != len(labels) or not schedules:
        raise ValueError("schedules and labels must be two lists of the same length")
    end = max(max(e for _, _, e, _ in s) for s in schedules)
    times = np.linspace(0, end, 600)
    for i, (s, label) in enumerate(zip(schedules, labels)):
        ax.step(times / 1e3, busy_slots(s, times), where="post", lw=1.6, color=f"C{i}",
                label=label)
        ax.axvline(max(e for _, _, e, _ in s) / 1e3, color=f"C{i}", ls="--", lw=1)
    ax.axhline(slots, color="black", lw=0.8, ls=":", label=f"all {slots} slots")
    ax.set_ylim(0, slots * 1.1)
    ax.set_xlabel("time (thousands of keys read by one block)", fontsize=9)
    ax.set_ylabel("blocks running", fontsize=9)
    ax.tick_params(labelsize=9)
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
