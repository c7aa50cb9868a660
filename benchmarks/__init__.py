"""Reproducible retrieval benchmarks of spade_memory (LoCoMo, CMRC 2018) and baselines.

Run each as a module from the repository root, e.g. ``python -m benchmarks.locomo``;
results are written to ``benchmarks/results/`` and, with ``--write-md``, to
``BENCHMARKS.md``.
"""
