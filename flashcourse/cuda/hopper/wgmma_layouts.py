"""wgmma_layouts: Hopper's shared-memory matrix descriptors and swizzled layouts, in numpy.

On Hopper (compute capability 9.0) the warpgroup instruction `wgmma.mma_async` (PTX ISA,
"Asynchronous Warpgroup Level Matrix Multiply-Accumulate") reads its B operand, and
optionally its A operand, straight from shared memory. It does not take an address per
thread, as `ldmatrix` does: it takes one 64-bit **matrix descriptor** per operand, which
says where the tile starts and how it is laid out (PTX ISA, "Matrix Descriptor Format"):

    bits  0-13  start address >> 4          (shared-memory byte address, 16-byte units)
    bits 16-29  leading dimension byte offset >> 4  (LBO)
    bits 32-45  stride dimension byte offset >> 4   (SBO)
    bits 49-51  matrix base offset          (0 when the tile starts on a swizzle atom)
    bits 62-63  swizzle mode: 0 none, 1 128-byte, 2 64-byte, 3 32-byte

The unit of a layout is the **core matrix**: 8 rows of 16 bytes (8 x 8 fp16). Without a
swizzle, each core matrix is 128 contiguous bytes; LBO is the byte step between core
matrices along K, SBO along M (for A) or N (for B). With a swizzle, a tile whose K runs
along rows of 32, 64 or 128 bytes ("K-major") is stored in **atoms** of 8 such rows, and
inside each atom the 16-byte chunk index of a byte is XORed with bits of its row index:

    swizzled = offset ^ (((offset >> 7) & mask) << 4),   mask = 1, 3, 7 for 32, 64, 128 B

(CUTLASS writes these as Swizzle<1,4,3>, <2,4,3>, <3,4,3>). Why: eight threads that read
the same 16-byte column of eight consecutive 128-byte rows would otherwise all hit the
same four banks (a row is exactly 32 banks x 4 bytes), an 8-way bank conflict; after the
XOR the eight chunks fall in eight different groups of banks. The hardware applies the
same XOR to the absolute address bits, so a swizzled tile must start on a 1024-byte (8 x
128 B) boundary, and stepping K by 16 elements (one wgmma's k16 = 32 bytes of a row)
inside an atom is done by adding 32 bytes to the descriptor's start address.

This module is the model the course's Hopper notebook draws and the tests check; the
instructions themselves, written from Numba, are in `ptx/wgmma.py`. No GPU needed.
The course's kernel (hopper_kernels.py) uses the no-swizzle layouts modelled at the end
(`interleaved_kmajor`, `interleaved_mnmajor`; `operand_address` is the hardware's read).
"""

from __future__ import annotations

import numpy as np

#: descriptor swizzle field per mode (bytes per swizzled row; None = no swizzle)
SWIZZLE_CODE = {None: 0, 128: 1, 64: 2, 32: 3}
#: bits of the row index XORed into the 16-byte chunk index, per mode
SWIZZLE_MASK = {None: 0, 32: 1, 64: 3, 128: 7}
#: bytes of one core matrix row, and rows per core matrix / per swizzle atom
CHUNK = 16
ATOM_ROWS = 8
#: shared memory has 32 banks of 4 bytes: a 16-byte chunk covers one of 8 bank groups
BANK_GROUPS = 8
_FIELD = 1 << 14          # each of start, LBO, SBO is 14 bits (of 16-byte units)


def _mode(swizzle):
    if swizzle not in SWIZZLE_CODE:
        raise ValueError(f"swizzle must be one of None, 32, 64, 128 (bytes), got {swizzle!r}")
    return swizzle


def _units(value: int, name: str) -> int:
    value = int(value)
    if value < 0 or value % 16:
        raise ValueError(f"{name} must be a non-negative multiple of 16 bytes, got {value}")
    if value >> 4 >= _FIELD:
        raise ValueError(f"{name} must be below {_FIELD * 16} bytes (14 bits of 16-byte "
                         f"units), got {value}")
    return value >> 4


def descriptor(start: int, lbo: int, sbo: int, swizzle=None, base_offset: int = 0) -> int:
    """The 64-bit wgmma matrix descriptor of a shared-memory tile (byte values)."""
    mode = _mode(swizzle)
    if not 0 <= int(base_offset) < 8:
        raise ValueError(f"base_offset must be in 0..7, got {base_offset}")
    # With base offset 0 the swizzle pattern starts on an atom boundary (PTX ISA, "Matrix
    # Descriptor Format"): the tile starts there, or one k16 step further along the atom's
    # first row (the next k-step of an atom is the same descriptor, start + 32 bytes).
    if mode is not None and int(start) % (ATOM_ROWS * mode) >= mode and base_offset == 0:
        raise ValueError(f"a {mode}-byte swizzled tile must start on a {ATOM_ROWS * mode}-byte "
                         f"boundary, got start={start}")
    return (_units(start, "start") | _units(lbo, "lbo") << 16 | _units(sbo, "sbo") << 32
            | int(base_offset) << 49 | SWIZZLE_CODE[mode] << 62)


def decode(desc: int) -> dict:
    """The fields of a descriptor, in bytes: start, lbo, sbo, base_offset, swizzle."""
    desc = int(desc)
    code = desc >> 62 & 3
    return {"start": (desc & (_FIELD - 1)) << 4, "lbo": (desc >> 16 & (_FIELD - 1)) << 4,
            "sbo": (desc >> 32 & (_FIELD - 1)) << 4, "base_offset": desc >> 49 & 7,
            "swizzle": {v: k for k, v in SWIZZLE_CODE.items()}[code]}


def swizzle_offset(offset, swizzle=None):
    """Byte offset(s) after the swizzle of `swizzle`-byte rows (numpy arrays too): the
    16-byte chunk bits 4..6 XOR the row bits above bit 7; bits 0..3 stay."""
    mask = SWIZZLE_MASK[_mode(swizzle)]
    offset = np.asarray(offset, dtype=np.int64)
    return offset ^ (((offset >> 7) & mask) << 4)


def kmajor_offset(row, k, swizzle=128, elem_bytes: int = 2, rows: int = 64):
    """Byte offset of element (row, k) of a K-major tile of `rows` rows stored in
    `swizzle`-byte atoms (swizzle None: rows of 16 bytes, core matrices 128 contiguous
    bytes, the next 16 bytes of K one core-matrix column further). K wider than one atom
    row continues in the next atom column, `rows` x (row bytes) further."""
    row, k = np.asarray(row, dtype=np.int64), np.asarray(k, dtype=np.int64)
    width = (CHUNK if swizzle is None else _mode(swizzle)) // elem_bytes   # elements per row
    col, kk = k // width, k % width
    base = col * rows * width * elem_bytes + row * width * elem_bytes + kk * elem_bytes
    return swizzle_offset(base, swizzle)


def bank_group(offset):
    """Which of the 8 groups of 4 banks (16 bytes) a byte offset falls in."""
    return (np.asarray(offset, dtype=np.int64) // CHUNK) % BANK_GROUPS


def conflict_degree(offsets) -> int:
    """The most 16-byte chunks that one bank group serves in one access of `offsets`
    (one per thread, each reading 16 bytes): 1 is conflict-free, 8 fully serialised."""
    chunks = np.unique(np.asarray(offsets, dtype=np.int64) // CHUNK)
    return int(np.bincount(chunks % BANK_GROUPS, minlength=BANK_GROUPS).max())


def column_read(swizzle, chunk: int, row_bytes: int | None = None) -> np.ndarray:
    """Offsets of chunk `chunk` (16 bytes) of 8 consecutive rows of `row_bytes` (default:
    the swizzle's row), as 8 threads of a core-matrix load read them."""
    row_bytes = row_bytes or (swizzle or CHUNK)
    return swizzle_offset(np.arange(ATOM_ROWS) * row_bytes + chunk * CHUNK, swizzle)


def atom_chunks(swizzle=128) -> np.ndarray:
    """(8 rows, row bytes / 16) table: the physical 16-byte chunk that each logical chunk
    of one atom lands in (its bank group is that number mod 8)."""
    rb = _mode(swizzle) or CHUNK
    r, c = np.meshgrid(np.arange(ATOM_ROWS), np.arange(rb // CHUNK), indexing="ij")
    return (swizzle_offset(r * rb + c * CHUNK, swizzle) % rb) // CHUNK


# --------------------------------------------------------------------------------------
# The no-swizzle ("interleaved") layouts of the course's Hopper kernel, and what wgmma reads
# --------------------------------------------------------------------------------------

def operand_address(desc: int, mn, k, mn_major: bool = False):
    """Byte address(es) that wgmma reads for element (mn, k) of one k16 operand tile from a
    no-swizzle descriptor (PTX ISA, "Shared Memory Matrix Layout"): the tile is made of 8 x 8
    core matrices of 128 contiguous bytes; LBO steps between core matrices along K, SBO
    along M (or N). K-major: a core matrix row is 8 consecutive k of one mn (16 bytes);
    MN-major (B with the instruction's imm-trans-b = 1, e.g. V of P V; the descriptor itself
    has no transpose field): 8 consecutive mn of one k. Which stride is which for MN-major
    was checked on an H200 (exchanging them gave 1.3 relative error,
    benchmarks/results/h200_hopper_log.txt's layout probe)."""
    f = decode(desc)
    if f["swizzle"] is not None:
        raise ValueError("operand_address models the no-swizzle layout only")
    mn, k = np.asarray(mn, dtype=np.int64), np.asarray(k, dtype=np.int64)
    inner = (k % 8) * 16 + (mn % 8) * 2 if mn_major else (mn % 8) * 16 + (k % 8) * 2
    return f["start"] + (mn // 8) * f["sbo"] + (k // 8) * f["lbo"] + inner


def interleaved_kmajor(row, col, width: int):
    """Byte offset of element (row, col) of a K-major tile `width` elements wide (fp16/bf16)
    in the kernel's layout: core matrix (row // 8, col // 8) at (row // 8) (16 width) +
    (col // 8) 128, so LBO = 128 and SBO = 16 width (Q and K_j of hopper_kernels)."""
    row, col = np.asarray(row, dtype=np.int64), np.asarray(col, dtype=np.int64)
    return (row // 8) * (16 * width) + (col // 8) * 128 + (row % 8) * 16 + (col % 8) * 2


def interleaved_mnmajor(key, col, keys: int):
    """Byte offset of V_j[key, col] in the kernel's MN-major layout (`keys` rows): column
    chunk col // 8 at (col // 8) (16 keys), then 16 bytes per key, so one 16-byte row of V
    (8 values of one key) is one row of a core matrix: LBO = 128 (8 keys), SBO = 16 keys."""
    key, col = np.asarray(key, dtype=np.int64), np.asarray(col, dtype=np.int64)
    return (col // 8) * (16 * keys) + key * 16 + (col % 8) * 2
