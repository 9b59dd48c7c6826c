"""The FlashAttention forward on Hopper's warpgroup tensor cores (wgmma, compute capability 9.0).

    host.py           the host side: tiles, checks, `run_heads` (`forward(kernel="hopper")`)
    hopper_kernels.py the wgmma kernels (instructions in `ptx/wgmma.py`)
    wgmma_layouts.py  shared-memory matrix descriptors and swizzled layouts, in numpy
    tail_split.py     the last wave of a launch split along the keys, and its combine kernel
"""
