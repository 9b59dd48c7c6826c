"""Checkers for lab 12 (after notebook 12): Hopper's wgmma matrix descriptor and the
128-byte swizzle, written by the learner and checked against the course's layout model
(`flashcourse.cuda.hopper.wgmma_layouts`, from the PTX ISA's "Matrix Descriptor Format" and
"Shared Memory Matrix Layout").

The learner writes

    my_descriptor(start, lbo, sbo, swizzle) -> int
        the 64-bit descriptor of a shared-memory tile: start, LBO and SBO given in bytes,
        each stored >> 4 in 14 bits (bits 0-13, 16-29, 32-45), base offset 0 (bits 49-51),
        the swizzle mode in bits 62-63 (None: 0, 128-byte: 1, 64-byte: 2, 32-byte: 3);
    my_swizzled_offset(row, k) -> int
        the byte offset of element (row, k) of a K-major fp16 tile of ROWS x 64 (one
        128-byte row per tile row) stored with the 128-byte swizzle: the 16-byte chunk
        number (bits 4-6) XORed with the row's place in its 8-row atom (bits 7-9).

Each checker compares every case with the model and names the typical slips: addresses
in bytes where the fields hold 16-byte units, LBO and SBO exchanged, the swizzle code of
another mode (or CUTLASS's Swizzle<3,4,3> read as the code 3, or the row width itself in
place of its code), the XOR taken from or put
on the wrong bits, k counted in bytes or the offset given in 16-byte units.
"""

from __future__ import annotations

import numpy as np

from ..cuda.hopper import wgmma_layouts as W
from ._harness import TODO_LINE, Case, Result, run_checks

ROWS = 64              # rows of the swizzled tile (8 atoms of 8 rows)
WIDTH = 64             # fp16 elements per 128-byte row
ELEM_BYTES = 2

#: (start, lbo, sbo, swizzle) of the descriptor cases: a K tile with the 128-byte swizzle
#: at byte 8192, no-swizzle (interleaved) tiles as the course's kernel uses them, and the
#: other two swizzle modes
DESCRIPTOR_CASES = [
    ("K tile, 128-byte swizzle, at byte 8192", (8192, 16, 1024, 128)),
    ("Q tile, no swizzle (the course's kernel: LBO 128, SBO 16 x 64)", (0, 128, 1024, None)),
    ("V tile, no swizzle, MN-major strides, at byte 40960", (40960, 128, 1024, None)),
    ("64-byte swizzle at byte 3072", (3072, 16, 512, 64)),
    ("32-byte swizzle at byte 49152, large SBO", (49152, 16, 65520, 32)),
]

HINT_DESCRIPTOR = (
    "Pack the fields: (start >> 4) in bits 0-13, (lbo >> 4) in bits 16-29, (sbo >> 4) in "
    "bits 32-45, the swizzle code in bits 62-63 (None 0, 128-byte 1, 64-byte 2, 32-byte 3).",
    "Shift each byte value right by 4, then left to its field's first bit (0, 16, 32), the "
    "code left by 62, and OR the four together.")
HINT_UNITS = (
    "One of your fields holds its value in bytes, but the descriptor stores start, LBO and "
    "SBO in 16-byte units (14 bits each, so 256 KiB of shared memory fit). Shift each right "
    "by 4 before packing it.",
    "(start >> 4), (lbo >> 4) << 16, (sbo >> 4) << 32.")
HINT_SWAP = (
    "LBO and SBO are exchanged: the leading dimension byte offset (bits 16-29) is the step "
    "between core matrices along K, the stride dimension byte offset (bits 32-45) the step "
    "to the next 8 along M or N (the next 8 rows of a K-major tile).",
    "lbo goes to bit 16, sbo to bit 32.")
HINT_SWIZZLE_CODE = (
    "The swizzle bits (62-63) hold another mode's code: 128-byte is 1, 64-byte 2, 32-byte 3, "
    "none 0 (PTX ISA, Matrix Descriptor Format). The 3 of CUTLASS's Swizzle<3,4,3> is the "
    "number of row bits XORed, not this code.",
    "A table {None: 0, 128: 1, 64: 2, 32: 3}, shifted to bit 62.")
HINT_SWIZZLE_RAW = (
    "Your swizzle bits hold the row width itself (128, 64 or 32) shifted to bit 62, so the "
    "descriptor runs past 64 bits: the 2-bit field takes the mode's code, 128-byte 1, "
    "64-byte 2, 32-byte 3, none 0 (PTX ISA, Matrix Descriptor Format).",
    "A table {None: 0, 128: 1, 64: 2, 32: 3}, and its code shifted to bit 62.")
HINT_FIELD_PLACE = (
    "A field is in the wrong bits (the line above says which): start in bits 0-13, LBO in "
    "16-29, SBO in 32-45, the swizzle mode in 62-63.",
    "Shift LBO by 16, SBO by 32 and the swizzle code by 62.")
HINT_INT = ("Return the descriptor as one Python int (non-negative, below 2**64).",
            "Build it with | and << on ints; no floats (2**62 does not fit a float exactly).")
HINT_PLUS_SHIFT = ("Your descriptor is the fields added before they are shifted: in Python << "
                   "binds less tightly than +, so a + b << 16 is (a + b) << 16, and each later "
                   "shift moves the whole sum again (far past 64 bits here). Put each shifted "
                   "field in brackets, or join them with |.",
                   "(start >> 4) + ((lbo >> 4) << 16) + ..., or the same with |.")


def _as_int(y):
    if isinstance(y, (bool, float)) or not isinstance(y, (int, np.integer)):
        return None
    y = int(y)
    return y if 0 <= y < 1 << 64 else None


def _fields(y):
    return W.decode(y) if _as_int(y) is not None else None


def _desc_diagnoses(start, lbo, sbo, swizzle):
    right = W.descriptor(start, lbo, sbo, swizzle)
    code = W.SWIZZLE_CODE[swizzle]

    def raw(y):
        y = _as_int(y)
        return None if y is None else {"start": y & 0x3FFF, "lbo": y >> 16 & 0x3FFF,
                                       "sbo": y >> 32 & 0x3FFF, "mode": y >> 62 & 3}

    def bytes_fields(y, e):
        f = raw(y)
        return f is not None and (f["start"] == (start & 0x3FFF) != start >> 4
                                  or f["lbo"] == (lbo & 0x3FFF) != lbo >> 4
                                  or f["sbo"] == (sbo & 0x3FFF) != sbo >> 4
                                  or (_as_int(y) >> 16 & 0xFFFF) == lbo != lbo >> 4
                                  or (_as_int(y) >> 32 & 0xFFFF) == sbo != sbo >> 4)

    def swapped(y, e):
        f = raw(y)
        return f is not None and lbo != sbo and f["lbo"] == sbo >> 4 and f["sbo"] == lbo >> 4

    def mode_wrong(y, e):
        f = raw(y)
        return (f is not None and f["mode"] != code and
                (_as_int(y) & ~(3 << 62)) == (right & ~(3 << 62)))

    def mode_shifted(y, e):     # the right code one bit off bit 62 (at 61 or 63)
        y = _as_int(y)
        low = right & ((1 << 62) - 1)
        return y is not None and code > 0 and y in (low | code << 61, low | code << 63)

    def raw_width(y, e):        # the width (128, 64, 32) itself in bits 62 and up
        low = (1 << 62) - 1
        return (isinstance(y, (int, np.integer)) and not isinstance(y, bool) and swizzle
                and int(y) >> 62 == swizzle and int(y) & low == right & low)

    def plus_shift(y, e):       # start + lbo << 16 + sbo << 32 + code << 62, Python's order
        s4, l4, b4 = start >> 4, lbo >> 4, sbo >> 4
        return (isinstance(y, (int, np.integer)) and not isinstance(y, bool)
                and int(y) == s4 + l4 << 16 + b4 << 32 + code << 62)

    return [(raw_width, *HINT_SWIZZLE_RAW), (plus_shift, *HINT_PLUS_SHIFT),
            (lambda y, e: _as_int(y) is None, *HINT_INT),
            (bytes_fields, *HINT_UNITS), (swapped, *HINT_SWAP), (mode_shifted, *HINT_FIELD_PLACE),
            (mode_wrong, *HINT_SWIZZLE_CODE),
            (lambda y, e: True, *HINT_FIELD_PLACE)]


def _compare_descriptor(yours, expected):
    y = _as_int(yours)
    if y is None:
        return False, f"yours is {yours!r}, not an int below 2**64"
    if y == expected:
        return True, ""
    fy, fe = W.decode(y), W.decode(expected)
    if y >> 46 & 0xFFFF != expected >> 46 & 0xFFFF:
        fy["bits 46-63"], fe["bits 46-63"] = hex(y >> 46), hex(expected >> 46)
    bad = [k for k in fe if fy.get(k) != fe[k]]
    return False, (f"yours {hex(y)}, expected {hex(expected)}; read back as bytes: "
                   + ", ".join(f"{k} yours {fy.get(k)} expected {fe[k]}" for k in bad))


def _descriptor_case(name, args):
    start, lbo, sbo, swizzle = args
    expected = W.descriptor(start, lbo, sbo, swizzle)

    def run(fn):
        return fn(start, lbo, sbo, swizzle), expected

    return Case(f"{name}: my_descriptor{args}", run, HINT_DESCRIPTOR[0],
                _desc_diagnoses(*args), hint2=HINT_DESCRIPTOR[1], compare=_compare_descriptor)


def check_descriptor(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_descriptor(start, lbo, sbo, swizzle) against the model's on five tiles."""
    return run_checks("my_descriptor", fn,
                      [_descriptor_case(name, args) for name, args in DESCRIPTOR_CASES],
                      verbose=verbose, hint_level=hint_level)


# -- the 128-byte swizzle -----------------------------------------------------------------

HINT_SWIZZLE = (
    "Element (row, k) of a K-major fp16 tile with 128-byte rows sits at row x 128 + k x 2 "
    "before the swizzle; the swizzle XORs that offset's 16-byte chunk number (bits 4-6) "
    "with the row's place in its atom of 8 rows (bits 7-9 of the offset).",
    "The plain offset is 128 bytes per row plus 2 bytes per k; shift it right by 7 and "
    "keep 3 bits (& 7), shift those left by 4 and XOR them into the plain offset.")
HINT_NO_SWIZZLE = (
    "That is the plain row-major offset: the 128-byte swizzle moves each 16-byte chunk "
    "(chunk c of row r goes to chunk c XOR (r mod 8)), so that 8 rows' chunk c fall in 8 "
    "different bank groups.",
    "XOR bits 4-6 of the offset with bits 7-9.")
HINT_XOR_BITS = (
    "The XOR uses the wrong bits: it takes the chunk number (bits 4-6, 16 bytes each) and "
    "XORs it with the row's place inside its 8-row atom, row mod 8 (bits 7-9 of the "
    "offset). The other bits (the byte inside a chunk, the atom number) stay as they are.",
    "offset ^ (((offset >> 7) & 7) << 4): the mask 7 keeps three row bits, the << 4 puts "
    "them on the chunk bits.")
HINT_ELEM = (
    "k counts fp16 elements of 2 bytes: the byte offset along a row is 2 k.",
    "Multiply k by the 2 bytes of an fp16 element.")
HINT_OFFSET_UNITS = (
    "Yours is in 16-byte units: the question asks for the byte offset (the 16-byte units "
    "are the descriptor's, not the address's).",
    "Do not shift the offset right by 4.")


HINT_OFFSET_INT = (
    "A byte offset is a whole number: return an int (the line above shows what yours "
    "returned). / gives a float even when it divides exactly, and hex() or str() give text; "
    "use //, the shifts and the bit operators, and print hex() separately.",
    "Every operation of the swizzle is an integer one: *, +, //, >>, <<, &, ^.")
#: the checker's own TypeError for a result that is not an int (a float, a string)
NOT_INT = [((lambda exc: isinstance(exc, TypeError) and "not an int" in str(exc)),
            *HINT_OFFSET_INT)]


def swizzled_offsets(fn) -> tuple[np.ndarray, np.ndarray]:
    """(yours, the model's) byte offsets of every element of the ROWS x WIDTH tile."""
    rows, ks = np.meshgrid(np.arange(ROWS), np.arange(WIDTH), indexing="ij")
    want = W.kmajor_offset(rows, ks, 128, ELEM_BYTES, ROWS)
    yours = np.full(want.shape, -1, dtype=np.int64)
    for r in range(ROWS):
        for k in range(WIDTH):
            y = fn(r, k)
            if isinstance(y, (bool, float)) or not isinstance(y, (int, np.integer)):
                raise TypeError(f"my_swizzled_offset({r}, {k}) returned {y!r}, not an int")
            yours[r, k] = int(y)
    return yours, want


def _offset_mistakes():
    r, k = np.meshgrid(np.arange(ROWS), np.arange(WIDTH), indexing="ij")
    plain = r * 128 + 2 * k
    right = W.swizzle_offset(plain, 128)
    xor_wrong = [plain ^ (((r // 8) % 8) << 4),         # the atom number, not row mod 8
                 plain ^ (r % 8),                       # onto the bytes of a chunk
                 plain ^ ((r % 8) << 7),                # onto the row bits
                 plain ^ (((plain >> 4) & 7) << 7),     # the chunk bits into the row bits
                 plain ^ (((plain >> 7) & 3) << 4),     # two row bits: the 64-byte mode
                 *[plain ^ (((plain >> a) & 7) << b)    # three bits from or onto other places
                   for a, b in ((6, 4), (8, 4), (7, 3), (7, 5))]]
    return [(plain, HINT_NO_SWIZZLE), *[(w, HINT_XOR_BITS) for w in xor_wrong],
            (W.swizzle_offset(r * 128 + k, 128), HINT_ELEM), (r * 128 + k, HINT_ELEM),
            (right >> 4, HINT_OFFSET_UNITS)]


def _swizzle_case():
    mistakes = _offset_mistakes()

    def run(fn):
        return swizzled_offsets(fn)

    def compare(yours, expected):
        bad = np.argwhere(yours != expected)
        if not bad.size:
            return True, ""
        r, k = (int(i) for i in bad[0])
        return False, (f"{len(bad)} of {yours.size} offsets differ, first at (row {r}, k {k}): "
                       f"yours {int(yours[r, k])}, expected {int(expected[r, k])}")

    diagnoses = [((lambda y, e, w=w: bool(np.array_equal(y, w))), *hint) for w, hint in mistakes]
    return Case(f"every element of a {ROWS} x {WIDTH} fp16 tile, 128-byte swizzle",
                run, HINT_SWIZZLE[0], diagnoses, hint2=HINT_SWIZZLE[1], compare=compare,
                error_diagnoses=NOT_INT)


def check_swizzled_offset(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_swizzled_offset(row, k) against the model for all 64 x 64 elements."""
    return run_checks("my_swizzled_offset", fn, [_swizzle_case()], verbose=verbose,
                      hint_level=hint_level)


# -- going further: every swizzle mode ------------------------------------------------------

HINT_MODES = (
    "my_swizzle(offset, swizzle) applies the swizzle of `swizzle`-byte rows (32, 64, 128, or "
    "None for none) to a byte offset: the chunk bits 4 and up are XORed with the row bits "
    "from bit 7, as many bits as it takes to number a row's 16-byte chunks: 1 for 32-byte "
    "rows (2 chunks), 2 for 64 (4), 3 for 128 (8); None leaves the offset as it is.",
    "The mask of row bits is (row bytes / 16) - 1: 1, 3, 7.")
HINT_MODES_MASK = (
    "Your mask of row bits is wrong for this mode: the XOR takes log2(row bytes / 16) row "
    "bits, so the mask is 1 for 32-byte rows, 3 for 64-byte rows, 7 for 128-byte rows (row "
    "bytes / 16 - 1: row bytes / 16 itself, 2, 4, 8, is a single bit).",
    "A table {32: 1, 64: 3, 128: 7}, or (swizzle // 16) - 1.")
HINT_MODES_NONE = ("With swizzle None the offset stays as it is.",
                   "Return the offset unchanged when swizzle is None.")
MODE_OFFSETS = 4096        # bytes of each mode checked: four 1024-byte atoms


def _modes_case(mode):
    offsets = np.arange(MODE_OFFSETS)
    want = W.swizzle_offset(offsets, mode)

    def run(fn):
        yours = []
        for o in offsets:
            y = fn(int(o), mode)
            if isinstance(y, (bool, float)) or not isinstance(y, (int, np.integer)):
                raise TypeError(f"my_swizzle({int(o)}, {mode}) returned {y!r}, not an int")
            yours.append(int(y))
        return np.array(yours), want

    def compare(yours, expected):
        bad = np.flatnonzero(yours != expected)
        if not bad.size:
            return True, ""
        return False, (f"{bad.size} of {yours.size} offsets differ, first {int(bad[0])}: yours "
                       f"{int(yours[bad[0]])}, expected {int(expected[bad[0]])}")

    # any mask of up to four row bits: 8 for 128-byte rows is row bytes / 16 without the - 1
    masks = [offsets ^ (((offsets >> 7) & m) << 4) for m in range(16)
             if m != W.SWIZZLE_MASK[mode]]
    diagnoses = [((lambda y, e, w=w: bool(np.array_equal(y, w))), *HINT_MODES_MASK)
                 for w in masks]
    if mode is None:
        diagnoses = [((lambda y, e: not np.array_equal(y, e)), *HINT_MODES_NONE)]
    return Case(f"swizzle {mode}: offsets 0 .. {MODE_OFFSETS - 1}", run, HINT_MODES[0],
                diagnoses, hint2=HINT_MODES[1], compare=compare, error_diagnoses=NOT_INT)


def check_swizzle_modes(fn, *, verbose: bool = True, hint_level: int = 1) -> Result:
    """my_swizzle(offset, swizzle) against the model for 128, 64, 32-byte rows and None."""
    return run_checks("my_swizzle", fn, [_modes_case(m) for m in (128, 64, 32, None)],
                      verbose=verbose, hint_level=hint_level)


def show_fields(fn, start: int, lbo: int, sbo: int, swizzle) -> None:
    """Print the fields of your descriptor read back by the model, next to the model's."""
    try:
        yours = fn(start, lbo, sbo, swizzle)
    except NotImplementedError:
        print(f"{TODO_LINE}: fill in my_descriptor first.")
        return
    want = W.descriptor(start, lbo, sbo, swizzle)
    print(f"my_descriptor({start}, {lbo}, {sbo}, {swizzle}) = "
          f"{hex(yours) if _as_int(yours) is not None else repr(yours)}; expected {hex(want)}")
    if _as_int(yours) is not None:
        print(f"  read back: {W.decode(yours)}")
    print(f"  expected:  {W.decode(want)}")


def show_bank_groups(fn, k: int = 0) -> None:
    """The bank group (16-byte chunk mod 8) that element (row, k) of rows 0..7 falls in,
    through your offsets and through the unswizzled ones, and each read's conflict: eight
    threads reading one 16-byte column of eight rows."""
    try:
        yours = [fn(r, k) for r in range(W.ATOM_ROWS)]
    except NotImplementedError:
        print(f"{TODO_LINE}: fill in my_swizzled_offset first.")
        return
    bad = [(r, y) for r, y in enumerate(yours) if _as_int(y) is None]
    if bad:                       # None, a float, text: the checker above names the cause
        print(f"my_swizzled_offset({bad[0][0]}, {k}) returned {bad[0][1]!r}, not a whole "
              "number of bytes: run check_swizzled_offset above")
        return
    plain = [r * 128 + ELEM_BYTES * k for r in range(W.ATOM_ROWS)]
    for name, offs in (("unswizzled", plain), ("yours", yours)):
        groups = [int(g) for g in W.bank_group(offs)]
        print(f"  {name:>10}: bank groups {groups}: {W.conflict_degree(offs)}-way")


HINTS = [v for name, v in dict(globals()).items() if name.startswith("HINT_")]
