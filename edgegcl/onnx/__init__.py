"""Export to ONNX: the traceable encoder, the exporter and int8 quantisation."""
