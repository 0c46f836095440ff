"""arrayrope's benchmark suite: ``python -m bench`` (``--quick`` for a short run).

Importing this package imports nothing else, so thread settings made by the
command line take effect before NumPy, PyTorch, JAX or ONNX Runtime load.
"""
