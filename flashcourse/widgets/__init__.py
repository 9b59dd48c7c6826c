"""The course's interactive explorers (ipywidgets + matplotlib), one module each.

    score_memory.score_memory_explorer()   M_score = Tq x Tk x s per head and per batch,
                                           against a GPU's on-chip memory, L2, device memory
    traffic.traffic_explorer()             outer-memory bytes of dense and tiled attention,
                                           FLOPs, intensity, a roofline bound, the tile fit
    tile_schedule.tile_schedule()          the score matrix as tiles; a step slider (with
                                           Play) replays a real `flashcourse.tiled.forward`
    tuning.tuning_explorer()               tile sizes, threads and rows per thread of the
                                           CUDA flash kernel: shared memory, occupancy,
                                           traffic, recorded and live timings
    backward.backward_explorer()           what each backward keeps, moves and computes
    kv_cache.kv_cache_explorer()           a model's KV cache beside its weights and the
                                           GPU's memory (notebook 11)
    variants.variants_explorer()           a built-in mask's block mask (full / partial /
                                           empty tiles) and what skipping saves (notebook 14)
    paged_pool.paged_pool_explorer()       requests in a pool of KV-cache pages: owners,
                                           shared prefix pages, free pages, wasted slots
                                           against a contiguous allocation (notebook 11b)

Import each from its module (`from flashcourse.widgets.traffic import traffic_explorer`).
All are built on `_base.Explorer`: one message line instead of a traceback for any
invalid setting, serialised redraws, one persistent figure rendered sharp at the size it
is shown. Each returns its widget without displaying it: put the call last in a cell.
CSS classes for browser tests: the explorers `fc-score-memory`, `fc-traffic`, `fc-schedule`,
`fc-tuning`, `fc-backward`, `fc-kv-cache`, `fc-variants`, `fc-paged-pool`; their readouts
`fc-score-readout`, `fc-traffic-readout`, `fc-schedule-readout`, `fc-tuning-readout`,
`fc-backward-readout`, `fc-kv-cache-readout`, `fc-variants-readout`,
`fc-paged-pool-readout`; sliders `fc-slider-tq`,
`fc-slider-tk`, `fc-slider-t`, `fc-slider-budget`, `fc-slider-step`, `fc-slider-log2n`,
`fc-slider-batch`, `fc-slider-log2tk`, `fc-slider-n`, `fc-slider-page`;
`fc-message` (the one-line error), `fc-warning`, `fc-note` (the paper button's note).
The numbers behind them are pure functions in `flashcourse.widgets.readouts` (and
`flashcourse.plots.backward`, `flashcourse.configs`, `flashcourse.limits`), tested
without a browser.
"""
