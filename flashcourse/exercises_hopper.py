"""exercises_hopper: the exercises of notebooks 12 and 12b (the Hopper path), checked like
every exercise (`exercises.check`): descriptors and swizzles, version 2's V layout (notebook
12); version 4's register budget, how the blocks of a launch fill the SMs in waves
(`cuda.hopper.tail_split`), and the lazy rescale (`constants.RESCALE_THRESHOLD`) (notebook
12b)."""

from __future__ import annotations

import math

from ._exercise import Exercise, _same_number

#: exercise 12: a K tile of S = Q K^T (Bc = 128 keys x d = 64 fp16, K-major, 128-byte
#: swizzle) that starts at this shared-memory byte, and the element whose offset is asked
WGMMA_12 = {"start": 8192, "rows": 128, "row": 9, "k": 20, "narrow_row_bytes": 64}


def descriptors_12() -> Exercise:
    from .cuda.hopper import wgmma_layouts as W
    e = WGMMA_12
    start_field = e["start"] >> 4
    sbo = W.ATOM_ROWS * 128
    plain = e["row"] * 128 + e["k"] * 2
    offset = int(W.kmajor_offset(e["row"], e["k"], 128, rows=e["rows"]))
    narrow = e["narrow_row_bytes"]
    conflict = W.conflict_degree(W.column_read(None, 0, narrow))
    working = (f"start field = start address >> 4 = {e['start']} >> 4 = {start_field}\n"
               f"SBO = the step between 8-row core-matrix groups along N:\n"
               f"  8 rows x 128 B = {sbo} B (the descriptor stores {sbo} >> 4 = {sbo >> 4})\n"
               f"element (row {e['row']}, k {e['k']}): unswizzled {e['row']} x 128 + "
               f"{e['k']} x 2 = {plain};\n"
               f"  its 16-byte chunk {plain >> 4 & 7} XOR (row bits {plain >> 7 & 7}) = "
               f"{(plain >> 4 & 7) ^ (plain >> 7 & 7)}: byte {offset}\n"
               f"rows of {narrow} B, no swizzle: chunk c of row r is in bank group\n"
               f"  (r x {narrow // 16} + c) mod 8: 8 rows hit {8 // conflict} groups, "
               f"{conflict}-way")
    diagnoses = {
        "start_field": [(lambda y: _same_number(y, e["start"], 1e-9),
                         "the field holds the address in 16-byte units: shift right by 4")],
        "sbo_bytes": [(lambda y: _same_number(y, 128, 1e-9),
                       "128 B is one row; SBO steps over a whole 8-row core-matrix group"),
                      (lambda y: _same_number(y, sbo >> 4, 1e-9),
                       "that is the encoded field (>> 4); the question asks for bytes")],
        "offset": [(lambda y: _same_number(y, plain, 1e-9),
                    "that is the unswizzled offset: XOR the chunk bits 4-6 with bits 7-9"),
                   (lambda y: _same_number(y, plain + e["start"], 1e-9)
                    or _same_number(y, offset + e["start"], 1e-9),
                    "the offset is inside the tile: leave out the tile's start address")],
        "conflict_64": [(lambda y: _same_number(y, 8, 1e-9),
                         "8-way is for 128-byte rows; two 64-byte rows share one 128-byte "
                         "line of banks"),
                        (lambda y: _same_number(y, 1, 1e-9),
                         "without a swizzle the rows' chunk c lands on only 2 bank groups"),
                        (lambda y: _same_number(y, 2, 1e-9),
                         "2-way is for 32-byte rows (four share a 128-byte line of banks); "
                         "64-byte rows put chunk c of 8 rows in 2 bank groups, 4 rows each")],
    }
    return Exercise(
        f"A {e['rows']} x 64 fp16 K tile (K-major, 128-byte swizzle) at shared byte "
        f"{e['start']}: its descriptor's start field and SBO, the byte offset of element "
        f"({e['row']}, {e['k']}), and the conflict of a column read of 64-byte rows",
        {"start_field": start_field, "sbo_bytes": sbo, "offset": offset,
         "conflict_64": conflict}, working, rtol=1e-9, diagnoses=diagnoses)


#: exercise 2 of notebook 12: the Hopper kernel's V_j tile (MN-major, no swizzle)
V_LAYOUT_12 = {"keys": 64, "d": 128, "key": 13, "col": 37, "kp": 3}


def v_layout_12() -> Exercise:
    from .cuda.hopper import host as hopper
    from .cuda.hopper import wgmma_layouts as W
    e = V_LAYOUT_12
    cfg = hopper.HopperConfig("fp16", 3, e["keys"], e["d"])
    lbo, sbo = cfg.v_lbo_sbo()
    offset = int(W.interleaved_mnmajor(e["key"], e["col"], e["keys"]))
    kstep = 16 * 16                     # 16 keys of one k16 step, 16 bytes each
    start = e["kp"] * kstep
    row_major = (e["key"] * e["d"] + e["col"]) * 2
    working = (f"V_j is stored MN-major in core matrices of 8 keys x 8 columns (16 B per key):\n"
               f"  column chunk {e['col']} // 8 = {e['col'] // 8} starts at "
               f"{e['col'] // 8} x (16 B x {e['keys']} keys) = {e['col'] // 8 * 16 * e['keys']}\n"
               f"  key {e['key']}: + {e['key']} x 16 = {e['key'] * 16}; column {e['col']} % 8 = "
               f"{e['col'] % 8}: + {e['col'] % 8} x 2 -> byte {offset}\n"
               f"LBO (next 8 keys, along K of P V) = 8 x 16 = {lbo} B; SBO (next 8 columns, "
               f"along N) = 16 x {e['keys']} = {sbo} B\n"
               f"k16 step kp = {e['kp']}: keys {16 * e['kp']}.. start {e['kp']} x 16 keys x 16 B "
               f"= {start} B into the tile")
    diagnoses = {
        "offset": [(lambda y: _same_number(y, row_major, 1e-9),
                    "that is row-major (key x d + col) x 2; the kernel stores each 8-column "
                    "chunk of all keys together"),
                   (lambda y: _same_number(y, int(W.interleaved_kmajor(e["key"], e["col"],
                                                                        e["d"])), 1e-9),
                    "that is the K-major layout of Q and K; V is MN-major")],
        "lbo_bytes": [(lambda y: _same_number(y, sbo, 1e-9),
                       "that is SBO: LBO steps along K (the keys), 8 keys of 16 bytes")],
        "sbo_bytes": [(lambda y: _same_number(y, lbo, 1e-9),
                       "that is LBO; SBO steps along N (columns of d): 8 columns further is "
                       "a whole chunk of all the keys")],
        "start_bytes": [(lambda y: _same_number(y, e["kp"] * 32, 1e-9),
                         "32 bytes is 16 values along one K-major row; here K runs over keys, "
                         "and each key is a 16-byte row of a core matrix")],
    }
    return Exercise(
        f"The Hopper kernel's V_j ({e['keys']} keys x d = {e['d']} fp16, MN-major, no "
        f"swizzle): the byte offset of V[{e['key']}, {e['col']}], the descriptor's LBO and "
        f"SBO, and where the k16 step kp = {e['kp']} starts",
        {"offset": offset, "lbo_bytes": lbo, "sbo_bytes": sbo, "start_bytes": start},
        working, rtol=1e-9, diagnoses=diagnoses)


#: exercise 1 of notebook 12b: the register budget of version 4 (a producer warpgroup)
SETMAXNREG_12 = {"consumers": 2, "block_k": 128, "d": 128}


def setmaxnreg_12() -> Exercise:
    from .cuda.hopper import host as hopper
    from .limits import PRESETS
    e = SETMAXNREG_12
    cfg = hopper.HopperConfig("fp16", e["consumers"], e["block_k"], e["d"], pipeline="producer")
    lim = PRESETS["H200"]
    launch = hopper.launch_bound_registers(cfg.threads, lim)
    producer, consumer = cfg.setmaxnreg()
    accumulators = 64 * e["block_k"] // 128 + 64 * e["d"] // 128
    total = lim.max_regs_per_block
    warps = cfg.threads // 32
    block = cfg.threads * launch          # the block's registers: setmaxnreg's pool (PTX ISA)
    pool = block - 128 * producer         # what the consumer warpgroups may share
    unrounded = (total // 128 - producer) // e["consumers"]   # the SM's file taken as the pool
    working = (f"{cfg.threads} threads = {warps} warps share {total:,} registers; a warp gets "
               f"them in units of 256\n  (8 a thread): {total:,} / {warps} warps / 32 = "
               f"{total / cfg.threads:.1f} -> {launch} a thread, every thread alike\n"
               f"  the block holds {cfg.threads} x {launch} = {block:,}: setmaxnreg moves "
               f"registers within them only\n"
               f"after setmaxnreg.dec the producer's 128 threads keep {producer} each: "
               f"{block:,} - 128 x {producer} = {pool:,}\n"
               f"  left for {e['consumers']} consumer warpgroups ({128 * e['consumers']} "
               f"threads): {pool:,} / {128 * e['consumers']} = "
               f"{pool / (128 * e['consumers']):g} -> a multiple of 8: {consumer}\n"
               f"fp32 accumulators of one consumer thread: S (64 x Bc = {e['block_k']}) / 128 "
               f"= {64 * e['block_k'] // 128}, O (64 x d = {e['d']}) / 128 = "
               f"{64 * e['d'] // 128}:\n  {accumulators}, before P, the addresses and the "
               f"softmax's own")
    diagnoses = {
        "launch_regs": [(lambda y: _same_number(y, total // cfg.threads, 1e-9),
                         "registers go to whole warps in units of 256 (8 a thread): round "
                         "down to a multiple of 8"),
                        (lambda y: _same_number(y, 255, 1e-9),
                         "255 is the most one thread may address; with this many threads the "
                         "register file runs out first")],
        "consumer_regs": [(lambda y: _same_number(y, unrounded, 1e-9),
                           f"setmaxnreg moves registers only within the block's own "
                           f"{cfg.threads} x {launch} = {block:,}, not the SM's {total:,}: "
                           f"({block:,} - 128 x {producer}) / {128 * e['consumers']} "
                           f"threads, a multiple of 8"),
                          (lambda y: _same_number(y, total // 128 // e["consumers"], 1e-9)
                           or _same_number(y, 240, 1e-9),
                           f"the producer warpgroup keeps {producer} a thread: 128 x "
                           f"{producer} registers are not the consumers'")],
        "accumulators": [(lambda y: _same_number(y, accumulators // 2, 1e-9),
                          "both products accumulate in registers: S_j and O"),
                         (lambda y: _same_number(y, 2 * accumulators, 1e-9),
                          "a warpgroup's 64 x N accumulator tile is spread over its 128 "
                          "threads")],
    }
    return Exercise(
        f"Version 4 with {e['consumers']} consumer warpgroups and a producer warpgroup "
        f"(Bc = {e['block_k']}, d = {e['d']}): registers a thread under the launch bound, the "
        f"most a consumer thread can get after setmaxnreg (the producer keeps {producer}), "
        f"and its fp32 accumulators",
        {"launch_regs": launch, "consumer_regs": consumer, "accumulators": accumulators},
        working, rtol=1e-9, diagnoses=diagnoses)


#: exercise 2 of notebook 12b: the d = 128 default (Br = 192 rows, Bc = 80 keys) at N = 4096,
#: B x H = 32, on an H200's 132 SMs, one block resident per SM
WAVES_12 = {"n": 4096, "bh": 32, "block_q": 192, "block_k": 80, "sms": 132}


def waves_12() -> Exercise:
    from .cuda.hopper import tail_split
    e = WAVES_12
    units = math.ceil(e["n"] / e["block_q"]) * e["bh"]
    kb = math.ceil(e["n"] / e["block_k"])
    whole = tail_split.plan(units, kb, e["sms"], splits=1)
    sp = tail_split.plan(units, kb, e["sms"])
    waves = tail_split.block_times(whole, e["sms"], kb)
    last = units - sp.main
    split_times = tail_split.block_times(sp, e["sms"], kb)
    working = (f"query blocks a head: ceil({e['n']} / {e['block_q']}) = "
               f"{math.ceil(e['n'] / e['block_q'])}; x {e['bh']} heads = {units} blocks\n"
               f"waves: ceil({units} / {e['sms']}) = {waves:.0f} block-times (the last wave: "
               f"{last} blocks, {e['sms'] - last} SMs idle)\n"
               f"split: {e['sms']} // {last} = {sp.splits} key ranges a tail block -> "
               f"{last * sp.splits} pieces, one wave of them\n"
               f"time: {sp.main // e['sms']} whole waves + the longest piece's share of the "
               f"{kb} key blocks ({math.ceil(kb / sp.splits)} of {kb}) = {split_times:.3f}")
    diagnoses = {
        "blocks": [(lambda y: _same_number(y, e["n"] // e["block_q"] * e["bh"], 1e-9),
                    "a partial query block is a block too: round the blocks up"),
                   (lambda y: _same_number(y, math.ceil(e["n"] / e["block_q"]), 1e-9),
                    "every head has its own query blocks")],
        "waves": [(lambda y: _same_number(y, units / e["sms"], 1e-3),
                   "a wave is all or nothing for the time it takes: round up"),
                  (lambda y: _same_number(y, units // e["sms"], 1e-9),
                   "the blocks left over still need a wave of their own")],
        "splits": [(lambda y: _same_number(y, e["sms"] / last, 1e-3),
                    "a block is split into a whole number of pieces: round down"),
                   (lambda y: _same_number(y, e["sms"], 1e-9),
                    "only the last wave's blocks are split, and all their pieces "
                    "must fit in one wave")],
        "split_times": [(lambda y: _same_number(y, sp.main / e["sms"] + 1 / sp.splits, 1e-3),
                         f"{kb} key blocks do not split evenly into {sp.splits}: the longest "
                         f"piece sets the wave's length"),
                        (lambda y: _same_number(y, units / e["sms"], 1e-3),
                         "that is the work spread perfectly; the whole waves stay whole")],
    }
    return Exercise(
        f"d = 128 default tiles (Br = {e['block_q']}, Bc = {e['block_k']}), N = {e['n']}, "
        f"B x H = {e['bh']}, {e['sms']} SMs with one block each: blocks, block-times without "
        f"a split, pieces per tail block, block-times with the split",
        {"blocks": units, "waves": waves, "splits": sp.splits, "split_times": split_times},
        working, rtol=1e-3, diagnoses=diagnoses)


#: exercise 3 of notebook 12b: the lazy rescale (threshold in log2 units, as
#: `constants.RESCALE_THRESHOLD`) on one row whose kept max is m (log2 units), then two key
#: blocks whose largest scores are x1 and x2; d is the head dim of the warpgroup's O tile
#: (64 x d fp32 over 128 threads)
RESCALE_12 = {"threshold": 8.0, "m": 3.0, "x1": 10.5, "x2": 12.0, "d": 128}


def rescale_12() -> Exercise:
    e = RESCALE_12
    t, m0, x1, x2 = e["threshold"], e["m"], e["x1"], e["x2"]
    m1 = m0 if max(m0, x1) <= m0 + t else max(m0, x1)
    p1 = 2.0 ** (x1 - m1)
    m2 = m1 if max(m1, x2) <= m1 + t else max(m1, x2)
    alpha = 2.0 ** (m1 - m2)
    skipped = 64 * e["d"] // 128
    working = "\n".join((
        f"block 1: max(m, x1) = {max(m0, x1)} <= m + threshold = {m0 + t}: keep m = {m1}",
        f"  its largest P = 2^(x1 - m) = 2^{x1 - m1} = {p1:.4g} (<= 2^{t:g} = {2 ** t:g})",
        f"block 2: {x2} > {m1} + {t:g} = {m1 + t}: the max moves to {m2}",
        f"  alpha = 2^(m_old - m_new) = 2^({m1} - {m2}) = {alpha:.6g}: O and l shrink",
        f"a block that moves no row's max skips O *= alpha: the 64 x {e['d']} fp32 tile over "
        f"128 threads = {skipped} multiplies a thread"))
    diagnoses = {
        "m1": [(lambda y: _same_number(y, x1, 1e-9),
                f"{x1} is within {t:g} of the kept max {m0}: the row keeps its max")],
        "p1": [(lambda y: _same_number(y, 1.0, 1e-9),
                "with the old max kept, the block's top score sits above it: P > 1"),
               (lambda y: _same_number(y, math.exp(x1 - m1), 1e-3),
                "scores and maxima are in log2 units here: P = 2^(s - m), not e^(s - m)")],
        "m2": [(lambda y: _same_number(y, m1, 1e-9),
                f"{x2} passes {m1} + {t:g}: the max moves")],
        "alpha": [(lambda y: _same_number(y, 1 / alpha, 1e-6),
                   "alpha shrinks what was summed against the old max: 2^(m_old - m_new)"),
                  (lambda y: _same_number(y, 2.0 ** (x1 - m2), 1e-6),
                   f"the old max is the one the row kept, {m1}, not block 1's top score"),
                  (lambda y: _same_number(y, math.exp(m1 - m2), 1e-3),
                   "maxima are in log2 units here: alpha = 2^(m_old - m_new), not "
                   "e^(m_old - m_new)")],
        "skipped": [(lambda y: _same_number(y, 64 * e["d"], 1e-9),
                     "the 64 x d accumulator tile is spread over the warpgroup's 128 threads"),
                    (lambda y: _same_number(y, e["d"], 1e-9),
                     "count a thread's O accumulators: 64 x d values over 128 threads")],
    }
    return Exercise(
        f"Lazy rescale, threshold {t:g} (log2 units): a row's kept max {m0}, then blocks with "
        f"top scores {x1} and {x2}: the max after each, block 1's largest P, block 2's alpha, "
        f"and the multiplies a thread skips per block at d = {e['d']}",
        {"m1": m1, "p1": p1, "m2": m2, "alpha": alpha, "skipped": skipped},
        working, rtol=5e-3, diagnoses=diagnoses)   # 3 digits count: 181 for 2^7.5, 0.00195
