"""Write the fields keras-hub's own ``get_config`` gives each backbone keras_vit reads (tests/fixtures/keras_hub_configs.json).

Run in the peers environment (``make peers``: keras-hub inside), from the repository root:

    .venv-peers/bin/python tools/keras_hub_configs.py

For each class keras_vit reads a ``config.json`` of (the backbones, the two towers' vision encoders, the tasks), it
builds a tiny instance and writes the sorted field names of its ``get_config()`` and the keras-hub version. The offline
tests (tests/weights/test_keras_hub_fields.py) hold the presets they write in keras-hub's layout to these names, and
keras_vit refuses a field that none of its readers looks at (``keras_vit.weights.keras_hub.family.Reader``).
"""

import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "keras_hub_configs.json")


def main():
    import keras_hub
    from keras_hub.src.models.clip.clip_text_encoder import CLIPTextEncoder
    from keras_hub.src.models.clip.clip_vision_encoder import CLIPVisionEncoder
    from keras_hub.src.models.siglip.siglip_text_encoder import SigLIPTextEncoder
    from keras_hub.src.models.siglip.siglip_vision_encoder import SigLIPVisionEncoder

    m = keras_hub.models
    size = dict(patch_size=8, hidden_dim=32, num_layers=1, num_heads=4, image_shape=(32, 32, 3))
    text = dict(vocabulary_size=50, embedding_dim=32, hidden_dim=32, num_layers=1, num_heads=4, intermediate_dim=64,
                max_sequence_length=8)
    vit = m.ViTBackbone(mlp_dim=64, **size)
    deit = m.DeiTBackbone(intermediate_dim=64, **size)
    built = {
        "ViTBackbone": vit,
        "ViTImageClassifier": m.ViTImageClassifier(backbone=vit, num_classes=3),
        "DeiTBackbone": deit,
        "DeiTImageClassifier": m.DeiTImageClassifier(backbone=deit, num_classes=3),
        "DINOV2Backbone": m.DINOV2Backbone(intermediate_dim=64, **size),
        "DINOV3Backbone": m.DINOV3Backbone(intermediate_dim=64, **size),
        "CLIPVisionEncoder": (clip := CLIPVisionEncoder(intermediate_dim=64, **size)),
        "CLIPBackbone": m.CLIPBackbone(clip, CLIPTextEncoder(**text), projection_dim=16),
        "SigLIPVisionEncoder": (siglip := SigLIPVisionEncoder(intermediate_dim=64, **size)),
        "SigLIPBackbone": m.SigLIPBackbone(siglip, SigLIPTextEncoder(**text)),
    }
    table = {"keras_hub_version": keras_hub.__version__,
             "fields": {name: sorted(layer.get_config()) for name, layer in sorted(built.items())}}
    with open(OUT, "w", encoding="utf-8") as f:  # one class a line
        lines = [f"  {json.dumps(name)}: {json.dumps(fields)}" for name, fields in table["fields"].items()]
        f.write(f'{{"keras_hub_version": {json.dumps(table["keras_hub_version"])}, "fields": {{\n' + ",\n".join(lines) + "\n}}\n")
    print(f"wrote {OUT} (keras-hub {keras_hub.__version__}, {len(built)} classes)", file=sys.stderr)


if __name__ == "__main__":
    main()
