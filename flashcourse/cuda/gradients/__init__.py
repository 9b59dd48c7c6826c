"""The backward pass (dQ, dK, dV, with recomputation): `flashcourse.cuda.backward`'s kernels.

    backward_kernels.py           fp32 on the CUDA cores: simple, fast, fast_two_pass
    tc_backward.py                the host side of the tensor-core backward
    tc_backward_blocks.py         device steps the tensor-core versions share (written once)
    tc_backward_kernels.py        version 1: key-major and query-major mma.sync kernels
    tc_backward_kernels_async.py  version 2 of key-major: cp.async and ldmatrix
    tc_backward_kernels_tf32.py   key-major at fp32 accuracy (3xTF32)
    tc_backward_passes.py         the small kernels around it (the D pre-pass, the casts to 16 bits)
    tc_variants_backward.py       the attention variants' backward (block mask, mask_mod,
                                  score_mod, sinks, GQA): host side
    tc_variants_backward_kernels.py  its key-major kernel and the sinks' gradient

Named `gradients` because `flashcourse.cuda.backward` is the public function.
"""
