"""tools/hopper_sass.py's readings of ptxas's output, on SASS text written here (compiling
needs the CUDA compiler wheels, which CI does not install; the tool's docstring says how)."""
from helpers import tool

hs = tool("hopper_sass")


def _sass(*lines):
    """cuobjdump -sass style: an address comment, the instruction, its encoding."""
    return "\n".join(f"        /*{16 * i:04x}*/   {x} ;   /* 0x000000000000 */"
                     for i, x in enumerate(lines))


HOISTED = _sass("HGMMA.64x64x16.F32 R88, gdesc[UR20], RZ, !UPT, gsb0",
                "HGMMA.64x128x16.F32 R24, R120, gdesc[UR16].tnspB, R24, gsb0",
                "WARPGROUP.DEPBAR.LE gsb0, 0x1", "FMNMX R9, R89, R88, !PT",
                "WARPGROUP.DEPBAR.LE gsb0, 0x0", "MUFU.EX2 R88, R88", "MUFU.EX2 R89, R89",
                "F2FP.F16.F32.PACK_AB R120, R89, R88", "BAR.SYNC.DEFER_BLOCKING 0x0",
                "MUFU.EX2 R90, R90")
OVERLAPPED = _sass("HGMMA.64x128x16.F32 R24, R120, gdesc[UR16].tnspB, R24, gsb0",
                   "WARPGROUP.DEPBAR.LE gsb0, 0x1", "MUFU.EX2 R88, R88", "MUFU.EX2 R89, R89",
                   "MUFU.EX2 R90, R90", "WARPGROUP.DEPBAR.LE gsb0, 0x0",
                   "HGMMA.64x64x16.F32 R88, gdesc[UR20], RZ, !UPT, gsb0", "MUFU.EX2 R1, R1")


def test_the_report_counts_the_exponentials_on_each_side_of_the_product_wait():
    assert hs.wait_report(HOISTED) == [{"between": 0, "after": 2, "instructions_between": 2}]
    assert hs.wait_report(OVERLAPPED) == [{"between": 3, "after": 0,
                                           "instructions_between": 4}]
    assert hs.wait_report(_sass("HGMMA.64x64x16.F32 R88, gdesc[UR20], RZ, !UPT, gsb0",
                                "WARPGROUP.DEPBAR.LE gsb0, 0x0", "MUFU.EX2 R8, R8")) == []


def test_instructions_drop_addresses_and_encodings_and_keep_predicates():
    assert hs.instructions(_sass("@P0 BRA 0x2980", "EXIT")) == ["@P0 BRA 0x2980", "EXIT"]
    assert hs.instructions("Function : kernel\n  .headerflags @\"EF_CUDA_SM90\"") == []


def test_serialization_is_read_from_ptxas_info_line():
    line = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions "
            "are serialized due to non wgmma instructions reading accumulator registers")
    assert hs.serialized(line)
    assert hs.serialized("ptxas info    : (C7519) Potential Performance Loss: wgmma.mma_async "
                         "instructions are serialized due to program dependence on "
                         "compiler-inserted WG.AR in divergent path in the function 'k'")
    assert not hs.serialized("ptxas info    : Used 166 registers, used 1 barriers")


def test_a_copy_wait_between_the_product_waits_does_not_end_the_window():
    """DEPBAR.LE SB0 (cp.async) and gsb0 waits share a mnemonic: only the gsb0, 0x0 wait
    closes the window opened by gsb0, 0x1."""
    sass = _sass("WARPGROUP.DEPBAR.LE gsb0, 0x1", "MUFU.EX2 R1, R1", "DEPBAR.LE SB0, 0x0",
                 "MUFU.EX2 R2, R2", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "MUFU.EX2 R3, R3")
    assert hs.wait_report(sass) == [{"between": 2, "after": 1, "instructions_between": 4}]
