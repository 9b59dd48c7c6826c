"""What fits on a GPU: per-block and per-SM limits, launch checks, occupancy (pure functions).

A kernel launch fits only within the device's own limits (read from the device when
there is one, `DeviceLimits.from_device()`; H200 numbers from `flashcourse.gpus` under
the simulator, `current_limits()`; `PRESETS` holds the limits of common GPUs, built
from their published specifications in `flashcourse.gpus`):

    shared memory per block   48 KiB by default; a kernel may opt in to more: 64 KiB on
                              a T4 (CC 7.5), 99 KiB on CC 8.6/8.9, 163 KiB on an A100,
                              227 KiB on Hopper (`flashcourse.cuda.common._launch.launch`)
    registers per thread      <= 255, and threads x registers <= 65,536 per block
    threads per block         <= 1,024
    grid                      <= 2**31 - 1 x 65,535 x 65,535 blocks

`check_launch` raises `LaunchError` naming the limit, the amount asked and the amount
available. Occupancy = how many blocks of one kernel a streaming multiprocessor (SM)
keeps resident at once. Each SM has a register file (65,536 32-bit registers), a shared
memory pool (228 KiB on Hopper) and at most 64 warps (2,048 threads) and 32 blocks.
The smallest of the four quotients is the number of resident blocks, and the resource
that gives it is the *limiter* (`occupancy`). More resident blocks hide memory latency;
bigger tiles re-read K and V fewer times (`flashcourse.traffic`), but need more shared
memory and registers, so fewer of them fit: tile shape trades traffic against residency.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace

from ._checks import check_block, check_bool, check_named, check_whole
from .geometry import ceil_div
from .gpus import GPU, GPUS, get_gpu


@dataclass(frozen=True)
class DeviceLimits:
    """The per-block and per-SM resources of a GPU that decide whether, and how
    many copies of, a kernel launch fit (units in each field name or comment)."""

    name: str
    compute_capability: tuple = (9, 0)        # (major, minor)
    sm_count: int = 132
    warp_size: int = 32                       # threads
    max_threads_per_block: int = 1024         # threads
    max_threads_per_sm: int = 2048            # threads (64 warps)
    max_blocks_per_sm: int = 32               # blocks
    regs_per_sm: int = 65536                  # 32-bit registers
    max_regs_per_block: int = 65536           # 32-bit registers
    max_regs_per_thread: int = 255            # 32-bit registers
    reg_alloc_unit: int = 256                 # registers, granularity per warp
    smem_per_sm: int = 233472                 # bytes (228 KiB)
    smem_per_block: int = 49152               # bytes without opt-in (48 KiB)
    smem_per_block_optin: int = 232448        # bytes with opt-in (227 KiB)
    smem_reserved_per_block: int = 1024       # bytes the system keeps per block
    smem_alloc_unit: int = 128                # bytes
    l2_bytes: int = 52428800                  # bytes
    max_grid: tuple = (2 ** 31 - 1, 65535, 65535)   # blocks in x, y, z
    model: str = ""                           # the name the device reports ("NVIDIA H200")

    @property
    def sm_arch(self) -> str:
        """The compute capability as nvcc names it, e.g. "sm_80"."""
        return "sm_{}{}".format(*self.compute_capability)

    @classmethod
    def from_gpu(cls, gpu: GPU, name: str | None = None) -> "DeviceLimits":
        """The limits of a published GPU (`flashcourse.gpus`): per-SM and per-block limits
        of its compute capability, and its own SM count and L2."""
        cc = gpu.limits
        return cls(name=name or f"{gpu.name} (preset)",
                   compute_capability=cc.cc, sm_count=gpu.sms,
                   max_threads_per_block=cc.max_threads_per_block,
                   max_threads_per_sm=cc.max_threads_per_sm,
                   max_blocks_per_sm=cc.max_blocks_per_sm,
                   regs_per_sm=cc.regs_per_sm, max_regs_per_block=cc.max_regs_per_block,
                   max_regs_per_thread=cc.max_regs_per_thread,
                   smem_per_sm=cc.smem_per_sm, smem_per_block=cc.smem_per_block,
                   smem_per_block_optin=cc.smem_per_block_optin,
                   smem_reserved_per_block=cc.smem_reserved_per_block,
                   l2_bytes=gpu.l2_bytes, model=gpu.device_name)

    @classmethod
    def from_device(cls, device=None) -> "DeviceLimits":
        """Read the limits of the current (or given) Numba CUDA device; under the
        simulator, which has no attributes, the H200 preset's numbers."""
        from numba import cuda

        from .gpu import using_simulator
        dev = cuda.get_current_device() if device is None else device
        name = getattr(dev, "name", "simulated device (H100/H200 limits assumed)")
        name = name.decode() if isinstance(name, bytes) else str(name)
        base = replace(H200_LIMITS, name=name, model=name)
        if using_simulator():
            return base
        cc = tuple(getattr(dev, "compute_capability", (9, 0)))
        for preset in PRESETS.values():      # start from the table of this CC, if listed
            if preset.compute_capability == cc:
                base = replace(preset, name=name, model=name)
                break

        def attr(key, default):
            # an attribute this driver/binding does not expose keeps the preset's value
            value = getattr(dev, key, None)
            return default if value is None else int(value)

        return replace(
            base,
            compute_capability=cc,
            sm_count=attr("MULTIPROCESSOR_COUNT", base.sm_count),
            warp_size=attr("WARP_SIZE", base.warp_size),
            max_threads_per_block=attr("MAX_THREADS_PER_BLOCK", base.max_threads_per_block),
            max_threads_per_sm=attr("MAX_THREADS_PER_MULTIPROCESSOR", base.max_threads_per_sm),
            max_blocks_per_sm=attr("MAX_BLOCKS_PER_MULTIPROCESSOR", base.max_blocks_per_sm),
            regs_per_sm=attr("MAX_REGISTERS_PER_MULTIPROCESSOR", base.regs_per_sm),
            max_regs_per_block=attr("MAX_REGISTERS_PER_BLOCK", base.max_regs_per_block),
            smem_per_sm=attr("MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", base.smem_per_sm),
            smem_per_block=attr("MAX_SHARED_MEMORY_PER_BLOCK", base.smem_per_block),
            smem_per_block_optin=attr("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
                                      base.smem_per_block_optin),
            smem_reserved_per_block=attr("RESERVED_SHARED_MEMORY_PER_BLOCK",
                                         base.smem_reserved_per_block),
            l2_bytes=attr("L2_CACHE_SIZE", base.l2_bytes),
            max_grid=(attr("MAX_GRID_DIM_X", base.max_grid[0]),
                      attr("MAX_GRID_DIM_Y", base.max_grid[1]),
                      attr("MAX_GRID_DIM_Z", base.max_grid[2])),
        )

    @classmethod
    def from_dict(cls, d: dict) -> "DeviceLimits":
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in d.items() if k in known}
        for key in ("compute_capability", "max_grid"):
            if key in kw:
                kw[key] = tuple(kw[key])
        return cls(**kw)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["compute_capability"] = list(self.compute_capability)
        d["max_grid"] = list(self.max_grid)
        return d


#: The limits of every GPU of `flashcourse.gpus.GPUS`, by the same name ("T4", "A10G",
#: "L4", "RTX 3090", "RTX 4090", "A100 40GB", "A100 80GB", "H100 SXM", "H200"): the
#: per-SM/per-block limits of its compute capability (CUDA C++ Programming Guide) with its
#: datasheet's SM count and L2. Kernels choose their configurations from these
#: (`flashcourse.cuda.registry`, `launches`); only the H200's were measured.
PRESETS = {name: DeviceLimits.from_gpu(gpu) for name, gpu in GPUS.items()}

#: Hopper H100 SXM (132 SMs, 50 MiB L2), the CUDA occupancy calculator's numbers for cc 9.0.
H100_LIMITS = replace(PRESETS["H100 SXM"], name="NVIDIA H100 80GB HBM3 (preset)")
#: H200: the same SM as the H100 and 60 MiB of L2 (as an H200 reports it).
H200_LIMITS = replace(PRESETS["H200"], name="NVIDIA H200 (preset)")


def get_preset(name: str) -> DeviceLimits:
    """The limits of the GPU called `name` (a key of PRESETS)."""
    get_gpu(name)                            # ValueError naming the argument
    return PRESETS[name]


def current_limits() -> DeviceLimits:
    """The limits kernels are checked against: this GPU's, or the H200's under the simulator
    (so that the same configurations are rejected there)."""
    from .gpu import using_simulator
    if using_simulator():
        return H200_LIMITS
    return _device_limits()


_cached: list = []


def _device_limits() -> DeviceLimits:
    if not _cached:
        _cached.append(DeviceLimits.from_device())
    return _cached[0]


class LaunchError(ValueError):
    """A configuration that cannot launch; names the limit, the amount asked and available."""

    def __init__(self, limit: str, asked: int, available: int, unit: str, what: str = ""):
        self.limit, self.asked, self.available, self.unit = limit, int(asked), int(available), unit
        lead = f"{what}: " if what else ""
        super().__init__(
            f"{lead}cannot launch: {limit} exceeded, asked {self.asked:,} {unit}, "
            f"available {self.available:,} {unit}")


def _ceil_to(x: int, unit: int) -> int:
    return ceil_div(x, unit) * unit


def resolve_limits(limits) -> DeviceLimits:
    """`limits` as a DeviceLimits: None is `current_limits()`, a string a preset's name
    (`get_preset`); anything else is a TypeError naming limits."""
    if limits is None:
        return current_limits()
    return check_named(limits, "limits", DeviceLimits, get_preset,
                       "a DeviceLimits, a preset's name such as 'H200', or None")


def check_launch(threads: int, shared_bytes: int, limits: DeviceLimits | None = None, *,
                 regs_per_thread: int | None = None, optin: bool = True, what: str = "",
                 grid: tuple | None = None) -> None:
    """Raise LaunchError if one block of this shape cannot launch on `limits`
    (default: `current_limits()`).

    threads: threads per block; shared_bytes: shared memory per block (bytes, static
    plus dynamic); regs_per_thread: from the compiled kernel (None = unknown, skipped);
    optin: whether the kernel raises its dynamic shared-memory limit beyond 48 KiB;
    grid: blocks in x, y (and z), None = not checked. limits may also be a preset's name
    ('H200'). A value of the wrong kind is a TypeError or ValueError naming it.
    """
    limits = resolve_limits(limits)
    threads = check_block(threads, "threads")
    shared_bytes = check_whole(shared_bytes, "shared_bytes", meaning="bytes")
    if regs_per_thread is not None:
        regs_per_thread = check_whole(regs_per_thread, "regs_per_thread")
    if grid is not None:
        if not isinstance(grid, tuple) or not 1 <= len(grid) <= 3:
            raise TypeError(f"grid must be a tuple of 1 to 3 block counts or None, got "
                            f"{grid!r}")
        grid = tuple(check_block(b, "grid") for b in grid)
    optin = check_bool(optin, "optin")
    if threads > limits.max_threads_per_block:
        raise LaunchError("threads per block", threads, limits.max_threads_per_block,
                          "threads", what)
    smem_cap = limits.smem_per_block_optin if optin else limits.smem_per_block
    name = ("shared memory per block (opt-in)" if optin
            else "shared memory per block (without opt-in)")
    if shared_bytes > smem_cap:
        raise LaunchError(name, shared_bytes, smem_cap, "bytes", what)
    if regs_per_thread is not None:
        if regs_per_thread > limits.max_regs_per_thread:
            raise LaunchError("registers per thread", regs_per_thread,
                              limits.max_regs_per_thread, "registers", what)
        regs_block = _ceil_to(regs_per_thread * limits.warp_size, limits.reg_alloc_unit) \
            * ceil_div(threads, limits.warp_size)
        if regs_block > limits.max_regs_per_block:
            raise LaunchError("registers per block", regs_block, limits.max_regs_per_block,
                              "registers", what)
    for axis, blocks, most in zip("xyz", grid or (), limits.max_grid):
        if blocks > most:
            raise LaunchError(f"grid {axis} dimension", blocks, most, "blocks", what)


#: Resident warps per SM a chosen default should keep when some candidate can: every
#: default measured on the H200 keeps at least 8 (e.g. the backward's 2 blocks x 4 warps
#: at d = 64); fewer leave too little work to hide memory latency. A heuristic: only the
#: H200 was measured.
MIN_RESIDENT_WARPS = 8


def pick_config(candidates, limits: DeviceLimits, what: str,
                min_warps: int = MIN_RESIDENT_WARPS):
    """The key of the first candidate that launches on `limits` and keeps at least
    `min_warps` warps resident per SM; failing that, of the first that launches.

    candidates: (key, threads, shared_bytes) best first (a kernel's preference order,
    already filtered by its own rules, e.g. no register spills). LaunchError naming
    shared memory per block, with the smallest candidate's bytes, when none launches.
    """
    fitting, smallest = [], None
    for key, threads, shared in candidates:
        smallest = shared if smallest is None else min(smallest, shared)
        try:
            occ = occupancy(threads, shared, limits)
        except LaunchError:
            continue
        if occ.warps_per_sm >= min_warps:
            return key
        fitting.append(key)
    if fitting:
        return fitting[0]
    raise LaunchError("shared memory per block (opt-in)", smallest or 0,
                      limits.smem_per_block_optin, "bytes",
                      f"{what} on {limits.name}: no configuration fits")


@dataclass(frozen=True)
class Launch:
    """One kernel launch of a chosen configuration, as the device's limits see it.

    what: the kernel (and its configuration, for messages); grid: blocks (x, y[, z]);
    threads: per block; shared_bytes: per block (static plus dynamic); optin: whether
    the kernel opts in beyond 48 KiB of dynamic shared memory; regs_per_thread: as
    compiled for the H200 (recorded in benchmarks/results/), None where unknown;
    config: the tile choices in words, e.g. "Br=64 Bc=32 threads=256 tm=4".
    """

    what: str
    grid: tuple
    threads: int
    shared_bytes: int
    optin: bool = True
    regs_per_thread: int | None = None
    config: str = ""

    def check(self, limits: DeviceLimits) -> None:
        """LaunchError naming the limit if this launch cannot run on `limits`.

        Unknown registers per thread count as `limits.max_regs_per_thread` (255): no
        compiled kernel uses more, so this bound is conservative. With 255 registers a
        block of up to 256 threads always fits the 65,536 registers of a block.
        """
        regs = limits.max_regs_per_thread if self.regs_per_thread is None \
            else self.regs_per_thread
        check_launch(self.threads, self.shared_bytes, limits, regs_per_thread=regs,
                     optin=self.optin, what=self.what, grid=self.grid)


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks per SM and what limits them.

    by_resource: blocks per SM each resource alone would allow (None when unknown).
    limiter: the resource giving the smallest count. warps_per_sm, fraction: resident
    warps and their share of the SM's maximum.
    """

    blocks_per_sm: int
    limiter: str
    by_resource: dict
    warps_per_sm: int
    fraction: float

    def describe(self) -> str:
        parts = ", ".join(f"{k} {v}" for k, v in self.by_resource.items() if v is not None)
        return (f"{self.blocks_per_sm} block(s)/SM = {self.warps_per_sm} warps "
                f"({self.fraction:.0%} of the SM's warps); limited by {self.limiter} "
                f"[{parts}]")


def occupancy(threads: int, shared_bytes: int, limits: DeviceLimits, *,
              regs_per_thread: int | None = None, optin: bool = True) -> Occupancy:
    """Resident blocks per SM from threads, registers and shared memory (CUDA's calculator).

        warps/block   W = ceil(threads / 32)
        threads:      floor(max_warps_per_SM / W)
        registers:    floor(regs_per_SM / (ceil(regs * 32, 256) * W))
        shared mem:   floor(smem_per_SM / ceil(shared_bytes + reserved, 128))
        blocks:       max_blocks_per_SM

    Raises LaunchError when not even one block can launch. limits: a DeviceLimits, a
    preset's name or None (`current_limits()`), as `check_launch` takes it.
    """
    limits = resolve_limits(limits)
    check_launch(threads, shared_bytes, limits, regs_per_thread=regs_per_thread, optin=optin)
    warps = ceil_div(threads, limits.warp_size)
    max_warps = limits.max_threads_per_sm // limits.warp_size
    by = {"threads (warps)": max_warps // warps, "blocks per SM": limits.max_blocks_per_sm}
    if regs_per_thread is None:
        by["registers"] = None
    else:
        per_warp = _ceil_to(max(regs_per_thread, 1) * limits.warp_size, limits.reg_alloc_unit)
        by["registers"] = limits.regs_per_sm // (per_warp * warps)
    # the system reserves smem_reserved_per_block (1 KiB on Hopper) even for 0 bytes
    per_block = _ceil_to(shared_bytes + limits.smem_reserved_per_block, limits.smem_alloc_unit)
    by["shared memory"] = limits.smem_per_sm // per_block
    known = {k: v for k, v in by.items() if v is not None}
    # ties: report the order a learner would act on (shared memory, registers, threads)
    order = ["shared memory", "registers", "threads (warps)", "blocks per SM"]
    blocks = min(known.values())
    limiter = next(k for k in order if known.get(k) == blocks)
    if blocks < 1:
        raise LaunchError(limiter + " per SM", 1, 0, "blocks")
    return Occupancy(blocks, limiter, by, blocks * warps, blocks * warps / max_warps)
