"""The training text and its characters: load the shipped public-domain text, map
characters to token ids and back, cut random training sequences.

The text is Herman Melville's "Bartleby, the Scrivener" (1853), `texts/bartleby.txt`; its
source, licence and preparation are in `texts/README.md` (`strip_gutenberg` below did it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._checks import check_block

TEXT_DIR = Path(__file__).resolve().parent / "texts"
TEXT_FILE = TEXT_DIR / "bartleby.txt"


def load_text(path: Path | str = TEXT_FILE) -> str:
    """The shipped text (ASCII, lines ending in \\n)."""
    return Path(path).read_text(encoding="ascii")


def strip_gutenberg(raw: str) -> str:
    """The body of a Project Gutenberg plain-text file with every reference to Project
    Gutenberg removed, as its licence (section 1.C) asks of a copy that is shared without
    it: the text between the "*** START OF" and "*** END OF" marker lines, less the
    "Produced by" credit and the "End of Project Gutenberg's ..." line; CRLF becomes LF.
    """
    text = raw.replace("\r\n", "\n")
    lines = text.split("\n")
    starts = [i for i, s in enumerate(lines) if s.startswith("*** START OF")]
    ends = [i for i, s in enumerate(lines) if s.startswith("*** END OF")]
    if len(starts) != 1 or len(ends) != 1 or ends[0] <= starts[0]:
        raise ValueError("raw must hold one '*** START OF' line and, after it, one "
                         f"'*** END OF' line; found {len(starts)} and {len(ends)}")
    body = [s for s in lines[starts[0] + 1:ends[0]]
            if not s.startswith(("Produced by ", "End of Project Gutenberg",
                                 "End of the Project Gutenberg"))]
    out = "\n".join(body).strip() + "\n"
    if "gutenberg" in out.lower():
        raise ValueError("the body still mentions Project Gutenberg; strip it by hand")
    return out


class CharTokenizer:
    """One token per distinct character of a text, ids in sorted character order."""

    def __init__(self, text: str):
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, s: str) -> np.ndarray:
        unknown = sorted(set(s) - set(self.stoi))
        if unknown:
            raise ValueError(f"characters not in the vocabulary: {''.join(unknown)!r}")
        return np.array([self.stoi[c] for c in s], dtype=np.int64)

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


def split(ids: np.ndarray, val_fraction: float = 0.1):
    """(train, validation): the first 1 - val_fraction of the ids, and the rest."""
    n = int(round(len(ids) * (1 - val_fraction)))
    return ids[:n], ids[n:]


def get_batch(ids: np.ndarray, batch: int, block_size: int, rng):
    """B random windows of the ids: inputs x (B, T) and targets y (B, T), y = x shifted
    by one position (the next character at each position)."""
    batch = check_block(batch, "batch")
    block_size = check_block(block_size, "block_size")
    if len(ids) <= block_size:
        raise ValueError(f"the text has {len(ids)} tokens: too few for block_size="
                         f"{block_size} (needs more than block_size)")
    starts = rng.integers(0, len(ids) - block_size, size=batch)              # (B,)
    x = np.stack([ids[s:s + block_size] for s in starts])                    # (B, T)
    y = np.stack([ids[s + 1:s + 1 + block_size] for s in starts])            # (B, T)
    return x, y


# ---------------------------------------------------------------------------
# packed training sequences: short documents, one after another in a row of T
# ---------------------------------------------------------------------------

def split_sentences(s: str) -> list[str]:
    """The sentences of a text, each one short *document* for packed training: a sentence
    ends after '.', '!' or '?' followed by white space (spaces or a line break); the
    white space between two sentences belongs to neither. Line breaks inside a sentence
    stay (they are characters of the text). Empty pieces are dropped."""
    docs, start = [], 0
    for i in range(len(s) - 1):
        if s[i] in ".!?" and s[i + 1] in " \n":
            docs.append(s[start:i + 1])
            start = i + 1
            while start < len(s) and s[start] in " \n":
                start += 1
    docs.append(s[start:])
    return [d for d in (d.strip(" \n") for d in docs) if d]


def get_packed_batch(documents, batch: int, block_size: int, rng):
    """B rows of T = block_size positions, each a few whole documents packed one after
    another: x (B, T) inputs, y (B, T) targets and cu_seqlens, a list of B int64 arrays
    [0, end_1, ..., T] (where each document's positions end, as FlashAttention's varlen
    functions and `flashcourse.variants.library.document` take them).

    A row is filled with documents drawn at random from `documents` (a list of 1-D
    integer arrays of at least 2 ids). A document of n ids gives n - 1 positions:
    inputs d[0..n-2], targets d[1..n-1], so no target is the first id of the next
    document. The document that reaches the end of the row is cut there (its first ids
    kept)."""
    batch = check_block(batch, "batch")
    t = check_block(block_size, "block_size")
    docs = list(documents)
    if not docs:
        raise ValueError("documents must hold at least one document (a 1-D array of ids)")
    for i, d in enumerate(docs):
        d = np.asarray(d)
        if d.ndim != 1 or d.size < 2 or not np.issubdtype(d.dtype, np.integer):
            raise ValueError(f"documents[{i}] must be a 1-D integer array of at least 2 "
                             f"ids (one input and its target), got shape {d.shape} "
                             f"dtype {d.dtype}")
    x = np.empty((batch, t), np.int64)                                       # (B, T)
    y = np.empty((batch, t), np.int64)                                       # (B, T)
    cu_seqlens = []
    for b in range(batch):
        ends, fill = [0], 0
        while fill < t:
            d = np.asarray(docs[int(rng.integers(len(docs)))])
            n = min(d.size - 1, t - fill)                                    # positions
            x[b, fill:fill + n] = d[:n]
            y[b, fill:fill + n] = d[1:n + 1]
            fill += n
            ends.append(fill)
        cu_seqlens.append(np.array(ends, np.int64))
    return x, y, cu_seqlens
