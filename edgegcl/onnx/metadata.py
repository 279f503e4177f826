"""The ``edgegcl.*`` metadata of a model file (edgegcl_embed.contract.ModelMetadata), written
into the ONNX model's ``metadata_props`` by the exporter and the quantiser alike."""

from __future__ import annotations

import onnx

from edgegcl_embed.contract import PREFIX, ModelMetadata


def write_metadata(model: onnx.ModelProto, meta: ModelMetadata) -> None:
    """Replace the model's ``edgegcl.*`` metadata_props with ``meta`` (others are kept)."""
    keep = [(p.key, p.value) for p in model.metadata_props if not p.key.startswith(PREFIX)]
    del model.metadata_props[:]
    for key, value in [*keep, *meta.to_props().items()]:
        model.metadata_props.add(key=key, value=value)
