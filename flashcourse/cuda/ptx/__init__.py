"""The ground of `flashcourse.cuda`: every inline-PTX wrapper, each with its simulator twin.

    mma.py        mma.sync (m16n8k16 fp16/bf16, m16n8k8 tf32), the conversions and packs,
                  the fragment layouts, and a numpy model of each one
    smem_ops.py   cp.async copies into shared memory, ldmatrix fragment loads,
                  red.global.add.f32 and ex2.approx.ftz
    wgmma.py      Hopper's warpgroup instructions (wgmma, fences, descriptors; GPU only)
    fp8.py        e4m3 codes to and from float32: cvt.rn.f16x2.e4m3x2 (sm_89+) and the
                  same by integer arithmetic (the simulator, older GPUs); the encoder

These modules import nothing else from `flashcourse.cuda`; every kernel family may
import them (tests/test_architecture.py keeps the order: ptx, common, the families,
then `registry` and `flashcourse.cuda` itself on top).
"""
