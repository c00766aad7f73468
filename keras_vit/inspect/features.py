"""Features of a trained ViT, ``forward_features``-style, for linear probes and retrieval.

``feature_model(model)`` returns a Keras model that shares every weight with
``model`` (the same layer objects, re-wired) and outputs a dict:

- ``"tokens"``: the encoded token sequence after the final LayerNorm, ``(batch, tokens, D)``;
- ``"cls"``: the class token's embedding after the final LayerNorm, ``(batch, D)``
  (models with a class token only);
- ``"pooled"``: the representation the head reads: the pooled token, after the
  pre-logits layer if the model has one, ``(batch, D or representation_size)``;
- ``"block_{i}"``: the output of transformer block i, ``(batch, tokens, D)``,
  for the requested blocks.
"""

import keras
import numpy as np

from keras_vit.layers import PatchEncoder, TokenPooling, TransformerBlock


def _layer(model, name):
    try:
        return model.get_layer(name)
    except ValueError:
        return None


def feature_model(model, blocks=None, outputs=None):
    """A Keras model sharing ``model``'s weights that returns its features as a dict.

    Args:
        model: a functional keras_vit model (ViT or hybrid), with or without a
            top; ``pooling=None`` models have no ``"pooled"`` feature.
        blocks: None (no intermediate outputs), ``"all"``, or a list of block
            indices (negative counts from the last block).
        outputs: which of ``"tokens"``, ``"cls"``, ``"pooled"`` to return;
            None: every one the model has.

    Returns:
        A ``keras.Model`` mapping images to a dict of features.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
    ...                       num_classes=3)
    >>> features = feature_model(model, blocks=[-1])
    >>> outputs = features.predict(np.zeros((2, 32, 32, 3)), verbose=0)
    >>> {name: value.shape for name, value in sorted(outputs.items())}
    {'block_1': (2, 17, 32), 'cls': (2, 32), 'pooled': (2, 32), 'tokens': (2, 17, 32)}
    """
    known = ("tokens", "cls", "pooled")
    pooled_layer = _layer(model, "pre_logits") or _layer(model, "pool")
    encoders = [layer for layer in model.layers if isinstance(layer, PatchEncoder)]
    if outputs is None:
        outputs = ["tokens"]
        if len(encoders) == 1 and encoders[0].class_token:
            outputs.append("cls")
        if pooled_layer is not None:
            outputs.append("pooled")
    for name in outputs:
        if name not in known:
            raise ValueError(f"Unknown feature: expected some of {known}. Received: {name!r}")
    all_blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
    norm = _layer(model, "encoder_norm")
    if len(encoders) != 1 or not all_blocks or norm is None:
        raise ValueError(
            "Expected a keras_vit model with a patch_encoder, transformer blocks and an encoder_norm. "
            f"Received: model {model.name!r}"
        )
    features = {}
    if "tokens" in outputs:
        features["tokens"] = norm.output
    if "cls" in outputs:
        if not encoders[0].class_token:
            raise ValueError(f"Model {model.name!r} has no class token (GAP pooling); ask for 'tokens' or 'pooled' instead.")
        features["cls"] = TokenPooling("token", name="cls_embedding")(norm.output)
    if "pooled" in outputs:
        pooled = pooled_layer
        if pooled is None:
            raise ValueError(f"Model {model.name!r} has no pooling layer (pooling=None); ask for 'tokens' instead.")
        features["pooled"] = pooled.output
    for i in _block_indices(blocks, len(all_blocks)):
        features[f"block_{i}"] = all_blocks[i].output
    return keras.Model(model.inputs, features, name=f"{model.name}_features")


def _block_indices(blocks, depth):
    if blocks is None:
        return []
    if isinstance(blocks, str):
        if blocks != "all":
            raise ValueError(f"`blocks` must be None, 'all' or a list of indices. Received: blocks={blocks!r}")
        return list(range(depth))
    if isinstance(blocks, int):
        blocks = [blocks]
    indices = []
    for i in blocks:
        if not -depth <= int(i) < depth:
            raise ValueError(f"Block index out of range for a model of depth {depth}. Received: blocks={blocks!r}")
        indices.append(int(i) % depth)
    return indices


def forward_features(model, images, blocks=None, outputs=None, batch_size=32):
    """Features of a batch of images as NumPy arrays (see :func:`feature_model`).

    Args:
        model: a keras_vit model.
        images: ``(batch, H, W, 3)`` as the model takes them.
        blocks, outputs: see :func:`feature_model`.
        batch_size: images per forward pass.

    Returns:
        A dict of arrays.
    """
    features = feature_model(model, blocks=blocks, outputs=outputs)
    result = features.predict(np.asarray(images, dtype="float32"), batch_size=batch_size, verbose=0)
    return {name: np.asarray(value) for name, value in result.items()}
