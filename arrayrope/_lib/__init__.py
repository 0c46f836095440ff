"""Private helpers of the pipeline: argument checks, dtype rules, positions, the exact float32 method.

Each fact lives here once and every stage asks for it: what a valid argument is
(:mod:`.checks`), which dtype a table or a computation takes (:mod:`.dtypes`),
how positions are read (:mod:`.positions`), how tables are built without float64
(:mod:`.digits`), and the names of the choices a user makes (:mod:`.types`).

This package lies below :mod:`arrayrope.backends` and imports nothing from it; what
its helpers ask of the fence (an array's namespace and device, whether its values may
be read) is declared in :mod:`.fence`, which ``backends`` fills as it loads.
"""
