"""The course's pictures: one module per topic, one style for all (`plots.style`).

    memory        the memory hierarchy; the score matrix against sequence length (01)
    softmax       the online softmax streamed and merged (02)
    tiles         the tile schedule, split-K vs split-Q warps, causal alignment (03)
    traffic       dense vs tiled bytes against N and against the on-chip budget (03-04)
    roofline      attention (04) and decoding (11) on a GPU's roofline
    kernels       the CUDA kernel's data flow; the key-major backward (06, 09)
    timings       live timings with the spread of their repeats, noise flagged (05)
    measured      Nsight Compute counters against the IO model (08)
    backward      the backward's costs and the recorded backward timings (09)
    tensor_cores  mma fragments, rounding errors, recorded tensor-core timings (10)
    tc_backward   the tensor-core backward: its products, ldmatrix(.trans) loads, roundings,
                  recorded variants and timings (10, section 7)
    decode        Flash-Decoding's SMs, splits, merge tree and bandwidth (11)
    variants      masks pair by pair, block masks by tile (14)
    fp8           e4m3/e5m2 number lines, an outlier rotated, FP8 error by scheme (15)
    paged         a paged KV cache's pool, block tables and the work list's schedule (11b)
    tuning        the tuning sweep's TFLOP/s heatmaps over (Br, Bc) (07)
    bench         TFLOP/s grids of recorded benchmarks
    tables        HTML tables for notebook output
    readme        the README's figures (`make figures`)

Each `plot_*` function returns a matplotlib Figure (or draws into an axes it is given);
the notebook shows it and the tests check that it draws and that its text is readable.
"""
