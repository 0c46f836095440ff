"""Fusing other exporters' graphs: finding rotations, measuring them, replacing them, reporting.

``_match`` finds the rotation patterns exporters write, ``_probe`` runs each one to
identify its convention and tables (with :mod:`arrayrope._identify`), ``_replace`` builds
the fused node of one rotation and checks it against the original, ``_edit`` writes the
nodes kept into the model, ``_rewrite`` (:func:`~arrayrope.export.fuse_rotary`) runs
these over a model and validates the result, and ``_report`` says what was done with
every rotation and why.
"""
