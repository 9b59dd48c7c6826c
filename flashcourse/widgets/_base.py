"""What every explorer shares: controls, a message area, a safe refresh, a crisp plot.

    Explorer          an ipywidgets VBox: a title, rows of controls, a message line, a
                      readout and (optionally) a plot beside it. Subclasses write
                      `update()` (compute from the controls, set the readout, call
                      `self.draw(fn)`) and `clear()` (what to blank on an error).
    LengthControl     a slider over powers of two plus a free-entry box, kept in sync;
                      the box is the value, capped at the slider's end
    CountBox          a free-entry box for a whole number in [lo, hi]
    (both go back to their last valid value on an invalid entry: promise 5 below)
    parse_whole       '3,000', '3e9', '4096' -> int; anything else -> ValueError (a number
                      of more than MAX_TYPED_DIGITS digits is refused by its size, never
                      built: no Python 4,300-digit message, no long computation)

Five promises, each tested in tests/test_widgets.py:

1. A refresh never raises and never shows a traceback: any error of a setting
   (ValueError from the readouts, and anything else: OverflowError, MemoryError, ...)
   becomes a one-line message, the plot is hidden, the readout blanked.
2. Refreshes are serialised. Controls can change faster than a plot is drawn (two
   dropdowns changed quickly, a slider dragged, Play): a change that arrives while a
   refresh runs (from another thread, or from an observer inside the refresh) only marks
   the explorer dirty, and the running refresh goes round once more with the newest
   values. All drawing, in every explorer, also holds one lock: matplotlib's text and
   mathtext parsing is not thread-safe.
3. Plots are drawn on one persistent matplotlib Figure (object API, no pyplot state),
   rendered at twice its CSS size and shown at exactly that size (`width` px), so the
   image is sharp and never stretched; it shrinks with the page (max-width 100%). The
   PNG carries the figure's title as its "Title" text, so a test can read what was drawn.
4. A control that changes faster than a plot is drawn (a Play button ticking at 600 ms
   against a draw of up to a second on a busy 2-core machine) is watched with
   `watch_fast`: each change only marks the explorer dirty and returns, and one
   background thread draws the newest value until it has caught up. Changes that arrive
   while it draws are coalesced, so the picture never falls behind the control by more
   than one draw; `settle()` waits for it (tests).
5. A free-entry box that receives something it cannot take (text, 0, a length past the
   slider's end) goes back to its last valid value, so box, slider and readout always
   show one value, and the explorer's message says what was refused and what is shown.

On the static website (FLASHCOURSE_STATIC_SITE=1, set by tools/build_site.py: no kernel
behind the page) an explorer shows itself as plain HTML: its settings, its readout and
its plot as a still picture, with a line saying how to move the controls.
"""

from __future__ import annotations

import base64
import html
import io
import math
import numbers
import os
import re
import threading
import time
from decimal import Decimal, InvalidOperation

import ipywidgets as w
import numpy as np

from ..gpus import GPUS

LABEL_STYLE = {"description_width": "initial"}
LOOP_ORDERS = [("fa2: outer loop over query blocks", "fa2"),
               ("fa1: outer loop over key blocks", "fa1")]
RENDER_DPI = 200                          # PNG pixels per inch: 2 x the 100 px/inch layout
_DRAW_LOCK = threading.RLock()            # one matplotlib render at a time, all explorers
_MAX_MESSAGE = 300                        # characters of an error message shown


# ----------------------------------------------------------------------------------------
# Small HTML helpers
# ----------------------------------------------------------------------------------------

def message_html(text: str, level: str = "error", title: str | None = None) -> str:
    """A coloured one-block message ('' for no message)."""
    if not text:
        return ""
    colour = {"error": "#b00020", "warning": "#8a5300"}[level]
    icon = title or {"error": "Cannot show this setting:", "warning": "Warning:"}[level]
    return (f'<div style="color:{colour};border-left:4px solid {colour};padding:2px 8px;'
            f'margin:4px 0;white-space:normal;overflow-wrap:anywhere;line-height:1.45">'
            f'<b>{icon}</b> '
            f'{html.escape(text)}</div>')


def lines_html(lines) -> str:
    """Lines of plain text as HTML that wraps (never a line running off the screen: a
    number of 40 digits, which has no space to break at, breaks anywhere)."""
    body = "".join(f"<div>{html.escape(x)}</div>" for x in lines)
    return (f'<div style="line-height:1.45;margin:2px 0;white-space:normal;'
            f'overflow-wrap:anywhere">{body}</div>')


def one_line(exc: BaseException) -> str:
    """An exception as one short line: the message of a ValueError, else 'Type: message'."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if not isinstance(exc, ValueError) or not text:
        text = f"{type(exc).__name__}: {text}" if text else type(exc).__name__
    return text if len(text) <= _MAX_MESSAGE else text[:_MAX_MESSAGE - 3] + "..."


def show(widget, flag: bool) -> None:
    widget.layout.display = None if flag else "none"


# ----------------------------------------------------------------------------------------
# Checking constructor arguments (a clear ValueError, never an ipywidgets TraitError)
# ----------------------------------------------------------------------------------------

#: Typed numbers, and ints shown in a message, of more decimal digits than this are
#: described by their size ("a number of about 16,384 digits"), never built from the text
#: or written out: Python refuses to write an int of more than 4,300 digits, a typed
#: '9999**4096' takes time to build, and no explorer takes a number near 10**30.
MAX_TYPED_DIGITS = 30


def _about_digits(digits: float) -> str:
    """'about N digits' (an estimate from the text may be one digit out)."""
    return f"about {int(digits):,} digits" if digits < 1e15 else "more than 10**15 digits"


def shown_int(value: int) -> str:
    """An int for a message: '4,096', or 'a number of about 16,384 digits' when it has
    more than MAX_TYPED_DIGITS digits (checked by comparison, before any formatting)."""
    value = int(value)
    if abs(value) < 10 ** MAX_TYPED_DIGITS:
        return f"{value:,}"
    digits = math.floor(abs(value).bit_length() * math.log10(2)) + 1     # at most 1 over
    if abs(value) < 10 ** (digits - 1):
        digits -= 1
    return f"{'a negative' if value < 0 else 'a'} number of {_about_digits(digits)}"


def describe(value) -> str:
    """`value` for a message: its repr (cut to 60 characters) and type; a huge int by its
    size (its repr would raise Python's 4,300-digit ValueError)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return shown_int(value)
    try:
        text = repr(value)
    except ValueError:             # e.g. a Fraction of a huge int: its repr writes the int
        text = f"a {type(value).__name__} too large to show"
    text = text if len(text) <= 60 else text[:45] + "..." + text[-12:]
    kind = type(value).__name__
    return f"{text} ({'an' if kind[0] in 'aeiou' else 'a'} {kind})"


def check_int_arg(value, name: str, lo: int, hi: int) -> int:
    """A constructor argument that must be an int in [lo, hi]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number (an int) between {lo:,} and {hi:,}, "
                         f"got {describe(value)}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must be between {lo:,} and {hi:,}, got {shown_int(value)}")
    return int(value)


def _among(value, values) -> bool:
    """`value in values`, False for a value that cannot be compared with them (a numpy
    array compares element by element, and its truth value then raises ValueError)."""
    if isinstance(value, np.ndarray):
        return False                   # an array is no option, even of one element
    try:
        return any(bool(value == v) for v in values)
    except (ValueError, TypeError):  # an array, or an object whose == raises: not an option
        return False


def check_choice(value, name: str, options) -> object:
    """A constructor argument that must be one of `options` (values, or (label, value))."""
    values = [o[1] if isinstance(o, tuple) else o for o in options]
    if isinstance(value, (bool, np.bool_)) or not _among(value, values):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, values))}, "
                         f"got {describe(value)}")
    return value


def check_flag(value, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {describe(value)}")
    return bool(value)


# ----------------------------------------------------------------------------------------
# Control building (the pieces every explorer's constructor repeats)
# ----------------------------------------------------------------------------------------

def auto_width() -> dict:
    """Keyword arguments of a control as wide as its content, its label in full."""
    return dict(style=LABEL_STYLE, layout=w.Layout(width="auto"))


def menu(options, value, name: str, description: str) -> w.Dropdown:
    """A dropdown of `options` set to `value` (checked: ValueError naming `name`)."""
    return w.Dropdown(options=options, value=check_choice(value, name, options),
                      description=description, **auto_width())


def classed(widget, css_class: str):
    """`widget` with the CSS class `css_class` (the stylesheet and the browser tests find
    it by that class)."""
    widget.add_class(css_class)
    return widget


def html_box(css_class: str) -> w.HTML:
    """An empty HTML readout with the CSS class `css_class`."""
    return classed(w.HTML(value=""), css_class)


def row(*children) -> w.HBox:
    """Controls side by side, wrapping onto the next line where the notebook is narrow."""
    return w.HBox(list(children), layout=w.Layout(flex_flow="row wrap"))


def gpu_menu(gpu) -> w.Dropdown:
    """The GPU dropdown of the memory explorers (`gpu` checked against flashcourse.gpus),
    set apart from the controls before it."""
    return w.Dropdown(options=list(GPUS), value=check_choice(gpu, "gpu", list(GPUS)),
                      description="GPU", style=LABEL_STYLE,
                      layout=w.Layout(width="auto", margin="2px 2px 2px 16px"))


# ----------------------------------------------------------------------------------------
# Free-entry boxes
# ----------------------------------------------------------------------------------------

_POWER = re.compile(r"^(\d+)\*\*(\d+)$")                      # 2**20
# a power of ten too large for Decimal's exponent (more than 15 digits of exponent); the
# mantissa written so that a long run of digits splits one way only (\d+\.?\d* tried every
# split of 5,000 nines: 0.2 s a call)
_HUGE_EXPONENT = re.compile(r"^([+-]?)(\d+(?:\.\d*)?|\.\d+)[eE]\+?(\d{16,})$")


def _quoted(raw: str) -> str:
    """What the learner typed, quoted, cut to about 40 characters."""
    return repr(raw if len(raw) <= 40 else raw[:24] + "..." + raw[-8:])


def _typed_whole(s: str):
    """The whole number `s` spells ('4096', '3e9', '2**20'), as (value, None); (None,
    (sign, decimal digits)) for one of more than MAX_TYPED_DIGITS digits, whose size is
    read from the text without building it; None for anything else."""
    power = _POWER.match(s)
    if power:
        base, exp = power[1].lstrip("0") or "0", power[2].lstrip("0") or "0"
        if exp == "0" or base in ("0", "1"):
            return (1 if exp == "0" else int(base)), None
        head = base[:15]                                      # log10(base) from its digits
        log10 = float(exp) * (len(base) - len(head) + math.log10(int(head)))
        if log10 >= MAX_TYPED_DIGITS:                         # (a long exponent: inf)
            return None, (1, log10 + 1)                      # digits, as a float
        return int(base) ** int(exp), None
    sci = _HUGE_EXPONENT.match(s)
    if sci:                                                   # '1e99999999999999999999'
        if not sci[2].strip("0."):
            return 0, None                                    # 0e99999999999999999999
        return None, (-1 if sci[1] == "-" else 1, float(sci[3]))
    try:
        number = Decimal(s)             # exact: '3e9', '4096', '1.5e3'; no 4,300-digit limit
    except InvalidOperation:            # not a number at all ('x', '0x10', '')
        return None
    if not number.is_finite():
        return None                     # inf, nan
    if number != 0 and number.adjusted() >= MAX_TYPED_DIGITS:   # adjusted: digits - 1
        return None, (-1 if number < 0 else 1, number.adjusted() + 1)
    if number != number.to_integral_value():
        return None                     # 1.5, 1e-3
    return int(number), None


def parse_whole(text, what: str, lo: int = 1, hi: int | None = None) -> int:
    """A typed whole number: '4096', '4,096', '4_096', '3e9', '2**20'; in [lo, hi].

    Raises ValueError naming `what` for anything else (text, fractions, out of range). A
    number of more than MAX_TYPED_DIGITS digits ('9999**4096', '1e400', a pasted page of
    nines) is refused as too large (or too small) by its size, read from the text: it is
    never built, and the message never writes it out.
    """
    raw = str(text).strip()
    s = raw.replace(",", "").replace("_", "").replace(" ", "")
    parsed = _typed_whole(s)
    if parsed is None:
        raise ValueError(f"{what} must be a whole number, got {_quoted(raw)}")
    value, size = parsed
    if size is not None:
        sign, digits = size
        allowed = (f"between {lo:,} and {hi:,}" if hi is not None else
                   f"at least {lo:,}, with at most {MAX_TYPED_DIGITS} digits")
        big = "too large" if sign > 0 else "too small (negative)"
        raise ValueError(f"{what} must be {allowed}; {_quoted(raw)} is {big}: a number of "
                         f"{_about_digits(digits)}")
    if value < lo:
        raise ValueError(f"{what} must be at least {lo:,}, got {shown_int(value)}")
    if hi is not None and value > hi:
        raise ValueError(f"{what} must be at most {hi:,}, got {shown_int(value)}")
    return value


def _text_arg(value, name: str, lo: int, hi: int) -> int:
    """A starting value for a free-entry box: an int in [lo, hi] (ValueError naming it)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ValueError(f"{name} must be a whole number (an int), got {describe(value)}")
    return check_int_arg(value, name, lo, hi)


class _FreeEntry:
    """A text box that always shows a valid whole number in [lo, hi].

    An entry that parses is taken (`value`). Anything else (text, a fraction, a number
    out of range) puts the box back to the last valid value, and `refused` says why
    (the explorer shows it as its message after the refresh that follows). Functions
    given to `observe` run once per value taken: a restore is one change, and the refused
    entry itself notifies no one, so box, slider and readout never disagree.
    """

    def _init_entry(self, text: w.Text, value: int) -> None:
        self.text, self.valid, self.refused = text, value, ""
        self._restoring = False
        text.observe(self._check, names="value")

    def _check(self, change) -> None:
        if self._restoring:
            return
        try:
            self.valid = parse_whole(change["new"], self.what, self.lo, self.hi)
        except ValueError as exc:
            self.refused = (f"{one_line(exc)}. The box shows {self.valid:,} again "
                            f"(the last valid value).")
            self._restoring = True
            try:
                self.text.value = f"{self.valid:,}"
            finally:
                self._restoring = False
            return
        self._taken(self.valid)

    def _taken(self, value: int) -> None:
        """A valid value was entered (subclasses follow it with their slider)."""

    @property
    def value(self) -> int:
        return self.valid

    def take_refusal(self) -> str:
        """The reason the last entry was refused ('' if none), once."""
        text, self.refused = self.refused, ""
        return text

    def observe(self, fn) -> None:
        def call(change):
            if change["new"] == self.text.value:      # not the refused entry
                fn(change)
        self.text.observe(call, names="value")


class CountBox(_FreeEntry):
    """A free-entry box for a whole number in [lo, hi]; `.value` is its last valid value."""

    def __init__(self, description, value, name, what, lo=1, hi=2 ** 20, width="170px"):
        self.what, self.lo, self.hi = what, lo, hi
        value = _text_arg(value, name, lo, hi)
        self._init_entry(w.Text(value=f"{value:,}", description=description,
                                continuous_update=False, style=LABEL_STYLE,
                                layout=w.Layout(width=width)), value)


class LengthControl(_FreeEntry):
    """A log-scale slider over powers of two plus a free-entry box, kept in sync.

    The box holds the value (any whole number in [1, 2**max_log2]: the same bounds as the
    slider; anything else is refused and the box goes back to its last valid value); the
    slider jumps between powers of two 1 .. 2**max_log2, so one arrow key press doubles or
    halves the length, and a typed length moves the slider to the largest power of two
    below it.
    """

    def __init__(self, description, value, name, what, max_log2, slider_class=""):
        self.what, self.lo, self.hi = what, 1, 2 ** max_log2
        self.powers = [2 ** p for p in range(max_log2 + 1)]
        value = _text_arg(value, name, self.lo, self.hi)
        self.slider = w.SelectionSlider(
            options=[(f"{p:,}", p) for p in self.powers], value=self._below(value),
            description=description, continuous_update=False, style=LABEL_STYLE,
            layout=w.Layout(width="400px"))
        if slider_class:
            self.slider.add_class(slider_class)
        self._syncing = False
        self._init_entry(w.Text(value=f"{value:,}", continuous_update=False,
                                layout=w.Layout(width="150px")), value)
        self.box = w.HBox([self.slider, self.text])
        self.slider.observe(self._from_slider, names="value")

    def _below(self, v: int) -> int:
        """The largest power of two <= v (v >= 1)."""
        return 1 << (int(v).bit_length() - 1)

    def _from_slider(self, change):
        if not self._syncing:
            self._syncing = True
            try:
                self.text.value = f"{change['new']:,}"
            finally:
                self._syncing = False

    def _taken(self, v: int) -> None:
        """Move the slider to the largest power of two <= the typed length."""
        if not self._syncing and self.slider.value != self._below(v):
            self._syncing = True
            try:
                self.slider.value = self._below(v)
            finally:
                self._syncing = False

    def set(self, v: int) -> None:
        self.text.value = f"{int(v):,}"

    def set_disabled(self, flag):
        self.slider.disabled = flag
        self.text.disabled = flag


# ----------------------------------------------------------------------------------------
# The base explorer
# ----------------------------------------------------------------------------------------

class Explorer(w.VBox):
    """Base of every explorer: title, controls, message, readout, plot; a safe refresh.

    Subclass contract:
        css_class      a CSS class on the box (browser tests find the widget by it)
        update()       read the controls, compute, set the readout, draw; raise for an
                       invalid setting (any exception becomes the one-line message)
        clear()        blank what `update` shows (called on an error); the base blanks
                       the warning and the HTML widgets named in `blanked`
    Build the controls, then call `super().__init__(title, rows, readout, plot_px=...)`,
    then `self.watch(*controls)` (`self.watch_fast(control)` for one that may change
    faster than a draw, like a Play-driven step) and `self.refresh()`.
    """

    css_class = "fc-explorer"
    error_title = "Cannot show this setting:"
    readout = None                     # what `update` computed last (None before the first)
    blanked: tuple = ()                # attributes (HTML readouts) that `clear` empties

    def __init__(self, title: str, rows, readout, *, plot_px=None, plot_class="",
                 side_by_side=True, layout="constrained"):
        self.message = html_box("fc-message")
        self.warning = html_box("fc-warning")
        self.image = None
        self._fig = None
        self._dirty = False
        self._refresh_lock = threading.Lock()
        self._background = False           # a background refresh thread runs (watch_fast)
        self._updater = None               # the thread running update() rounds, if any
        self._from_elsewhere = False       # a change came from another thread mid-round
        self._background_guard = threading.Lock()
        self.errors = 0                    # refreshes that ended in a message (for tests)
        body = [readout]
        if plot_px is not None:
            width, height = plot_px
            self._plot_px = (width, height)
            self.image = w.Image(format="png", layout=w.Layout(
                width=f"{width}px", max_width="100%", height="auto", flex="0 0 auto"))
            if plot_class:
                self.image.add_class(plot_class)
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure

            self._fig = Figure(figsize=(width / 100, height / 100), dpi=100, layout=layout)
            FigureCanvasAgg(self._fig)
            # the image always sits in a row box: alone in a column box, Chrome gives it
            # its natural (2x) height and centres the picture in a band of white
            row = w.Layout(flex_flow="row wrap", align_items="flex-start")
            if side_by_side:                            # beside the plot when there is room
                readout.layout.flex = "1 1 260px"
                readout.layout.min_width = "260px"
            body = ([w.HBox([self.image, readout], layout=row)] if side_by_side
                    else [w.HBox([self.image], layout=row), readout])
        super().__init__([w.HTML(title), *rows, self.message, self.warning, *body])
        self.add_class(self.css_class)
        self._title, self._rows, self._readout = title, rows, readout

    # -- to override ----------------------------------------------------------------------
    def update(self) -> None:                       # pragma: no cover - abstract
        raise NotImplementedError

    def clear(self) -> None:
        self.warning.value = ""
        for name in self.blanked:
            getattr(self, name).value = ""

    # -- wiring -----------------------------------------------------------------------------
    def watch(self, *controls) -> None:
        """Refresh whenever one of `controls` (widgets, LengthControl, CountBox) changes."""
        for c in controls:
            if isinstance(c, (LengthControl, CountBox)):
                c.observe(self.refresh)
            else:
                c.observe(self.refresh, names="value")

    def watch_fast(self, *controls) -> None:
        """Refresh in the background whenever one of `controls` changes (promise 4)."""
        for c in controls:
            c.observe(self.refresh_soon, names="value")

    def refresh(self, _change=None) -> None:
        """Recompute and redraw from the controls; never raises (see the module docstring).

        A call that arrives while a refresh runs marks the explorer dirty and returns;
        the running refresh then goes round again with the newest values.
        """
        self._mark_dirty()
        while True:
            if not self._refresh_lock.acquire(blocking=False):
                return                     # the running refresh will see _dirty
            try:
                self._rounds()
            finally:
                self._refresh_lock.release()
            if not self._dirty:            # nothing arrived between the last round and now
                return

    def _mark_dirty(self) -> None:
        self._dirty = True
        if self._updater is not None and self._updater != threading.get_ident():
            self._from_elsewhere = True

    def _rounds(self) -> None:
        """Update while dirty (the caller holds the refresh lock). An update that keeps
        changing its own controls stops after 8 rounds; changes from other threads (the
        learner, Play) are never dropped: each one restarts the count."""
        rounds = 0
        self._updater = threading.get_ident()
        try:
            while self._dirty and rounds < 8:
                self._dirty = self._from_elsewhere = False
                rounds += 1
                self._run_update()
                if self._from_elsewhere:
                    rounds = 0
        finally:
            self._updater = None
        if rounds >= 8:
            self._dirty = False

    def refresh_soon(self, _change=None) -> None:
        """Mark the explorer dirty and return at once; one background thread refreshes
        until nothing new has arrived (changes coalesce: the newest value is drawn)."""
        self._mark_dirty()
        if self._refresh_lock.locked():
            return                         # a running refresh goes round again (or, for
        with self._background_guard:       # the update's own slider changes, need not)
            if self._background:
                return                     # the running thread will see _dirty
            self._background = True
        threading.Thread(target=self._refresh_in_background, daemon=True,
                         name=f"{type(self).__name__} refresh").start()

    def _refresh_in_background(self) -> None:
        while True:
            with self._refresh_lock:       # waits for a refresh running elsewhere
                self._rounds()
            with self._background_guard:
                if not self._dirty:
                    self._background = False
                    return

    def settle(self, timeout_s: float = 60.0) -> bool:
        """Wait until no background refresh runs (True) or `timeout_s` passed (False)."""
        deadline = time.monotonic() + timeout_s
        while self._background or self._refresh_lock.locked():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.005)
        return True

    def _repr_mimebundle_(self, **kwargs):
        """The live widget, or on the static website a still HTML picture of it."""
        if os.environ.get("FLASHCOURSE_STATIC_SITE") == "1":
            return {"text/html": self.static_html(),
                    "text/plain": f"{type(self).__name__} (run the notebook to use it)"}
        return super()._repr_mimebundle_(**kwargs)

    def static_html(self) -> str:
        """Title, current settings, message, readout and plot as plain HTML."""
        settings = []

        def walk(widgets):
            for x in widgets:
                if isinstance(x, w.Box):
                    walk(x.children)
                elif getattr(x, "description", "") and hasattr(x, "value") and not isinstance(
                        x, (w.Button, w.Play)):
                    value = x.label if hasattr(x, "label") and x.label is not None else x.value
                    settings.append(f"{html.escape(x.description)} = "
                                    f"{html.escape(str(value))}")

        walk(self._rows)
        parts = [f"<div>{self._title}</div>",
                 f'<div style="color:#555">Settings: {"; ".join(settings)}. '
                 "Run the notebook in JupyterLab to move the controls.</div>",
                 self.message.value, self.warning.value]
        if self.image is not None and self.image.value and self.image.layout.display is None:
            png = base64.b64encode(bytes(self.image.value)).decode("ascii")
            parts.append(f'<img src="data:image/png;base64,{png}" alt="{type(self).__name__} '
                         f'plot" style="width:{self._plot_px[0]}px;max-width:100%">')
        for x in getattr(self._readout, "children", None) or (self._readout,):
            if isinstance(x, w.Label):                          # plain text, not HTML
                parts.append(f"<div>{html.escape(x.value)}</div>")
            elif hasattr(x, "value"):
                parts.append(x.value)
        return f'<div class="{self.css_class}">{"".join(p for p in parts if p)}</div>'

    def _refusals(self) -> list:
        """Why free-entry boxes refused their last entry (each reason given once)."""
        boxes = [x for x in vars(self).values() if isinstance(x, _FreeEntry)]
        return [r for r in (b.take_refusal() for b in boxes) if r]

    def _run_update(self) -> None:
        try:
            self.update()
        except Exception as exc:  # noqa: BLE001 - every error of a setting becomes a message
            self.errors += 1
            self.message.value = message_html(" ".join([*self._refusals(), one_line(exc)]),
                                              title=self.error_title)
            try:
                self.clear()
            except Exception:  # noqa: BLE001 - blanking must not hide the message
                pass
            if self.image is not None:
                show(self.image, False)
            return
        refused = self._refusals()           # an entry put back: the readout shows the
        if refused:                          # last valid value, the message says why
            self.errors += 1
        self.message.value = message_html(" ".join(refused), title=self.error_title)
        if self.image is not None:
            show(self.image, True)

    def draw(self, paint) -> None:
        """Clear the persistent figure, `paint(fig)`, and show it as a crisp PNG."""
        self.image.value = self.render(paint)

    def render(self, paint, clear: bool = True) -> bytes:
        """`paint(fig)` on the persistent figure (cleared first unless `clear` is False)
        and return it as a crisp PNG, the figure's title in its "Title" text."""
        with _DRAW_LOCK:
            fig = self._fig
            if clear:
                fig.clear()
            paint(fig)
            buf = io.BytesIO()
            title = fig.get_suptitle()
            # zlib level 1: the same pixels, ~10% more bytes, encoded several times
            # faster than the default 6 (a step of the tile schedule under Play)
            fig.savefig(buf, format="png", dpi=RENDER_DPI,
                        metadata={"Title": title} if title else None,
                        pil_kwargs={"compress_level": 1})
        return buf.getvalue()


# ----------------------------------------------------------------------------------------
# Axis ticks without mathtext (faster, and nothing to parse)
# ----------------------------------------------------------------------------------------

def length_ticks(axis, hi, lo=1.0) -> None:
    """Ticks at powers of two (every 4th, or fewer on a long axis): 1, 16, 256, 4K, 64K, 1M."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    def label(x, _pos):
        x = int(round(x))
        for unit, size in (("T", 2 ** 40), ("G", 2 ** 30), ("M", 2 ** 20), ("K", 2 ** 10)):
            if x >= size and x % size == 0:
                return f"{x // size}{unit}"
        return f"{x}"

    top, bottom = int(math.log2(hi)), max(0, math.ceil(math.log2(max(lo, 1))))
    step = max(4, 4 * math.ceil((top - bottom) / 40))
    axis.set_major_locator(FixedLocator([2.0 ** p for p in range(bottom, top + 1, step)]))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(label))


def byte_ticks(axis, hi, lo=1.0, step_log2=10) -> None:
    """Ticks at every `step_log2`-th power of two in [lo, hi], labelled '1 MiB', '4 MiB'."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from ..memory import binary_size

    top = int(math.log2(hi))
    step = max(step_log2, step_log2 * math.ceil(top / (8 * step_log2)))   # <= ~8 ticks
    ticks = [2.0 ** p for p in range(0, top + 1, step) if lo <= 2.0 ** p <= hi]
    axis.set_major_locator(FixedLocator(ticks))
    axis.set_minor_locator(NullLocator())
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: binary_size(int(x))))


def count_ticks(axis, unit: str = "") -> None:
    """Log-axis labels as '1e9' style plain text (no mathtext), with an optional unit."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, numticks=8))
    axis.set_major_formatter(FuncFormatter(
        lambda x, _pos: f"1e{int(round(math.log10(x)))}{unit}" if x > 0 else ""))
    axis.set_minor_formatter(NullFormatter())
