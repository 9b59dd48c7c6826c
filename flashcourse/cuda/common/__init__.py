"""What every kernel family of `flashcourse.cuda` stands on (below the families, above `ptx`).

    _launch.py        input preparation, the shared-memory opt-in, launches, register checks,
                      the configurations' thread count (WarpThreads)
    _device.py        device functions several families compile in (online-softmax state,
                      zeroed accumulators, visible key blocks, block orders, exp2/log2, a
                      thread's lane ids, the shared-memory prologue of the tensor-core kernels)
    host_plans.py     the public calls' fast path for device arrays (plans cached per shape)
    packed_launch.py  a launch whose arguments are packed once, then replayed cheaply
    result_check.py   the forward's result rule for results that stay on the device
    tc_blocks.py      device steps of the tensor-core kernels (masks, online softmax,
                      epilogues, 3xTF32 chains and P V, cp.async row copies, copies of
                      16-bit row pairs, A-fragment packs), written once

These modules import nothing from the kernel families or from `registry`.
"""
