"""A built model at another resolution or patch size: :func:`resize_model`, and a model's native size.

The new model is built from the old one's configuration with the image size and patch size changed
(``model.vit_config.replace(...)``); every weight is then copied by layer name, the position embeddings
resampled in 2-D (:func:`keras_vit.weights.resize_position_embedding`) and, for another patch size, the
patch-embedding kernel by FlexiViT's pseudo-inverse resize
(:func:`keras_vit.layers.resampling.resample_patch_embedding`). It works on every keras_vit model (plain,
GAP, hybrid, conv stem), loaded from a file or not; the grid of a hybrid is its feature map's.
"""

import keras

from keras_vit.architecture.arguments import positive_pair
from keras_vit.architecture.model import VisionTransformer, config_of
from keras_vit.architecture.state import require_float
from keras_vit.domains import POSITIVE_INT
from keras_vit.layers.resampling import resample_patch_embedding, resize_position_embedding
from keras_vit.weights.mapping import layer_weights

SAME = "same"  # resize_model's default image_size: the model's own (None for a dynamic model)


def native_image_size(model):
    """``(H, W)``: the image size whose patch grid the position embeddings are stored for.

    A model's own input size; for a model built with ``image_size=None``, the
    native size it was built for (``native_image_size``), where it adds its
    position embeddings without resampling them.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=None, native_image_size=(32, 48), patch_size=8, hidden_size=32,
    ...                       num_layers=1, num_heads=4, mlp_dim=64)
    >>> native_image_size(model)
    (32, 48)
    """
    return config_of(model).native_image_size


def _target_config(config, image_size, patch_size):
    """The configuration of the resized model; a size the new patches do not cut whole is refused, naming both."""
    nh, nw = patch_size
    if image_size is None:  # the same native size, cut by the new patch size
        (gh, gw), (ph, pw) = config.grid, config.patch_size
        if (gh * ph) % nh or (gw * pw) % nw:
            raise ValueError(
                f"The native grid {gh}x{gw} of {ph}x{pw} patches is no whole grid of {nh}x{nw} patches. "
                f"Received: patch_size={patch_size}"
            )
        native = (gh * ph, gw * pw) if config.crop_remainder else config.native_image_size  # its whole patches
        return config.replace(image_size=None, native_image_size=native, patch_size=patch_size, crop_remainder=False)
    rows, cols = config.feature_map_size(image_size)
    if (rows % nh or cols % nw) and not (config.crop_remainder and rows >= nh and cols >= nw):
        stem = "" if (rows, cols) == tuple(image_size) else f" (a {rows}x{cols} feature map)"
        raise ValueError(
            f"The image size must be divisible by the patch size{stem}. "
            f"Received: image_size={tuple(image_size)}, patch_size={patch_size}"
        )
    return config.replace(image_size=image_size, patch_size=patch_size)  # ViTConfig keeps crop_remainder where it crops


def _target_budget(config, patch_size, max_patches):
    """A NaFlex model's ``max_patches`` after the resize: given, or the same pixels under the new patch size."""
    if config.input_mode != "naflex":
        if isinstance(max_patches, str) and max_patches == SAME:
            return {}
        raise ValueError(f"max_patches is a NaFlex model's budget; model of {config.describe_size()} has none. "
                         f"Received: max_patches={max_patches!r}")
    if not (isinstance(max_patches, str) and max_patches == SAME):
        return {"max_patches": None if max_patches is None else POSITIVE_INT.check(max_patches, "max_patches")}
    if not config.max_patches or tuple(patch_size) == tuple(config.patch_size):
        return {}
    # FlexiViT's resize keeps the image and cuts it finer: the budget keeps the pixels it covered
    (ph, pw), (nh, nw) = config.patch_size, patch_size
    return {"max_patches": max(1, config.max_patches * ph * pw // (nh * nw))}


def resize_model(model, image_size=SAME, patch_size=None, max_patches=SAME):
    """A new model at another image size and/or patch size, with every weight of ``model`` copied.

    The position embeddings are resampled in 2-D to the new grid (the class
    token's position kept), as when a checkpoint is loaded at another
    resolution (Sec. 3.2 of the paper); with another ``patch_size`` the
    patch-embedding kernel is resampled by FlexiViT's pseudo-inverse resize.
    The new model is not compiled; ``model`` is left as it was.

    Args:
        model: a keras_vit model (plain ViT, GAP, hybrid or conv stem), e.g.
            from :func:`keras_vit.load_model`.
        image_size: int or ``(height, width)``; None for a model that takes any
            size (its position embeddings stored for the model's current grid,
            resampled in the graph); default: the model's own.
        patch_size: int or ``(ph, pw)``; default the model's own. For a hybrid,
            the patch size on the feature map.
        max_patches: a NaFlex model's budget of patches per image (None: any
            number); default its own, or, with another ``patch_size``, the
            budget that covers the same pixels (64 patches of 16x16 become 256
            of 8x8), so that images are cut at the same resolution, finer.

    Returns:
        A :class:`keras_vit.VisionTransformer` of the same name and layers.

    Raises:
        ValueError: not a keras_vit model, a size the patch size (after the
            stem's stride) does not divide (the message names both), or a
            quantized or LoRA model (:func:`keras_vit.architecture.state.require_float`).

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)
    >>> bigger = resize_model(model, image_size=64)
    >>> bigger.input_shape, tuple(bigger.get_layer("patch_encoder").position_embedding.shape)
    ((None, 64, 64, 3), (1, 65, 32))
    >>> resize_model(model, image_size=None).input_shape
    (None, None, None, 3)
    >>> resize_model(model, patch_size=4).vit_config.grid
    (8, 8)
    """
    config = config_of(model)
    require_float(model, "resize", "resize")
    new_patch = config.patch_size if patch_size is None else positive_pair(patch_size, "patch_size")
    if isinstance(image_size, str) and image_size == SAME:
        image_size = config.image_size
    elif image_size is not None:
        image_size = positive_pair(image_size, "image_size")
    target = _target_config(config, image_size, new_patch)
    target = target.replace(**_target_budget(config, new_patch, max_patches))
    resized = VisionTransformer.from_vit_config(target, name=model.name)
    if len(resized.weights) != len(model.weights):
        raise ValueError(f"Model {model.name!r} rebuilt with {len(resized.weights)} weights instead of {len(model.weights)}")
    for layer in resized.layers:
        if not layer.weights:  # a layer without weights may be missing from an older file (stem_input_check)
            continue
        old = layer_weights(model.get_layer(layer.name))
        for path, variable in layer_weights(layer).items():
            value = keras.ops.convert_to_numpy(old[path])
            if layer.name == "patch_encoder" and path.endswith("/position_embedding"):
                value = resize_position_embedding(value, target.grid, config.grid, config.num_position_prefix,
                                                  method=config.position_resampling)
            elif layer.name == "patch_encoder" and path.endswith("/projection/kernel") and new_patch != config.patch_size:
                channels = value.shape[0] // (config.patch_size[0] * config.patch_size[1])
                kernel = resample_patch_embedding(value.reshape(config.patch_size + (channels, -1)), new_patch)
                value = kernel.reshape(-1, value.shape[-1])
            variable.assign(value.astype(variable.dtype))
    if hasattr(model, "class_names"):
        resized.class_names = model.class_names
    return resized
