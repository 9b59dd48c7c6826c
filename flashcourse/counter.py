"""A byte counter for outer-memory (HBM) traffic of the numpy attention paths.

The instrumented forwards (`flashcourse.tiled.forward(..., counter=c)` and
`flashcourse.dense.forward(..., counter=c)`) call `c.read(...)` for every block
they load from the outer-memory arrays and `c.write(...)` for every block they
store. The counter converts element counts to bytes with the sizes it was given:

    e  bytes per Q/K/V/O element   (default: the input's dtype itemsize)
    s  bytes per score             (default: e)
    4  bytes per softmax statistic (m, l or lse), as in flashcourse.traffic

so its totals can be compared, to the byte, with the IO model in
`flashcourse.traffic`. It also keeps an ordered event log, which the tile-schedule
widget replays step by step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._checks import check_block, check_bool

KINDS = ("element", "score", "stat")


@dataclass(frozen=True)
class Event:
    """One load, store, computed tile or skipped tile, in program order.

    op: 'read', 'write', 'compute' (a score tile was formed) or 'skip' (a tile
        hidden by the causal mask was never formed).
    tensor: 'Q', 'K', 'V', 'O', 'S', 'P', 'm', 'l', 'lse' for reads/writes, '' else.
    head: index of the (flattened) batch*head.
    rows: (start, stop) positions of the block along its tensor's T axis.
    tile: (query block index, key block index) being worked on, or None.
    nbytes: bytes moved (0 for compute/skip).
    """

    op: str
    tensor: str
    head: int
    rows: tuple
    tile: tuple | None
    nbytes: int


@dataclass
class TrafficCounter:
    """Counts bytes read from and written to outer memory.

    Args:
        bytes_per_element: e, bytes per Q/K/V/O element; None = input itemsize.
        bytes_per_score: s, bytes per score/probability; None = e.
        bytes_per_stat: bytes per softmax statistic (m, l, lse); the model uses 4.
        record_events: keep the ordered event log (turn off for huge runs).
    """

    bytes_per_element: int | None = None
    bytes_per_score: int | None = None
    bytes_per_stat: int = 4
    record_events: bool = True
    read_bytes: int = 0
    write_bytes: int = 0
    by_tensor: dict = field(default_factory=dict)
    events: list = field(default_factory=list)

    def __post_init__(self):
        self.record_events = check_bool(self.record_events, "record_events")
        for name in ("bytes_per_element", "bytes_per_score", "bytes_per_stat"):
            size = getattr(self, name)
            if size is not None or name == "bytes_per_stat":
                setattr(self, name, check_block(size, name))     # a positive int, not bool

    def bind(self, itemsize: int) -> None:
        """Called by an instrumented forward with its input's itemsize (bytes)."""
        if self.bytes_per_element is None:
            self.bytes_per_element = check_block(int(itemsize), "bytes_per_element")
        if self.bytes_per_score is None:
            self.bytes_per_score = self.bytes_per_element

    def _bytes(self, n_elements: int, kind: str) -> int:
        if self.bytes_per_element is None:
            raise RuntimeError("TrafficCounter.bind(itemsize) must be called before counting")
        size = {"element": self.bytes_per_element, "score": self.bytes_per_score,
                "stat": self.bytes_per_stat}[kind]
        return int(n_elements) * int(size)

    def _log(self, op, tensor, nbytes, head, rows, tile):
        if self.record_events:
            self.events.append(Event(op, tensor, head, tuple(rows), tile, nbytes))

    def read(self, tensor: str, n_elements: int, *, kind: str = "element",
             head: int = 0, rows=(0, 0), tile=None) -> None:
        """Count a load of `n_elements` of `tensor` from outer memory."""
        nbytes = self._bytes(n_elements, kind)
        self.read_bytes += nbytes
        r, w = self.by_tensor.get(tensor, (0, 0))
        self.by_tensor[tensor] = (r + nbytes, w)
        self._log("read", tensor, nbytes, head, rows, tile)

    def write(self, tensor: str, n_elements: int, *, kind: str = "element",
              head: int = 0, rows=(0, 0), tile=None) -> None:
        """Count a store of `n_elements` of `tensor` to outer memory."""
        nbytes = self._bytes(n_elements, kind)
        self.write_bytes += nbytes
        r, w = self.by_tensor.get(tensor, (0, 0))
        self.by_tensor[tensor] = (r, w + nbytes)
        self._log("write", tensor, nbytes, head, rows, tile)

    def compute(self, tile, *, head: int = 0) -> None:
        """Record that score tile `tile` = (i, j) was formed on chip."""
        self._log("compute", "", 0, head, (0, 0), tile)

    def skip(self, tile, *, head: int = 0) -> None:
        """Record that tile (i, j) was skipped: the causal mask hides all of it."""
        self._log("skip", "", 0, head, (0, 0), tile)

    @property
    def total_bytes(self) -> int:
        return self.read_bytes + self.write_bytes


class NullCounter:
    """The counter the numpy paths use when none is given: every call does nothing, so
    the loops read like the paper's pseudocode, with no `if counter is not None`."""

    def bind(self, itemsize: int) -> None:
        pass

    def read(self, tensor, n_elements, *, kind="element", head=0, rows=(0, 0), tile=None):
        pass

    def write(self, tensor, n_elements, *, kind="element", head=0, rows=(0, 0), tile=None):
        pass

    def compute(self, tile, *, head: int = 0) -> None:
        pass

    def skip(self, tile, *, head: int = 0) -> None:
        pass


def check_counter(counter):
    """`counter` ready to use: a TrafficCounter (bound by the caller) or, for None, a
    NullCounter. Anything else is a TypeError naming the argument."""
    if counter is None:
        return NullCounter()
    if not isinstance(counter, (TrafficCounter, NullCounter)):
        raise TypeError(f"counter must be a flashcourse.counter.TrafficCounter or None, "
                        f"got {type(counter).__name__}")
    return counter
