"""Fusing other exporters' graphs: finding rotations, measuring them, replacing them, reporting.

``_match`` finds the rotation patterns exporters write, ``_probe`` runs each one to
identify its convention and tables, ``_rewrite`` (:func:`~arrayrope.export.fuse_rotary`)
replaces those it can reproduce exactly, and ``_report`` says what was done with
every rotation and why.
"""
