"""flashcourse.cuda.hopper.wgmma_layouts: Hopper's matrix descriptors and swizzles, in numpy."""

import numpy as np
import pytest

from flashcourse.cuda.hopper import wgmma_layouts as W


def test_descriptor_fields_sit_where_the_ptx_isa_puts_them():
    d = W.descriptor(start=0x400, lbo=16, sbo=1024, swizzle=128)
    assert d & 0x3FFF == 0x400 >> 4                 # bits 0-13
    assert d >> 16 & 0x3FFF == 1                     # bits 16-29
    assert d >> 32 & 0x3FFF == 1024 >> 4             # bits 32-45
    assert d >> 62 == 1                              # 128-byte swizzle
    assert W.descriptor(0, 128, 256) >> 62 == 0      # none
    assert W.descriptor(0, 0, 0, 64) >> 62 == 2 and W.descriptor(0, 0, 0, 32) >> 62 == 3


@pytest.mark.parametrize("swizzle", [None, 32, 64, 128])
def test_decode_inverts_descriptor(swizzle):
    fields = {"start": 2048, "lbo": 16, "sbo": 1024, "base_offset": 0, "swizzle": swizzle}
    assert W.decode(W.descriptor(**fields)) == fields


@pytest.mark.parametrize("kwargs,match", [
    (dict(start=8, lbo=0, sbo=0), "start must be a non-negative multiple of 16"),
    (dict(start=0, lbo=-16, sbo=0), "lbo must be a non-negative multiple of 16"),
    (dict(start=0, lbo=0, sbo=1 << 18), "sbo must be below 262144"),
    (dict(start=0, lbo=0, sbo=0, swizzle=96), "swizzle must be one of"),
    (dict(start=512, lbo=0, sbo=0, swizzle=128), "must start on a 1024-byte boundary"),
    (dict(start=0, lbo=0, sbo=0, base_offset=8), "base_offset must be in 0..7"),
])
def test_bad_descriptor_fields_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        W.descriptor(**kwargs)


def test_a_k_step_inside_a_swizzle_atom_is_a_valid_start():
    """The next k16 step of a K-major atom is the same descriptor 32 bytes further (base
    offset 0); a start in a later row of the atom is not (it needs the base offset)."""
    for k_step in (32, 64, 96):
        assert W.decode(W.descriptor(1024 + k_step, 16, 1024, 128))["start"] == 1024 + k_step
    assert W.decode(W.descriptor(512 + 32, 16, 512, 64))["start"] == 544
    with pytest.raises(ValueError, match="must start on a 1024-byte boundary"):
        W.descriptor(1024 + 128, 16, 1024, 128)
    with pytest.raises(ValueError, match="must start on a 512-byte boundary"):
        W.descriptor(512 + 64, 16, 512, 64)


@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_swizzle_permutes_chunks_inside_each_atom_and_keeps_the_low_bits(swizzle):
    atom = W.ATOM_ROWS * swizzle
    off = np.arange(4 * atom)
    s = W.swizzle_offset(off, swizzle)
    assert np.array_equal(s & 15, off & 15)                       # bytes inside a chunk
    for a in range(4):                                            # a bijection per atom
        block = s[a * atom:(a + 1) * atom]
        assert np.array_equal(np.sort(block), off[a * atom:(a + 1) * atom])
    assert np.array_equal(W.swizzle_offset(off, None), off)


@pytest.mark.parametrize("swizzle", [32, 64, 128])
def test_a_column_of_eight_rows_is_conflict_free_only_when_swizzled(swizzle):
    """Eight threads reading the same 16-byte column of the 8 rows of an atom: every
    column hits 8 different bank groups with the swizzle; without it (same row length)
    (row bytes) / 16 rows share one group."""
    for chunk in range(swizzle // W.CHUNK):
        assert W.conflict_degree(W.column_read(swizzle, chunk)) == 1
        plain = np.arange(W.ATOM_ROWS) * swizzle + chunk * W.CHUNK
        assert W.conflict_degree(plain) == swizzle // W.CHUNK


def test_atom_chunks_is_a_latin_square_for_128_bytes():
    t = W.atom_chunks(128)
    assert t.shape == (8, 8)
    for i in range(8):
        assert sorted(t[i]) == list(range(8)) and sorted(t[:, i]) == list(range(8))
    assert np.array_equal(W.atom_chunks(None), np.zeros((8, 1), int))


def test_kmajor_offsets_cover_the_tile_once_and_step_k_by_atoms():
    rows, k = 64, 128                                  # e.g. a 64 x 128 fp16 tile of Q
    r, kk = np.meshgrid(np.arange(rows), np.arange(k), indexing="ij")
    for swizzle in (None, 32, 64, 128):
        off = W.kmajor_offset(r, kk, swizzle, rows=rows)
        assert np.array_equal(np.sort(off.ravel() // 2), np.arange(rows * k))
    # 128-byte rows: k = 64..127 live in the second atom column, 64 rows x 128 B further
    assert int(W.kmajor_offset(0, 64, 128, rows=rows)) == rows * 128
    # one wgmma k16 step (32 bytes) inside an atom is a +32 on an unswizzled row 0
    assert int(W.kmajor_offset(0, 16, 128, rows=rows)) == 32
    # without a swizzle, core matrices are 128 contiguous bytes (8 rows x 16 B)
    assert [int(W.kmajor_offset(i, 0, None, rows=rows)) for i in range(3)] == [0, 16, 32]


def test_the_swizzle_picture_draws_and_names_bad_settings():
    import matplotlib
    matplotlib.use("Agg")
    from flashcourse.plots import hopper
    fig = hopper.plot_swizzle(128, chunk=2)
    titles = [ax.get_title() for ax in fig.axes]
    assert "8-way" in titles[0] and "1-way" in titles[1]
    with pytest.raises(ValueError, match="swizzle must be 32, 64 or 128"):
        hopper.plot_swizzle(16)
    with pytest.raises(ValueError, match="chunk must be in 0..3"):
        hopper.plot_swizzle(64, chunk=4)
