"""Export to ONNX: the traceable stages, the portable graph around them, the exporter and
int8 quantisation."""
