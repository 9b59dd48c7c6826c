"""FlashAttention on Hopper's warpgroup tensor cores (wgmma, compute capability 9.0).

    host.py           the host side: tiles, checks, `run_heads` (`forward(kernel="hopper")`)
    hopper_kernels.py the wgmma kernels (instructions in `ptx/wgmma.py`)
    wgmma_layouts.py  shared-memory matrix descriptors and swizzled layouts, in numpy
    tail_split.py     the last wave of a launch split along the keys, and its combine kernel
    fp8.py            the FP8 (e4m3) forward's host side (`forward(kernel="hopper",
                      precision="fp8")`): quantizing on the host or the device, the launches
    fp8_kernels.py    its kernels: V's transpose, the device quantizer, the attention kernel
    fp8_layouts.py    where the FP8 kernel keeps P and V (the key order), in numpy
    backward.py       the backward's host side (`backward(kernel="tensor_core",
                      pipeline="wgmma")`, inside the tensor-core backward's host path)
    backward_kernels.py  the backward's kernel: S^T, dP^T, dV, dK and dQ on wgmma
"""
