"""Torch-free embedding runtime for encoders exported by ``edgegcl export``.

Everything in this package needs only numpy, scipy (its CSR product), onnxruntime and the
standard library (numba optional), so it installs alone (``pip install ./edgegcl_embed``, the
distribution ``edgegcl-embed``; README.md here) or the folder can be copied to a device:
``python -m edgegcl_embed.embed model.onnx --graph graph.npz --out embeddings.npy``. Installed, alone
or with edgegcl, it is the package ``edgegcl_embed`` (script ``edgegcl-embed``); its modules
import each other relatively, so either name works. It reads the model files of
``contract``'s interface.

Importing it turns onnxruntime's telemetry off before anything loads onnxruntime: on Linux and
macOS its import writes a device id and an event queue under ``~/.cache/Microsoft`` (1.32),
files outside the paths the user named. A user who wants it sets ``ORT_DISABLE_TELEMETRY=0``
first, which is kept.
"""

import os

__version__ = "0.1.0"



def quiet_onnxruntime() -> None:
    """Turn onnxruntime's telemetry off for this process before onnxruntime loads (its
    environment switch, under the name of each release); a value the user set is kept."""
    for name in ("ORT_DISABLE_TELEMETRY", "ORT_TELEMETRY_DISABLED"):
        os.environ.setdefault(name, "1")


quiet_onnxruntime()
