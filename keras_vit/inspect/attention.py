"""Where a ViT looks: attention weights, attention rollout, mean attention distance.

The attention model re-runs a trained model's own layers: everything up to
the first block's input (``patch_encoder``, and the family's ``pre_norm``) is
taken from the functional graph as it is (so a hybrid's CNN backbone comes
along), then every ``TransformerBlock`` is called with
``return_attention_scores=True``, which computes the softmax weights
explicitly whatever kernel the ordinary forward pass uses. Any image size and
patch size work: the grid is read from the model, or for a model built with
``image_size=None`` from the image (any size the patch size divides). Tokens
are ``[class, distillation, registers, patches]``, each where the model has it
(``config.num_prefix_tokens`` before the patches); the maps and distances read
the patches only.

Example:
>>> import keras_vit
>>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
...                       num_classes=3)
>>> image = np.zeros((32, 32, 3))
>>> weights = attention_weights(model, image)  # (layers, heads, tokens, tokens): class token + 4x4 patches
>>> weights.shape
(2, 4, 17, 17)
>>> rollout_map(model, image, weights=weights, size=(60, 90)).shape  # a heatmap for a 90 x 60 photo
(60, 90)
"""

import weakref

import keras
import numpy as np

from keras_vit.architecture.family import PREFIX_POOLINGS
from keras_vit.architecture.model import config_of
from keras_vit.domains import FRACTION
from keras_vit.inference import images as images_lib
from keras_vit.inspect import features
from keras_vit.inspect.options import HEAD_FUSIONS

_ATTENTION_MODELS = weakref.WeakKeyDictionary()  # model -> its attention model, built once


def _patch_encoder(model):
    config_of(model)  # a keras_vit model, or an error naming it
    return model.get_layer("patch_encoder")


def transformer_blocks(model):
    """The model's ``TransformerBlock`` layers in depth order."""
    return [model.get_layer(f"transformer_block_{i}") for i in range(config_of(model).num_layers)]


def patch_grid(model, image_size=None):
    """``(rows, cols)`` of the token grid of images of ``image_size`` ``(H, W)`` (default: the model's native size).

    A model built with ``image_size=None`` cuts each image into its own grid; any other model into the
    grid its position embeddings are stored for.
    """
    config = config_of(model)
    return config.grid if image_size is None else config.grid_for(image_size)


def attention_model(model):
    """A Keras model, sharing ``model``'s weights, returning every block's attention weights.

    Args:
        model: a functional keras_vit model (ViT or hybrid), with or without a top.

    Returns:
        A ``keras.Model`` from the same inputs to a list with one
        ``(batch, heads, tokens, tokens)`` tensor per block, in depth order.
    """
    features.require_image_model(model, "attention_model (attention_weights, rollout_map, mean_attention_distance)")
    _patch_encoder(model)
    blocks = transformer_blocks(model)
    x = blocks[0].input  # the patch encoder's output, after the family's pre_norm (CLIP's ln_pre) if any
    scores = []
    for block in blocks:
        x, weights = _attention_probe(block)(x)
        scores.append(weights)
    attention = keras.Model(model.inputs, scores, name=f"{model.name}_attention")
    attention.is_attention_model = True
    return attention


def _attention_probe(block):
    """Wrap ``block`` so that a symbolic call returns ``(outputs, attention_weights)``.

    The wrapper owns no weights of its own: it calls the trained block.
    """

    class AttentionProbe(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.block = block

        def call(self, x):
            return self.block(x, training=False, return_attention_scores=True)

        def compute_output_spec(self, x):
            tokens = x.shape[1]
            dtype = self.block.compute_dtype
            return (
                keras.KerasTensor(x.shape, dtype=x.dtype),
                keras.KerasTensor((x.shape[0], block.num_heads, tokens, tokens), dtype=dtype),
            )

    return AttentionProbe(name=f"{block.name}_attention")


def require_softmax_maps(model, what):
    """Refuse ``what`` (an analysis that reads each row of attention as a distribution over the tokens: rollout,
    mean distance) for a model with differential attention, whose maps are differences of two softmax maps (rows
    summing to ``1 - lambda``, entries of either sign): renormalised or multiplied, they would mean nothing."""
    if config_of(model).differential_attention:
        raise ValueError(f"{what} reads attention rows as distributions over the tokens; model {model.name!r} has "
                         "differential attention, whose maps are differences of two softmax maps (rows sum to "
                         "1 - lambda, entries of either sign). attention_weights returns them as they are.")


def attention_weights(model, images, batch_size=8):
    """Attention weights of every block for a batch of images.

    Args:
        model: a keras_vit model (or an :func:`attention_model`).
        images: ``(batch, H, W, 3)`` as the model takes them (RGB in [0, 255]
            for the default ``include_preprocessing=True``), or one image
            ``(H, W, 3)``.

    Returns:
        float32 ``(batch, layers, heads, tokens, tokens)`` (no batch axis for
        one image); each row sums to 1. Tokens are the class, distillation
        and register tokens (those the model has, in that order) followed by
        the patches in row-major order.
    """
    features.require_image_model(model, "attention_weights")
    images = np.asarray(images, dtype="float32")
    single = images.ndim == 3
    if single:
        images = images[None]
    if images.ndim != 4:
        raise ValueError(f"Expected images of shape (batch, H, W, 3) or (H, W, 3). Received: shape={images.shape}")
    if not getattr(model, "is_attention_model", False):
        if model not in _ATTENTION_MODELS:
            _ATTENTION_MODELS[model] = attention_model(model)
        model = _ATTENTION_MODELS[model]
    outputs = features.run_in_batches(model, images, batch_size)
    if not isinstance(outputs, (list, tuple)):
        outputs = [outputs]
    weights = np.stack([np.asarray(o, dtype="float32") for o in outputs], axis=1)
    return weights[0] if single else weights


DISCARD_RATIO = FRACTION  # attention_rollout's discard_ratio; `keras-vit attention --discard-ratio` uses it too


def attention_rollout(weights, head_fusion="mean", discard_ratio=0.0):
    """Attention rollout (Abnar & Zuidema, 2020) of one image's attention weights.

    Each layer's heads are fused (mean by default), the identity is added for
    the residual connection and rows are renormalised; the layers are then
    multiplied through: ``R = A_L ... A_2 A_1``.

    Args:
        weights: ``(layers, heads, tokens, tokens)`` from :func:`attention_weights`.
        head_fusion: ``"mean"``, ``"max"`` or ``"min"`` over heads.
        discard_ratio: fraction of the lowest fused weights per row (never
            the diagonal) set to zero before adding the identity.

    Returns:
        ``(tokens, tokens)`` float64; row i says how much of token i's output
        comes from each input token. Rows sum to 1.

    Example:
    >>> uniform = np.full((2, 1, 3, 3), 1 / 3)  # 2 layers, 1 head, 3 tokens attending to all alike
    >>> attention_rollout(uniform)
    array([[0.5 , 0.25, 0.25],
           [0.25, 0.5 , 0.25],
           [0.25, 0.25, 0.5 ]])
    """
    weights = np.asarray(weights, dtype="float64")
    if weights.ndim != 4 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"Expected weights of shape (layers, heads, tokens, tokens). Received: shape={weights.shape}")
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"Unknown head_fusion: expected one of {HEAD_FUSIONS}. Received: head_fusion={head_fusion!r}")
    discard_ratio = DISCARD_RATIO.check(discard_ratio, "discard_ratio")
    tokens = weights.shape[-1]
    eye = np.eye(tokens)
    rollout = eye
    for layer in weights:
        fused = getattr(np, head_fusion)(layer, axis=0)
        if discard_ratio > 0:
            k = int(tokens * discard_ratio)
            threshold = np.sort(fused, axis=-1)[:, k - 1 : k] if k else -np.inf
            fused = np.where((fused <= threshold) & (eye == 0), 0.0, fused)
        a = fused + eye
        a = a / a.sum(-1, keepdims=True)
        rollout = a @ rollout
    return rollout


def rollout_map(model, image, head_fusion="mean", discard_ratio=0.0, weights=None, size=None):
    """Attention rollout as a heatmap at the input image's resolution.

    The class token's row of the rollout (for models without one, GAP and
    SigLIP's MAP pooling, the mean of the patch tokens' rows), restricted to the
    patch tokens (distillation and register tokens are not on the grid), is
    reshaped to the patch grid and resized bilinearly
    (:func:`keras_vit.inference.images.resize`, the resize images get) to the
    model's input size, or straight to ``size``.

    Args:
        model: a keras_vit model.
        image: one image ``(H, W, 3)`` at the model's input size (any size the
            patch size divides for an ``image_size=None`` model), as the model takes it.
        head_fusion, discard_ratio: see :func:`attention_rollout`.
        weights: precomputed ``(layers, heads, tokens, tokens)`` for ``image``.
        size: ``(height, width)`` of the map; default the image's size.
            Give the original image's size to overlay the map on it with one
            resize from the patch grid, not two.

    Returns:
        float32 ``(H, W)``: the share of the information of the tokens the output reads (the class token, with
        DeiT's distillation token; the pooled tokens of a mean or attention pooling) that comes from each pixel's
        patch (on the patch grid, before resizing, the values sum to 1 minus the share the prefix tokens keep:
        class, distillation, registers).

    Raises:
        ValueError: ``image`` is not one ``(H, W, 3)`` image (a batch: call it once per image).
    """
    features.require_image_model(model, "rollout_map")
    require_softmax_maps(model, "rollout_map")
    if np.ndim(image) != 3:
        raise ValueError(f"rollout_map takes one image (H, W, 3); for a batch, call it once per image. "
                         f"Received: image of shape {np.shape(image)}")
    if weights is None:
        weights = attention_weights(model, image)
    rollout = attention_rollout(weights, head_fusion, discard_ratio)
    image_size = tuple(np.shape(image)[:2])
    grid = patch_grid(model, image_size)
    n = grid[0] * grid[1]
    config = config_of(model)
    prefix = config.num_prefix_tokens  # class, distillation and register tokens: not on the grid
    if config.pooling in PREFIX_POOLINGS:  # the rows the output reads: the pooled tokens (every one with the prefix)
        relevance = rollout[0 if config.pool_include_prefix else prefix :, prefix:].mean(0)
    elif config.class_token:  # the class token (and DeiT's distillation token, whose head is averaged with it)
        relevance = rollout[: 2 if config.distillation_token else 1, prefix:].mean(0)
    else:
        relevance = rollout[prefix:, prefix:].mean(0)
    if relevance.shape[0] != n:
        raise ValueError(f"Token count does not match the patch grid {grid}. Received: {relevance.shape[0]} patch tokens")
    return images_lib.resize(relevance.reshape(grid), size or image_size)


def mean_attention_distance(model, images, weights=None):
    """Mean attention distance per block and head, in input pixels (Figure 7, right).

    For every query patch, the distance to every key patch (between patch
    centres, in pixels of the input image) weighted by the attention weight,
    with the weights renormalised over the patches (the class, distillation
    and register tokens have no place on the image); averaged over query
    patches and images.

    Args:
        model: a keras_vit model.
        images: ``(batch, H, W, 3)`` as the model takes them; None with
            ``weights`` of images of the model's input (or native) size.
        weights: precomputed ``(batch, layers, heads, tokens, tokens)``.

    Returns:
        float64 ``(layers, heads)``.
    """
    require_softmax_maps(model, "mean_attention_distance")
    images = np.asarray(images)[None] if np.ndim(images) == 3 else images
    if weights is None:
        weights = attention_weights(model, images)
    weights = np.asarray(weights, dtype="float64")
    if weights.ndim == 4:
        weights = weights[None]
    if images is None:  # weights alone: images of the model's input size (native size for any-size models)
        h, w = config_of(model).native_image_size
    else:
        h, w = np.shape(images)[1:3]
    gh, gw = patch_grid(model, (h, w))
    n = gh * gw
    patch_weights = weights[..., -n:, -n:]
    patch_weights = patch_weights / patch_weights.sum(-1, keepdims=True)
    rows, cols = np.meshgrid(np.arange(gh), np.arange(gw), indexing="ij")
    centres = np.stack([(rows.ravel() + 0.5) * h / gh, (cols.ravel() + 0.5) * w / gw], axis=-1)
    distance = np.linalg.norm(centres[:, None] - centres[None], axis=-1)  # (n, n) pixels
    per_query = (patch_weights * distance).sum(-1)  # (batch, layers, heads, n)
    return per_query.mean(axis=(0, 3))


def position_embedding_similarity(model):
    """Cosine similarity between the learned position embeddings of the patches (Figure 7, centre).

    The patches' embeddings are the last ``rows * cols`` stored: the class and
    distillation tokens' positions before them are left out, and a model with
    ``prefix_positions=False`` stores none for its prefix tokens (nor for its
    register tokens, unless ``register_positions``). For an ``image_size=None`` model, the grid the
    embeddings are stored for (its native size).

    Returns:
        ``(rows, cols, rows, cols)``: entry ``[i, j]`` is the similarity map of
        patch ``(i, j)``'s embedding with every patch's.
    """
    features.require_image_model(model, "position_embedding_similarity")
    encoder = _patch_encoder(model)
    gh, gw = config_of(model).grid
    if not config_of(model).position_embedding:
        raise ValueError(f"Model {model.name!r} has no learned position embeddings (position_embedding=False: its "
                         f"positions are rope={config_of(model).rope!r} in the attention), so there is no similarity to show.")
    posemb = np.asarray(encoder.position_embedding, dtype="float64")[0]
    if posemb.shape[0] != gh * gw + encoder.num_position_prefix:
        raise ValueError(
            f"Model {model.name!r} stores {posemb.shape[0]} position embeddings; its grid {gh}x{gw} and "
            f"{encoder.num_position_prefix} prefix positions make {gh * gw + encoder.num_position_prefix}"
        )
    posemb = posemb[encoder.num_position_prefix :]  # the patches' (no class or distillation token's position)
    unit = posemb / np.maximum(np.linalg.norm(posemb, axis=-1, keepdims=True), 1e-12)
    return (unit @ unit.T).reshape(gh, gw, gh, gw)
