"""Published sizes and speeds of a few GPUs, for the widgets, figures and roofline bounds.

Sources (vendor datasheets and whitepapers; the CUDA C++ Programming Guide's
"Compute Capabilities" table for shared memory per SM and per block):
    T4         NVIDIA T4 Tensor Core GPU datasheet; Turing (TU104) whitepaper; CC 7.5
    A100 40GB  NVIDIA A100 Tensor Core GPU datasheet (SXM); A100 (GA100) whitepaper; CC 8.0
    A100 80GB  NVIDIA A100 Tensor Core GPU datasheet (SXM, HBM2e)
    H100 SXM   NVIDIA H100 Tensor Core GPU datasheet (SXM5); Hopper (GH100) whitepaper; CC 9.0
    H200       NVIDIA H200 Tensor Core GPU datasheet (SXM); GH100 die as the H100, CC 9.0

Conventions: memory capacities ("16 GB", "141 GB") are read as binary GiB, which is
what the devices report (an H200 reports 150,109,880,320 B = 139.8 GiB usable of
its 141); bandwidths and FLOP rates are decimal (1 TB/s = 1e12 B/s). fp16 tensor
rates are dense (no structured sparsity). Shared memory per SM is the maximum
configurable share of the SM's on-chip memory; a block must opt in (via
cudaFuncSetAttribute) to use more than 48 KiB.

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
The non-matmul rate of the FlashAttention-2 paper is `fp32_flops_per_s` (A100: "312
TFLOPs/s of FP16/BF16 matmul, but only 19.5 TFLOPs/s of non-matmul FP32", section 3.1).

Checked on an H200 (cudaGetDeviceProperties through PyTorch, 2026-11): 132 SMs,
233,472 B = 228 KiB shared memory per SM, 232,448 B = 227 KiB opt-in per block,
L2 62,914,560 B = 60 MiB (the datasheet does not list L2; the H100 SXM's
whitepaper gives 50 MB).
"""

from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
MiB = 1024 ** 2
GiB = 1024 ** 3


@dataclass(frozen=True)
class GPU:
    """One GPU's published numbers (bytes, bytes/s, FLOP/s)."""

    name: str
    memory_bytes: int                 # device memory (HBM / GDDR), bytes
    bandwidth_bytes_per_s: float      # device-memory bandwidth, bytes/s
    smem_per_sm_bytes: int            # max shared memory per SM (on-chip), bytes
    smem_per_block_optin_bytes: int   # max shared memory one block may opt in to, bytes
    l2_bytes: int                     # L2 cache, bytes
    sms: int                          # streaming multiprocessors
    fp32_flops_per_s: float           # fp32 (non-tensor) peak, FLOP/s
    fp16_tensor_flops_per_s: float    # dense fp16 tensor-core peak, FLOP/s
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
    def smem_total_bytes(self) -> int:
        """Shared memory of all SMs together (bytes)."""
        return self.smem_per_sm_bytes * self.sms


GPUS = {
    "T4": GPU("T4", 16 * GiB, 320e9, 64 * KiB, 64 * KiB, 4 * MiB, 40, 8.1e12, 65e12,
              "T4 datasheet: 16 GB GDDR6, 320 GB/s, 8.1 TFLOPS fp32, 65 TFLOPS fp16; "
              "TU104: 40 SMs, 4 MB L2; CC 7.5: 64 KB shared memory per SM",
              sfu_ops_per_s=16 * 40 * 1.582e9, smem_bandwidth_bytes_per_s=128 * 40 * 1.582e9,
              clock_hz=1.582e9),
    "A100 40GB": GPU("A100 40GB", 40 * GiB, 1555e9, 164 * KiB, 163 * KiB, 40 * MiB, 108,
                     19.5e12, 312e12,
                     "A100 datasheet (SXM): 40 GB HBM2, 1,555 GB/s, 19.5 TFLOPS fp32, "
                     "312 TFLOPS fp16 tensor; whitepaper: 108 SMs, 40 MB L2; CC 8.0: "
                     "164 KB shared memory per SM, 163 KB per block",
                     sfu_ops_per_s=16 * 108 * 1.41e9,
                     smem_bandwidth_bytes_per_s=128 * 108 * 1.41e9,
                     l2_bandwidth_bytes_per_s=5120 * 1.41e9, clock_hz=1.41e9),
    "A100 80GB": GPU("A100 80GB", 80 * GiB, 2039e9, 164 * KiB, 163 * KiB, 40 * MiB, 108,
                     19.5e12, 312e12,
                     "A100 datasheet (SXM): 80 GB HBM2e, 2,039 GB/s; otherwise as the "
                     "A100 40GB",
                     sfu_ops_per_s=16 * 108 * 1.41e9,
                     smem_bandwidth_bytes_per_s=128 * 108 * 1.41e9,
                     l2_bandwidth_bytes_per_s=5120 * 1.41e9, clock_hz=1.41e9),
    "H100 SXM": GPU("H100 SXM", 80 * GiB, 3.35e12, 228 * KiB, 227 * KiB, 50 * MiB, 132,
                    67e12, 989e12,
                    "H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, 67 TFLOPS fp32, "
                    "989 TFLOPS fp16 tensor (dense); Hopper whitepaper: 132 SMs, 50 MB "
                    "L2; CC 9.0: 228 KB shared memory per SM, 227 KB per block",
                    sfu_ops_per_s=3.9e12, smem_bandwidth_bytes_per_s=128 * 132 * 1.98e9,
                    clock_hz=1.98e9),
    "H200": GPU("H200", 141 * GiB, 4.8e12, 228 * KiB, 227 * KiB, 60 * MiB, 132,
                67e12, 989e12,
                "H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 67 TFLOPS fp32, 989 "
                "TFLOPS fp16 tensor (dense); 132 SMs, 228/227 KiB shared memory and "
                "60 MiB L2 as reported by cudaGetDeviceProperties on an H200",
                sfu_ops_per_s=3.9e12, smem_bandwidth_bytes_per_s=128 * 132 * 1.98e9,
                clock_hz=1.98e9),
}


def get_gpu(name: str) -> GPU:
    """The preset called `name` (one of GPUS)."""
    if name not in GPUS:
        raise ValueError(f"gpu must be one of {sorted(GPUS)}, got {name!r}")
    return GPUS[name]
