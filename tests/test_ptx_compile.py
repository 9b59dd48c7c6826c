"""tools/compile_ptx.py: the paged, FP8 and variants kernels compiled for sm_90 and sm_80 by
NVIDIA's compilers, without a GPU (the simulator accepts code the real compiler refuses).

The compile itself needs NVVM and NVRTC (a GPU machine's toolkit, or `numba-cuda[cu13]`;
not in requirements.txt): without them it is skipped, saying so. Nothing is downloaded.
Its readings of PTX and ptxas output are checked on text here, always."""
import os
import subprocess
import sys

import pytest
from helpers import TOOLS, tool

cp = tool("compile_ptx")

PTX = """
.visible .entry k(
\t.param .u64 k_param_0
)
{
\t.local .align 16 .b8 \t__local_depot0[128];
\t.local .align 4 .b8 \t__local_depot1[8];
\tst.local.v4.f32 \t[%rd9], {%f1, %f2, %f3, %f4};
\tld.local.f32 \t%f5, [%rd100];
\tld.local.v2.f32 \t{%f6, %f7}, [%rd9+16];
\tcall.uni \t(retval0), foo, (param0);
\tcvt.rn.f16x2.e4m3x2 \t%r1, %rs1;
\tmma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%f1}, {%r1}, {%r2}, {%f2};
\tret;
}
"""
PTXAS = """ptxas info    : Compiling entry function 'k' for 'sm_90'
ptxas info    : Function properties for k
    16 bytes stack frame, 24 bytes spill stores, 24 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 1024 bytes smem, 400 bytes cmem[0]
"""


def test_ptx_facts_count_local_memory_calls_and_fp8_conversions():
    f = cp.ptx_facts(PTX)
    assert f == {"local_bytes": 136, "ld_local": 2, "st_local": 1, "calls": 1, "mma": 1,
                 "fp8_cvt": 1}
    assert cp.ptx_facts(".visible .entry k()\n{\n\tret;\n}")["local_bytes"] == 0


def test_ptxas_facts_read_registers_spills_and_static_shared_memory():
    assert cp.ptxas_facts(PTXAS) == {"regs": 255, "stack": 16, "spill_stores": 24,
                                     "spill_loads": 24, "smem": 1024}
    assert cp.ptxas_facts("ptxas info    : Used 40 registers")["smem"] == 0


def test_limits_are_checked_against_the_target():
    from flashcourse.limits import PRESETS
    a100 = PRESETS["A100 80GB"]
    res = cp.Result("k", "sm_80", "paged", ["c"], threads=512, shared=160 * 1024,
                    ptxas={"regs": 255, "smem": 8 * 1024})
    cp.check_limits(res, a100)
    assert len(res.errors) == 2 and "registers" in res.errors[0] \
        and "shared memory" in res.errors[1]
    ok = cp.Result("k", "sm_80", "paged", ["c"], threads=128, shared=48 * 1024,
                   ptxas={"regs": 255, "smem": 0})
    cp.check_limits(ok, a100)
    assert ok.errors == []


def test_every_family_has_cases_and_a_quick_case_per_default_target():
    cases = cp.all_cases()
    for fam in cp.FAMILIES:
        mine = [c for c in cases if c.family == fam]
        assert len(mine) >= 5, fam
        assert any("sm_90" in c.quick for c in mine), fam
    for target in cp.DEFAULT_TARGETS:
        assert any(target in c.quick for c in cases), target
    assert len({(c.family, c.name) for c in cases}) == len(cases)      # names are unique


def test_compare_sees_through_names_and_comments_and_counts_what_moved(tmp_path):
    """--compare: a function moved to another module changes its mangled name, not the
    code; one more instruction is reported with its count."""
    a, b, c = (tmp_path / x for x in "abc")
    for d in (a, b, c):
        d.mkdir()
    (a / "k.ptx").write_text(PTX.replace("foo", "_ZN11flashcourse4cuda7kernels3fooE"))
    (b / "k.ptx").write_text("// another build\n" + PTX.replace(
        "foo", "_ZN11flashcourse4cuda6common9tc_blocks3fooE"))
    (c / "k.ptx").write_text(PTX.replace("\tret;", "\tadd.f32 \t%f9, %f1, %f2;\n\tret;"))
    assert cp.normalised_ptx((a / "k.ptx").read_text()).count("NAME") == 1
    lines = []
    assert cp.compare_dirs(a, b, log=lines.append) == 0
    assert lines[0].startswith("same")
    lines = []
    assert cp.compare_dirs(a, c, log=lines.append) == 1
    assert "add.f32 +1" in lines[0]
    assert cp.opcode_counts(PTX)["mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"] == 1


def _run(*args, timeout=600):
    env = dict(os.environ)
    env.pop("NUMBA_ENABLE_CUDASIM", None)             # the tool's children set it to 0
    return subprocess.run([sys.executable, str(TOOLS / "compile_ptx.py"), *args],
                          capture_output=True, text=True, env=env, timeout=timeout)


@pytest.mark.slow
def test_quick_set_compiles_for_sm90_and_sm80():
    """36 kernel builds (paged CUDA-core and tensor-core split, combine, append; FP8
    decode with the conversion instruction and without, the FP8 append; variants forward
    and backward with array masks, softcap, ALiBi, sinks, bf16 device arrays; the Hopper
    forward, 16-bit and FP8, with V's transpose, for sm_90a): 40 s on the 2-core machine."""
    probe = _run("--probe", timeout=60)
    if probe.returncode == 2:
        pytest.skip("the kernels are not compiled for a GPU here: "
                    + probe.stdout.strip().removeprefix("compile_ptx: "))
    assert probe.returncode == 0, probe.stdout + probe.stderr
    r = _run("--quick")
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "kernel builds ok" in r.stdout
    # sm_80 has no e4m3 conversion instruction: the host chose the arithmetic there
    assert "[sm_90] ok   hopper_fp8_overlap_wg3_k128_d128" in r.stdout
    assert "[sm_90] ok   hopper_overlap_fp16_wg3_k80_d128" in r.stdout
    assert "[sm_80] ok   paged_split_p64_e1" in r.stdout and "_cvt (" not in \
        "".join(ln for ln in r.stdout.splitlines() if ln.startswith("[sm_80]"))
