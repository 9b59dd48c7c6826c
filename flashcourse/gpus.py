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

    @property
    def smem_total_bytes(self) -> int:
        """Shared memory of all SMs together (bytes)."""
        return self.smem_per_sm_bytes * self.sms


GPUS = {
    "T4": GPU("T4", 16 * GiB, 320e9, 64 * KiB, 64 * KiB, 4 * MiB, 40, 8.1e12, 65e12,
              "T4 datasheet: 16 GB GDDR6, 320 GB/s, 8.1 TFLOPS fp32, 65 TFLOPS fp16; "
              "TU104: 40 SMs, 4 MB L2; CC 7.5: 64 KB shared memory per SM"),
    "A100 40GB": GPU("A100 40GB", 40 * GiB, 1555e9, 164 * KiB, 163 * KiB, 40 * MiB, 108,
                     19.5e12, 312e12,
                     "A100 datasheet (SXM): 40 GB HBM2, 1,555 GB/s, 19.5 TFLOPS fp32, "
                     "312 TFLOPS fp16 tensor; whitepaper: 108 SMs, 40 MB L2; CC 8.0: "
                     "164 KB shared memory per SM, 163 KB per block"),
    "A100 80GB": GPU("A100 80GB", 80 * GiB, 2039e9, 164 * KiB, 163 * KiB, 40 * MiB, 108,
                     19.5e12, 312e12,
                     "A100 datasheet (SXM): 80 GB HBM2e, 2,039 GB/s; otherwise as the "
                     "A100 40GB"),
    "H100 SXM": GPU("H100 SXM", 80 * GiB, 3.35e12, 228 * KiB, 227 * KiB, 50 * MiB, 132,
                    67e12, 989e12,
                    "H100 datasheet (SXM): 80 GB HBM3, 3.35 TB/s, 67 TFLOPS fp32, "
                    "989 TFLOPS fp16 tensor (dense); Hopper whitepaper: 132 SMs, 50 MB "
                    "L2; CC 9.0: 228 KB shared memory per SM, 227 KB per block"),
    "H200": GPU("H200", 141 * GiB, 4.8e12, 228 * KiB, 227 * KiB, 60 * MiB, 132,
                67e12, 989e12,
                "H200 datasheet (SXM): 141 GB HBM3e, 4.8 TB/s, 67 TFLOPS fp32, 989 "
                "TFLOPS fp16 tensor (dense); 132 SMs, 228/227 KiB shared memory and "
                "60 MiB L2 as reported by cudaGetDeviceProperties on an H200"),
}


def get_gpu(name: str) -> GPU:
    """The preset called `name` (one of GPUS)."""
    if name not in GPUS:
        raise ValueError(f"gpu must be one of {sorted(GPUS)}, got {name!r}")
    return GPUS[name]
