"""arrayrope's benchmark suite: ``python -m bench`` (``--quick`` for a short run).

Importing this package imports nothing else. :mod:`bench.run` measures each thread
setting in a fresh process (:mod:`bench._worker`) whose environment already holds
the thread settings, so they take effect before NumPy, PyTorch, JAX or ONNX
Runtime load.
"""
