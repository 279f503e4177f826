"""Torch-free embedding runtime for encoders exported by ``edgegcl export``.

Everything in this package needs only numpy, scipy (its CSR product), onnxruntime and the
standard library, so the folder can be copied to a device where torch is too heavy or not
installed:
``python -m export.embed model.onnx --graph graph.npz --out embeddings.npy``. Installed with
edgegcl it is the package ``edgegcl_embed`` (script ``edgegcl-embed``); its modules import
each other relatively, so either name works.
"""
