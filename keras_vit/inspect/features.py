"""Features of a trained ViT, ``forward_features``-style, for linear probes and retrieval.

``feature_model(model)`` returns a Keras model that shares every weight with
``model`` (the same layer objects, re-wired) and outputs a dict:

- ``"tokens"``: the encoded token sequence after the final LayerNorm (the last block's output for
  models without one, e.g. ``fc_norm`` models), ``(batch, tokens, D)``; tokens are
  ``[class, distillation, registers, patches]``, each where the model has it;
- ``"cls"``: the class token of ``"tokens"``, ``(batch, D)`` (models with a class token);
- ``"distillation"``: DeiT's distillation token of ``"tokens"``, ``(batch, D)``;
- ``"registers"``: the register tokens of ``"tokens"``, ``(batch, registers, D)``;
- ``"pooled"``: the pooled vector: the class token, the mean of the patch tokens or the MAP head's
  output (DeiT: the mean of the class and distillation tokens), after ``fc_norm`` and, without a
  projection, the pre-logits layer: what the head reads (timm's ``forward_head(pre_logits=True)``,
  transformers' ``pooler_output``), ``(batch, D or representation_size)``;
- ``"embedding"``: models with a projection only (CLIP): the projected ``"pooled"`` (after the pre-logits
  layer, if any), what the head reads, ``(batch, projection_dim)`` (transformers' ``image_embeds``);
- ``"block_{i}"``: the output of transformer block i, ``(batch, tokens, D)``, for the requested blocks.

Dense features, as DINOv2's users take them (timm's ``forward_intermediates``):
``intermediates_model(model, indices)`` and ``forward_intermediates(model, images, indices)`` give chosen
blocks' patch tokens as ``(batch, rows, cols, D)`` maps, with the prefix tokens (class, distillation,
registers) apart, at any input size for models built with ``image_size=None``.
"""

import keras
import numpy as np
from keras import ops

from keras_vit.architecture.model import config_of
from keras_vit.inference.naflex_runtime import is_naflex
from keras_vit.inference.runtimes import eager_outputs
from keras_vit.layers import TokenPooling, TransformerBlock
from keras_vit.layers.checks import PACKAGE

FEATURES = ("tokens", "cls", "distillation", "registers", "pooled", "embedding")


def require_image_model(model, what):
    """Refuse a NaFlex model (its input: each image's patches at its own grid, padded and masked) by name where
    ``what`` takes images of one size; :func:`feature_model` serves one."""
    if is_naflex(model):
        raise ValueError(
            f"{what} takes images of one size (batch, H, W, 3); model {model.name!r} is a NaFlex model "
            "(input_mode='naflex': each image's patches at its own grid, padded and masked), which it does not "
            "support. keras_vit.feature_model(model) returns its features for a NaFlex batch."
        )


def final_tokens(model):
    """The symbolic token sequence after the encoder: the final norm's output, or the last block's without one."""
    config = config_of(model)
    if config.final_norm:
        return model.get_layer("encoder_norm").output
    return model.get_layer(f"transformer_block_{config.num_layers - 1}").output


def available_features(model):
    """The names of :data:`FEATURES` that ``model`` has, in that order."""
    config = config_of(model)
    has = {
        "tokens": True,
        "cls": config.class_token,
        "distillation": config.distillation_token,
        "registers": config.num_register_tokens > 0,
        "pooled": config.pooled,
        "embedding": config.pooled and bool(config.projection_dim),
    }
    return [name for name in FEATURES if has[name]]


def _missing(model, name):
    config = config_of(model)
    why = {
        "cls": "has no class token (class_token=False, e.g. pooling='gap' or 'map')",
        "distillation": "has no distillation token",
        "registers": "has no register tokens",
        "pooled": f"has no pooling (pooling={config.pooling!r})",
        "embedding": "has no projection (projection_dim=None)",
    }[name]
    return ValueError(
        f"Model {model.name!r} {why}: feature {name!r} does not exist. "
        f"Its features: {available_features(model)} (pooling={config.pooling!r})"
    )


def _pooled(model, config):
    """``(pooled, embedding)`` symbolic tensors (``embedding`` None without a projection)."""
    if config.distillation_token:  # DeiT: the two tokens averaged, as its two heads are at inference
        pooled = [model.get_layer("pool").output, model.get_layer("pool_distillation").output]
        return keras.layers.Average(name="pooled_average")(pooled), None
    pooled = model.get_layer("map_head" if config.pooling == "map" else "pool").output
    if config.fc_norm:
        pooled = model.get_layer("fc_norm").output
    pre_logits = model.get_layer("pre_logits").output if config.representation_size else None
    if not config.projection_dim:
        return (pre_logits if pre_logits is not None else pooled), None
    embedding = model.get_layer("projection").output
    return pooled, (pre_logits if pre_logits is not None else embedding)


def feature_model(model, blocks=None, outputs=None):
    """A Keras model sharing ``model``'s weights that returns its features as a dict.

    Args:
        model: a keras_vit model (ViT, family member or hybrid), with or without a
            top; ``pooling=None`` models have no ``"pooled"`` feature.
        blocks: None (no intermediate outputs), ``"all"``, or a list of block
            indices (negative counts from the last block).
        outputs: which of :data:`FEATURES` to return; None: every one the model has.

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
    config = config_of(model)
    available = available_features(model)
    outputs = list(available if outputs is None else ([outputs] if isinstance(outputs, str) else outputs))
    for name in outputs:
        if name not in FEATURES:
            raise ValueError(f"Unknown feature: expected some of {FEATURES}. Received: {name!r}")
        if name not in available:
            raise _missing(model, name)
    all_blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
    tokens = final_tokens(model)
    features = {}
    if "tokens" in outputs:
        features["tokens"] = tokens
    if "cls" in outputs:
        features["cls"] = TokenPooling("token", name="cls_embedding")(tokens)
    if "distillation" in outputs:
        features["distillation"] = TokenPooling("distillation", name="distillation_embedding")(tokens)
    if "registers" in outputs:
        start = int(config.class_token) + int(config.distillation_token)
        features["registers"] = tokens[:, start : start + config.num_register_tokens]
    if "pooled" in outputs or "embedding" in outputs:
        pooled, embedding = _pooled(model, config)
        if "pooled" in outputs:
            features["pooled"] = pooled
        if "embedding" in outputs:
            features["embedding"] = embedding
    for i in block_indices(blocks, len(all_blocks)):
        features[f"block_{i}"] = all_blocks[i].output
    return keras.Model(model.inputs, features, name=f"{model.name}_features")


def block_indices(blocks, depth):
    """Absolute block indices of ``blocks``: None (none), ``"all"``, an index or a list (negative from the end)."""
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
        if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)):  # 1.9, '1', True: not an index
            raise ValueError(
                f"Block indices must be ints (negative from the end). Received: {i!r} of type {type(i).__name__} "
                f"in blocks={blocks!r}"
            )
        if not -depth <= int(i) < depth:
            raise ValueError(f"Block index out of range for a model of depth {depth}. Received: blocks={blocks!r}")
        indices.append(int(i) % depth)
    return indices


def forward_features(model, images, blocks=None, outputs=None, batch_size=32):
    """Features of a batch of images as NumPy arrays (see :func:`feature_model`; a NaFlex model: call
    ``feature_model(model)`` on its batch).

    Args:
        model: a keras_vit model.
        images: ``(batch, H, W, 3)`` as the model takes them.
        blocks, outputs: see :func:`feature_model`.
        batch_size: images per forward pass.

    Returns:
        A dict of arrays.
    """
    require_image_model(model, "forward_features")
    images = checked_images(model, images)
    features = feature_model(model, blocks=blocks, outputs=outputs)
    return run_in_batches(features, images, batch_size)


def checked_images(model, images):
    """``images`` as float32 ``(batch, H, W, 3)``; a rank, channel count or size ``model`` does not take is
    refused naming both sizes, before any graph is built (Keras' own message names neither)."""
    config = config_of(model)
    images = np.asarray(images, dtype="float32")
    if images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"Expected images of shape (batch, H, W, 3). Received: shape={images.shape}")
    size = images.shape[1:3]
    if config.image_size is not None and tuple(size) != tuple(config.image_size):
        raise ValueError(
            f"Model {model.name!r} takes {config.describe_size()} images. Received: images of {size[0]}x{size[1]} "
            "(build it with image_size=None, or resize it with keras_vit.resize_model, for other sizes)"
        )
    config.grid_for(size)  # a size the patches do not divide is refused by name
    return images


def run_in_batches(model, images, batch_size):
    """``model``'s outputs on ``images``, called eagerly ``batch_size`` images at a time (``training=False``), as
    NumPy in the structure the model returns (an array, a list or a dict). Not ``model.predict``: it traces a
    predict step for each model it is given (half a second for a tiny ViT on a 2-core CPU, seconds for a B/16),
    which the few images an inspection looks at do not repay."""
    if len(images) == 0:
        raise ValueError(f"Expected at least one image. Received: images of shape {np.shape(images)}")
    parts = [eager_outputs(model, images[i : i + batch_size]) for i in range(0, len(images), batch_size)]
    return keras.tree.map_structure(lambda *batches: np.concatenate(batches), *parts)


# ---------------------------------------------------------------------------------------- dense features

OUTPUT_FORMATS = ("NHWC", "NCHW", "NLC")


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchTokenMap(keras.layers.Layer):
    """The patch tokens of a ``(batch, prefix + rows * cols, D)`` sequence as a ``(batch, rows, cols, D)`` map.

    Args:
        num_prefix_tokens: tokens before the patches (class, distillation, registers), left out.
        grid: ``(rows, cols)``, or None: read when the model runs from the second input, the
            ``(batch, rows, cols, ...)`` output of a ``Patches(flatten=False)`` layer (an ``image_size=None`` model).

    Example:
    >>> layer = PatchTokenMap(num_prefix_tokens=1, grid=(2, 3))
    >>> tuple(layer(ops.zeros((4, 7, 8))).shape)
    (4, 2, 3, 8)
    """

    def __init__(self, num_prefix_tokens=0, grid=None, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.grid = None if grid is None else tuple(int(n) for n in grid)

    def call(self, tokens, patches=None):
        x = tokens[:, self.num_prefix_tokens :]
        if self.grid is not None:
            rows, cols = self.grid
        elif patches is None:
            raise ValueError("PatchTokenMap without a grid reads it from the patches: pass them as the second input.")
        else:
            rows, cols = ops.shape(patches)[1], ops.shape(patches)[2]
        return ops.reshape(x, (-1, rows, cols, tokens.shape[-1]))

    def compute_output_spec(self, tokens, patches=None):
        rows, cols = self.grid if self.grid is not None else (patches.shape[1], patches.shape[2])
        return keras.KerasTensor((tokens.shape[0], rows, cols, tokens.shape[-1]), dtype=tokens.dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"num_prefix_tokens": self.num_prefix_tokens, "grid": self.grid})
        return config


def take_indices(indices, depth):
    """timm's ``feature_take_indices``: None -> every block, an int n -> the last n, a list -> those (negative
    from the end). Returns absolute indices, in the order given."""
    if indices is None:
        indices = depth
    if isinstance(indices, (int, np.integer)) and not isinstance(indices, bool):
        if not 0 < indices <= depth:
            raise ValueError(f"`indices`={indices} asks for the last {indices} blocks of a model of depth {depth}: expected 1 to {depth}.")
        return list(range(depth - int(indices), depth))
    try:
        return block_indices(list(indices), depth)
    except TypeError:
        raise ValueError(f"`indices` must be None, an int (the last n blocks) or a list of block indices. Received: indices={indices!r}") from None


def intermediates_model(model, indices=None, norm=False, return_prefix_tokens=False, intermediates_only=False):
    """A Keras model sharing ``model``'s weights that returns chosen blocks' patch tokens as maps (dense features).

    Args:
        model: a keras_vit model (ViT, family member or hybrid).
        indices: None (every block), an int n (the last n blocks) or a list of block indices (negative
            from the end), as timm's ``forward_intermediates``.
        norm: apply the model's final norm (``encoder_norm``) to each block's output, as DINOv2's users
            do; a model without one (``final_norm=False``: timm's ``fc_norm`` models, whose ``norm`` is
            the identity) returns the outputs unchanged, as timm does.
        return_prefix_tokens: also return each block's prefix tokens ``(batch, num_prefix_tokens, D)``,
            in the order ``[class, distillation, registers]`` (``(batch, 0, D)`` for a model without any).
        intermediates_only: leave out the final tokens.

    Returns:
        A ``keras.Model`` mapping images to a dict: ``"block_{i}"``: ``(batch, rows, cols, D)`` patch tokens
        of block i (register and distillation tokens are never in the maps); ``"block_{i}_prefix"`` with
        ``return_prefix_tokens``; ``"tokens"`` (the encoder's output, every token, as :func:`feature_model`'s)
        unless ``intermediates_only``. A model built with ``image_size=None`` takes images of any size the
        patch size divides and gives each its own grid; any other model its own size.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.build_model(keras_vit.ViTConfig(image_size=None, native_image_size=32, patch_size=8,
    ...     hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64, num_register_tokens=2, include_top=False))
    >>> maps = intermediates_model(model, indices=1, return_prefix_tokens=True, intermediates_only=True)
    >>> {name: value.shape for name, value in maps.predict(np.zeros((1, 48, 64, 3)), verbose=0).items()}
    {'block_1': (1, 6, 8, 32), 'block_1_prefix': (1, 3, 32)}
    """
    require_image_model(model, "intermediates_model")
    config = config_of(model)
    blocks = [model.get_layer(f"transformer_block_{i}") for i in range(config.num_layers)]
    chosen = take_indices(indices, config.num_layers)
    norm_layer = model.get_layer("encoder_norm") if norm and config.final_norm else None
    prefix = config.num_prefix_tokens
    if config.image_size is None:
        to_map, patches = PatchTokenMap(prefix, name="patch_token_map"), model.get_layer("patches").output
    else:
        to_map, patches = PatchTokenMap(prefix, grid=config.grid, name="patch_token_map"), None
    outputs = {}
    for i in chosen:
        x = blocks[i].output
        if norm_layer is not None:
            x = norm_layer(x)
        outputs[f"block_{i}"] = to_map(x) if patches is None else to_map(x, patches)
        if return_prefix_tokens:
            outputs[f"block_{i}_prefix"] = x[:, :prefix]
    if not intermediates_only:
        outputs["tokens"] = final_tokens(model)
    return keras.Model(model.inputs, outputs, name=f"{model.name}_intermediates")


def forward_intermediates(
    model, images, indices=None, norm=False, output_fmt="NHWC", intermediates_only=False, return_prefix_tokens=False, batch_size=32
):
    """Chosen blocks' patch tokens of a batch of images as maps, as timm's ``forward_intermediates``.

    Args:
        model: a keras_vit model.
        images: ``(batch, H, W, 3)`` as the model takes them; any size the patch size divides for a model
            built with ``image_size=None``, the model's own size otherwise.
        indices, norm, return_prefix_tokens, intermediates_only: see :func:`intermediates_model`.
        output_fmt: ``"NHWC"`` (``(batch, rows, cols, D)``, the layout of keras_vit's images; the default),
            ``"NCHW"`` (timm's default, ``(batch, D, rows, cols)``) or ``"NLC"`` (``(batch, rows * cols, D)``).
        batch_size: images per forward pass.

    Returns:
        As timm: a list of arrays, one per block in the order of ``indices`` (with ``return_prefix_tokens``,
        ``(map, prefix_tokens)`` pairs, prefix tokens ``(batch, num_prefix_tokens, D)`` in the order
        ``[class, distillation, registers]``); unless ``intermediates_only``, ``(tokens, that list)`` with
        ``tokens`` the encoder's output ``(batch, tokens, D)``.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    >>> tokens, maps = forward_intermediates(model, np.zeros((2, 32, 32, 3)), indices=[0], output_fmt="NCHW")
    >>> tokens.shape, [m.shape for m in maps]
    ((2, 17, 32), [(2, 32, 4, 4)])
    """
    require_image_model(model, "forward_intermediates")
    if output_fmt not in OUTPUT_FORMATS:
        raise ValueError(f"Unknown `output_fmt`: expected one of {OUTPUT_FORMATS}. Received: output_fmt={output_fmt!r}")
    config = config_of(model)
    images = checked_images(model, images)
    chosen = take_indices(indices, config.num_layers)
    extractor = intermediates_model(model, chosen, norm, return_prefix_tokens, intermediates_only)
    result = run_in_batches(extractor, images, batch_size)
    maps = []
    for i in chosen:
        fmap = np.asarray(result[f"block_{i}"])
        if output_fmt == "NCHW":
            fmap = fmap.transpose(0, 3, 1, 2)
        elif output_fmt == "NLC":
            fmap = fmap.reshape(fmap.shape[0], -1, fmap.shape[-1])
        maps.append((fmap, np.asarray(result[f"block_{i}_prefix"])) if return_prefix_tokens else fmap)
    return maps if intermediates_only else (np.asarray(result["tokens"]), maps)
