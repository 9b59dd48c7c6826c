"""Flash-Decoding on the GPU: a split kernel over the KV cache, then a combine kernel.

    decode_kernels.py     the split and combine kernels on the CUDA cores (fp32), GQA, and
                          `decode`, the host side behind `flashcourse.cuda.decode`
    decode_tc_kernels.py  the split kernel on the tensor cores (fp16 K/V, several query rows
                          per KV head)
    vector_loads.py       the 16-byte loads of K/V rows the CUDA-core split kernel uses (FP8
                          codes decoded to float32 right after the load)
    combine.py            the combine kernel (merging the splits' partial states), and the
                          same merge of a split block's warps' states (`slot_merge`)
    paged_kernels.py      the same split kernels reading a paged KV cache through a block
                          table (ragged lengths, a work list computed on the device), the
                          paged combine, and the append of new tokens into pages
    paged.py              the host side of paged decoding: plan, run, `paged_decode` (behind
                          `flashcourse.cuda.paged_decode`)
    fp8_kv.py             the host side of FP8 (e4m3) KV caches: contiguous, paged, and the
                          append into an FP8 pool

Named `decoding` because `flashcourse.cuda.decode` is the public function.
"""
