"""arrayrope.export: ONNX subgraphs that apply rotary embeddings in deployment graphs.

Imported as ``arrayrope.export``; it requires the ``onnx`` extra. The tables it
embeds come from the core, so exported graphs are as precise as arrayrope itself.
"""

__all__: list[str] = []
