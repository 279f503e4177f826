"""The ONNX opsets an export may target (standard library alone: ``edgegcl export --help``
states them before torch loads).

The dense stages use MatMul, Add, Identity and the activations' ops, and the portable
aggregation Loop, TopK, NonZero, Compress, Pad, Gather, Range and elementwise ops,
all in opset 13; 20 is the TorchScript exporter's newest. 17 is the default: supported by every
onnxruntime since 1.11 (2022), mobile builds included.
"""

MIN_OPSET, MAX_OPSET, DEFAULT_OPSET = 13, 20, 17
