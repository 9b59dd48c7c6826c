"""Context parallelism: one attention spread over several processes along the sequence.

The pieces (issue 55), communication kept apart from the attention step:

    shards    which rows each rank holds (contiguous, zigzag) and the causal work of
              every rank at every ring step; numpy only
    model     a time model of a ring step: compute vs K/V transfer; numpy only
    merge     `merge_sigmoid`, the merge of two partial states (numpy or torch)
    kernels   the per-step attention "kernel" (forward -> (o, lse), backward from the
              global o and lse -> partial dq, dk, dv): numpy tiled, Numba CPU
    comm      the communication: shapes agreed by all ranks, the ring pass (isend/irecv),
              all-gather and all-to-all of ragged sequence shards
    ring      ring attention forward and backward on torch.distributed (K/V blocks
              passed to the next rank with isend/irecv while the current block is
              computed; dk/dv travel with their block back home)
    gather    all-gather K/V, attend locally (PyTorch's context_parallel style)
    ulysses   all-to-all from sequence shards to head shards and back (DeepSpeed-Ulysses)
    autograd  `attention(q, k, v, design=...)`: a design as one differentiable call
    launch    `run(world_size, fn, *args)`: spawn gloo processes on 127.0.0.1 and
              return each rank's result
    designs   bytes sent and held per rank by the ring, the all-gather and Ulysses, and
              Ulysses' head limit (notebook 16's comparison); numpy only
    demo      `run_designs(designs, q, k, v, world=2)`: the designs on local gloo
              processes from full numpy arrays, the ranks' rows put back (notebook 16)

Importing this package (and `shards`, `model`, `merge`) does not import PyTorch; the
modules that need it raise an ImportError that says how to install it.
"""

__all__ = ["shards", "model", "merge"]
