"""Published sizes and speeds of common GPUs, and the limits of each compute capability.

Two kinds of facts live here, each from its own source:

1. Per compute capability (CC), the per-SM and per-block limits that decide what a kernel
   launch may ask for (`COMPUTE_CAPABILITIES`). Source: NVIDIA CUDA C++ Programming
   Guide, appendix "Compute Capabilities", table "Technical Specifications per Compute
   Capability" (CUDA 12.x/13.x editions), and its sections "Compute Capability 7.x /
   8.x / 9.0" for the shared-memory sizes and the 1 KB reserved per block:

       CC    threads/SM  blocks/SM  shared/SM  shared/block (opt-in)  reserved/block
       7.5   1,024       16          64 KB      64 KB                  0
       8.0   2,048       32         164 KB     163 KB                  1 KB
       8.6   1,536       16         100 KB      99 KB                  1 KB
       8.9   1,536       24         100 KB      99 KB                  1 KB
       9.0   2,048       32         228 KB     227 KB                  1 KB

   The same table gives, for every CC here: 1,024 threads per block, 65,536 32-bit
   registers per SM and per block, 255 registers per thread, warps of 32 threads,
   48 KB of shared memory per block without opting in (cudaFuncSetAttribute with
   cudaFuncAttributeMaxDynamicSharedMemorySize lifts it to the opt-in size), and a grid
   of at most 2**31 - 1 x 65,535 x 65,535 blocks. (KB here is 1,024 bytes, as the guide
   means it: the H200 reports 233,472 B = 228 KB per SM and 232,448 B = 227 KB per block.)

2. Per product (`GPUS`): SM count, memory, bandwidth, L2, peak rates, from the vendor
   datasheets and architecture whitepapers named in each entry's `source`.

Conventions: memory capacities ("16 GB", "141 GB") are read as binary GiB, which is
what the devices report (an H200 reports 150,109,880,320 B = 139.8 GiB usable of
its 141); bandwidths and FLOP rates are decimal (1 TB/s = 1e12 B/s). fp16 tensor
rates are dense (no structured sparsity) with fp32 accumulation (the GeForce cards
run fp16 accumulation at twice that). `device_name` is the name the device reports
(cudaGetDeviceProperties().name, nvidia-smi), used to match recorded results to a GPU.

Rates beyond the datasheets (fields after `source`; None where nothing is published):
    sfu_ops_per_s   special-function unit results per second (exp2, log2, rcp, ...): 16
                    per clock per SM for compute capability 7.5, 8.0 and 9.0 (CUDA C++
                    Programming Guide, "Arithmetic Instructions", throughput table) x SMs
                    x clock. A100: 16 x 108 x 1.41 GHz = 2.44e12/s. H100 SXM / H200:
                    3.9e12/s, the figure the FlashAttention-3 paper (Shah et al., 2024,
                    section 3) gives for the H100 SXM5 ("989 TFLOPS of FP16 matmul but
                    only 3.9 TFLOPS of special functions"; = 16 x 132 x 1.83 GHz).
    smem_bandwidth_bytes_per_s   shared memory of all SMs: 32 banks x 4 B = 128 B per
                    clock per SM (Programming Guide, "Shared Memory") x SMs x clock;
                    A100: 19.5e12 B/s, the FlashAttention paper's "19 TB/s" (Figure 1).
    l2_bandwidth_bytes_per_s     A100 whitepaper: 5,120 B/clk x 1.41 GHz; not published
                    for the others.
    registers_per_sm_bytes       64 K 32-bit registers per SM (Programming Guide,
                    "Technical Specifications per Compute Capability").
    clock_hz        the boost clock implied by the datasheet's fp32 rate:
                    fp32_flops_per_s / (SMs x 2 FLOP x FP32 lanes per SM: 64 on T4 and
                    A100, 128 on H100/H200).
These rates are left None for the A10G, L4, RTX 3090 and RTX 4090 (not derived here).
The non-matmul rate of the FlashAttention-2 paper is `fp32_flops_per_s` (A100: "312
TFLOPs/s of FP16/BF16 matmul, but only 19.5 TFLOPs/s of non-matmul FP32", section 3.1).

Checked on an H200 (cudaGetDeviceProperties through PyTorch, 2026-11): 132 SMs,
233,472 B = 228 KiB shared memory per SM, 232,448 B = 227 KiB opt-in per block,
L2 62,914,560 B = 60 MiB (the datasheet does not list L2; the H100 SXM's
whitepaper gives 50 MB). No other GPU in this table was measured by the course.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KiB = 1024
MiB = 1024 ** 2
GiB = 1024 ** 3


@dataclass(frozen=True)
class ComputeCapability:
    """The launch limits one compute capability sets (Programming Guide table; see above)."""

    cc: tuple                          # (major, minor)
    max_threads_per_sm: int            # threads
    max_blocks_per_sm: int             # blocks
    smem_per_sm: int                   # bytes, largest shared-memory carve-out per SM
    smem_per_block_optin: int          # bytes one block may opt in to
    smem_reserved_per_block: int       # bytes the system keeps per resident block
    max_threads_per_block: int = 1024  # threads
    regs_per_sm: int = 65536           # 32-bit registers
    max_regs_per_block: int = 65536    # 32-bit registers
    max_regs_per_thread: int = 255     # 32-bit registers
    smem_per_block: int = 48 * KiB     # bytes without opt-in


#: The CUDA C++ Programming Guide's "Technical Specifications per Compute Capability".
COMPUTE_CAPABILITIES = {
    (7, 5): ComputeCapability((7, 5), 1024, 16, 64 * KiB, 64 * KiB, 0),
    (8, 0): ComputeCapability((8, 0), 2048, 32, 164 * KiB, 163 * KiB, 1 * KiB),
    (8, 6): ComputeCapability((8, 6), 1536, 16, 100 * KiB, 99 * KiB, 1 * KiB),
    (8, 9): ComputeCapability((8, 9), 1536, 24, 100 * KiB, 99 * KiB, 1 * KiB),
    (9, 0): ComputeCapability((9, 0), 2048, 32, 228 * KiB, 227 * KiB, 1 * KiB),
}


def compute_capability(cc) -> ComputeCapability:
    """The limits of compute capability `cc` ((major, minor)); ValueError for one not listed."""
    cc = tuple(cc)
    if cc not in COMPUTE_CAPABILITIES:
        raise ValueError(f"compute_capability must be one of "
                         f"{sorted(COMPUTE_CAPABILITIES)}, got {cc!r}")
    return COMPUTE_CAPABILITIES[cc]


@dataclass(frozen=True)
class GPU:
    """One GPU's published numbers (bytes, bytes/s, FLOP/s) and its compute capability."""

    name: str
    compute_capability: tuple         # (major, minor): the per-SM/per-block limits
    memory_bytes: int                 # device memory (HBM / GDDR), bytes
    bandwidth_bytes_per_s: float      # device-memory bandwidth, bytes/s
    l2_bytes: int                     # L2 cache, bytes
    sms: int                          # streaming multiprocessors
    fp32_flops_per_s: float           # fp32 (non-tensor) peak, FLOP/s
    fp16_tensor_flops_per_s: float    # dense fp16 tensor-core peak (fp32 accumulate), FLOP/s
    device_name: str = ""             # the name the device reports
    source: str = ""
    sfu_ops_per_s: float | None = None             # special-function results/s (exp2 ...)
    smem_bandwidth_bytes_per_s: float | None = None  # shared memory, all SMs, bytes/s
    l2_bandwidth_bytes_per_s: float | None = None  # L2 -> SMs, bytes/s (where published)
    registers_per_sm_bytes: int = 64 * 1024 * 4    # register file per SM, bytes
    clock_hz: float | None = None                  # boost clock, Hz

    @property
    def matmul_to_nonmatmul(self) -> float:
        """fp16 tensor-core FLOP/s over fp32 non-matmul FLOP/s (A100: 312 / 19.5 = 16)."""
        return self.fp16_tensor_flops_per_s / self.fp32_flops_per_s

    @property
    def registers_total_bytes(self) -> int:
        """Register files of all SMs together (bytes)."""
        return self.registers_per_sm_bytes * self.sms

    @property
    def limits(self) -> ComputeCapability:
        """The launch limits of its compute capability."""
        return compute_capability(self.compute_capability)

    @property
    def smem_per_sm_bytes(self) -> int:
        """Max shared memory per SM (on-chip, bytes), from the compute capability."""
        return self.limits.smem_per_sm

    @property
    def smem_per_block_optin_bytes(self) -> int:
        """Max shared memory one block may opt in to (bytes), from the compute capability."""
        return self.limits.smem_per_block_optin

    @property
    def smem_total_bytes(self) -> int:
        """Shared memory of all SMs together (bytes)."""
        return self.smem_per_sm_bytes * self.sms


# Two chips sold with two memory sizes: each is written once here, the other size below
# with `replace`.
_A100_40GB = GPU("A100 40GB", (8, 0), 40 * GiB, 1555e9, 40 * MiB, 108, 19.5e12, 312e12,
                 "NVIDIA A100-SXM4-40GB",
                 "A100 datasheet (SXM): 40 GB HBM2, 1,555 GB/s, 19.5 TFLOPS fp32, "
                 "312 TFLOPS fp16 tensor; whitepaper: 108 SMs, 40 MB L2; CC 8.0: "
                 "164 KB shared memory per SM, 163 KB per block",
                 sfu_ops_per_s=16 * 108 * 1.41e9,
                 smem_bandwidth_bytes_per_s=128 * 108 * 1.41e9,
                 l2_bandwidth_bytes_per_s=5120 * 1.41e9, clock_hz=1.41e9)
_H100_SXM = GPU("H100 SXM", (9, 0), 80 * GiB, 3.35e12, 50 * MiB, 132, 67e12, 989e12,
                "NVIDIA H100 80GB HBM3",
                "H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, 67 TFLOPS fp32, "
                "989 TFLOPS fp16 tensor (dense); Hopper whitepaper: 132 SMs, 50 MB "
                "L2; CC 9.0: 228 KB shared memory per SM, 227 KB per block",
                sfu_ops_per_s=3.9e12, smem_bandwidth_bytes_per_s=128 * 132 * 1.98e9,
                clock_hz=1.98e9)

GPUS = {
    "T4": GPU("T4", (7, 5), 16 * GiB, 320e9, 4 * MiB, 40, 8.1e12, 65e12, "Tesla T4",
              "NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, 8.1 TFLOPS fp32, 65 TFLOPS "
              "fp16 tensor; Turing whitepaper (TU104): 40 SMs, 4 MB L2; CC 7.5",
              sfu_ops_per_s=16 * 40 * 1.582e9, smem_bandwidth_bytes_per_s=128 * 40 * 1.582e9,
              clock_hz=1.582e9),
    "A10G": GPU("A10G", (8, 6), 24 * GiB, 600e9, 6 * MiB, 80, 31.2e12, 125e12,
                "NVIDIA A10G",
                "no NVIDIA datasheet (AWS's variant of the A10, GA102, CC 8.6): 24 GB "
                "GDDR6 and 600 GB/s per AWS's EC2 G5 page; 80 SMs and 6 MB L2 as the "
                "device reports them (deviceQuery on a g5 instance); fp32 and fp16 tensor "
                "rates of the A10 datasheet (31.2, 125 TFLOPS), approximate for the A10G"),
    "L4": GPU("L4", (8, 9), 24 * GiB, 300e9, 48 * MiB, 58, 30.3e12, 121e12, "NVIDIA L4",
              "NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s, 30.3 TFLOPS fp32, 242 TFLOPS "
              "fp16 tensor with sparsity (121 dense); 7,424 CUDA cores / 128 per Ada SM "
              "= 58 SMs; AD104: 48 MB L2; CC 8.9"),
    "RTX 3090": GPU("RTX 3090", (8, 6), 24 * GiB, 936e9, 6 * MiB, 82, 35.6e12, 71e12,
                    "NVIDIA GeForce RTX 3090",
                    "NVIDIA Ampere GA102 whitepaper: 82 SMs, 24 GB GDDR6X, 936 GB/s, "
                    "6,144 KB L2, 35.6 TFLOPS fp32, 71 TFLOPS fp16 tensor (fp32 "
                    "accumulate, dense); CC 8.6"),
    "RTX 4090": GPU("RTX 4090", (8, 9), 24 * GiB, 1008e9, 72 * MiB, 128, 82.6e12, 165.2e12,
                    "NVIDIA GeForce RTX 4090",
                    "NVIDIA Ada (AD102) whitepaper: 128 SMs, 24 GB GDDR6X, 1,008 GB/s, "
                    "72 MB L2, 82.6 TFLOPS fp32, 165.2 TFLOPS fp16 tensor (fp32 "
                    "accumulate, dense); CC 8.9"),
    "A100 40GB": _A100_40GB,
    # the same chip and clocks; only the memory (and the name) differ
    "A100 80GB": replace(
        _A100_40GB, name="A100 80GB", memory_bytes=80 * GiB, bandwidth_bytes_per_s=2039e9,
        device_name="NVIDIA A100-SXM4-80GB",
        source="A100 datasheet (SXM): 80 GB HBM2e, 2,039 GB/s; otherwise as the A100 40GB"),
    "H100 SXM": _H100_SXM,
    "H200": replace(
        _H100_SXM, name="H200", memory_bytes=141 * GiB, bandwidth_bytes_per_s=4.8e12,
        l2_bytes=60 * MiB, device_name="NVIDIA H200",
        source="H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 67 TFLOPS fp32, 989 TFLOPS "
               "fp16 tensor (dense); otherwise as the H100 SXM (the same GH100 chip); 132 "
               "SMs, 228/227 KiB shared memory and 60 MiB L2 as reported by "
               "cudaGetDeviceProperties on an H200"),
}


def get_gpu(name: str) -> GPU:
    """The preset called `name` (one of GPUS)."""
    if name not in GPUS:
        raise ValueError(f"gpu must be one of {sorted(GPUS)}, got {name!r}")
    return GPUS[name]
