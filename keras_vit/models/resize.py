"""A built model at another resolution or patch size: :func:`resize_model`, and a dynamic model's native size.

The new model is the old one's functional graph with three settings changed
(the input size, the ``patches`` layer's patch size and whether it keeps the
grid, the ``patch_encoder``'s stored grid); every weight is then copied by
layer name, the position embeddings resampled in 2-D
(:func:`keras_vit.weights.resize_position_embedding`) and, for another patch
size, the patch-embedding kernel by FlexiViT's pseudo-inverse resize
(:func:`keras_vit.weights.patchemb.resample_patch_embedding`). It works on
every keras_vit model (plain, GAP, hybrid, conv stem), loaded from a file or
not; the grid of a hybrid is its feature map's.
"""

import keras

from keras_vit.layers import PatchEncoder, Patches
from keras_vit.models.arguments import positive_pair
from keras_vit.weights.mapping import layer_weights, single_layer
from keras_vit.weights.patchemb import resample_patch_embedding
from keras_vit.weights.posemb import model_grid, resize_position_embedding

SAME = "same"  # resize_model's default image_size: the model's own (None for a dynamic model)
_PROBE = 4096  # pixels of the probe that reads a stem's stride (a power of two: strides of 2**k divide it)


def _image_layers(model):
    if len(model.inputs) != 1 or len(model.inputs[0].shape) != 4:
        raise ValueError(f"Expected a model with one (batch, H, W, C) image input. Received: input_shape={model.input_shape}")
    try:
        return single_layer(model, Patches), single_layer(model, PatchEncoder)
    except ValueError as error:
        raise ValueError(f"Expected a keras_vit model (one Patches and one PatchEncoder layer): {error}") from None


def input_size(model):
    """``(H, W)`` of the model's input, or None for a model built with ``image_size=None``."""
    _, h, w, _ = model.input_shape
    return None if h is None or w is None else (int(h), int(w))


def feature_map_size(model, image_size):
    """``(rows, cols)`` of the feature map that ``patches`` cuts (the image itself, or a stem's output) for ``image_size``."""
    patches, _ = _image_layers(model)
    if patches.input is model.inputs[0]:
        return tuple(image_size)
    stem = keras.Model(model.inputs, patches.input)
    shape = (1,) + tuple(image_size) + (model.input_shape[-1],)
    if input_size(model) is None:  # a dynamic stem takes the probe as it is; no layer is built
        return tuple(stem.compute_output_shape(shape)[1:3])
    config = stem.get_config()
    _set_input_shape(config, shape[1:])
    return tuple(keras.Model.from_config(config).output.shape[1:3])


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
    size = input_size(model)
    if size is not None:
        return size
    patches, _ = _image_layers(model)
    rows, cols = feature_map_size(model, (_PROBE, _PROBE))
    if _PROBE % rows or _PROBE % cols:
        raise ValueError(f"Cannot read the stem's stride of model {model.name!r}: {_PROBE} pixels give a {rows}x{cols} feature map")
    (gh, gw), (ph, pw) = model_grid(model), patches.patch_size_pair
    return gh * ph * (_PROBE // rows), gw * pw * (_PROBE // cols)


def _target_grid(model, image_size, patch_size):
    """The grid the new model stores its position embeddings for."""
    patches, _ = _image_layers(model)
    (ph, pw), (nh, nw) = patches.patch_size_pair, patch_size
    if image_size is None:  # the same native size, cut by the new patch size
        gh, gw = model_grid(model)
        if (gh * ph) % nh or (gw * pw) % nw:
            raise ValueError(
                f"The native grid {gh}x{gw} of {ph}x{pw} patches is no whole grid of {nh}x{nw} patches. "
                f"Received: patch_size={patch_size}"
            )
        return gh * ph // nh, gw * pw // nw
    rows, cols = feature_map_size(model, image_size)
    if rows % nh or cols % nw:
        stem = "" if (rows, cols) == tuple(image_size) else f" (a {rows}x{cols} feature map)"
        raise ValueError(
            f"The image size must be divisible by the patch size{stem}. "
            f"Received: image_size={tuple(image_size)}, patch_size={patch_size}"
        )
    return rows // nh, cols // nw


def _set_input_shape(config, shape):
    (name, _, _), = config["input_layers"] if isinstance(config["input_layers"][0], list) else [config["input_layers"]]
    for layer in config["layers"]:
        if layer["name"] == name:
            layer["config"]["batch_shape"] = [None] + list(shape)
        layer.pop("build_config", None)  # built again by the graph, at the new shapes


def resize_model(model, image_size=SAME, patch_size=None):
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

    Returns:
        A functional ``keras.Model`` of the same name and layers.

    Raises:
        ValueError: not a keras_vit model, or a size the patch size (after the
            stem's stride) does not divide; the message names both.

    Example:
    >>> import keras_vit
    >>> model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=1, num_heads=4, mlp_dim=64)
    >>> bigger = resize_model(model, image_size=64)
    >>> bigger.input_shape, tuple(bigger.get_layer("patch_encoder").position_embedding.shape)
    ((None, 64, 64, 3), (1, 65, 32))
    >>> resize_model(model, image_size=None).input_shape
    (None, None, None, 3)
    >>> resize_model(model, patch_size=4).get_layer("patch_encoder").grid_size
    (8, 8)
    """
    patches, encoder = _image_layers(model)
    old_patch = patches.patch_size_pair
    new_patch = old_patch if patch_size is None else positive_pair(patch_size, "patch_size")
    if isinstance(image_size, str) and image_size == SAME:
        image_size = input_size(model)
    elif image_size is not None:
        image_size = positive_pair(image_size, "image_size")
    old_grid, grid = model_grid(model), _target_grid(model, image_size, new_patch)

    config = model.get_config()
    _set_input_shape(config, (None, None, model.input_shape[-1]) if image_size is None else image_size + model.input_shape[-1:])
    for layer in config["layers"]:
        if layer["name"] == patches.name:
            layer["config"].update(flatten=image_size is not None, patch_size=patch_size or layer["config"]["patch_size"])
        elif layer["name"] == encoder.name:
            layer["config"].update(num_patches=grid[0] * grid[1], grid_size=list(grid))
    resized = keras.Model.from_config(config)
    if len(resized.weights) != len(model.weights):
        raise ValueError(f"Model {model.name!r} rebuilt with {len(resized.weights)} weights instead of {len(model.weights)}")
    for layer in resized.layers:
        old = layer_weights(model.get_layer(layer.name))
        for path, variable in layer_weights(layer).items():
            value = keras.ops.convert_to_numpy(old[path])
            if layer.name == encoder.name and path.endswith("/position_embedding"):
                value = resize_position_embedding(value, grid, old_grid, encoder.num_prefix_tokens)
            elif layer.name == encoder.name and path.endswith("/projection/kernel") and new_patch != old_patch:
                channels = value.shape[0] // (old_patch[0] * old_patch[1])
                kernel = resample_patch_embedding(value.reshape(old_patch + (channels, -1)), new_patch)
                value = kernel.reshape(-1, value.shape[-1])
            variable.assign(value.astype(variable.dtype))
    return resized


def describe_size(model):
    """``"384x384, patch 16x16"`` or ``"any size (native 224x224), patch 16x16"``, for messages.

    Example:
    >>> import keras_vit
    >>> describe_size(keras_vit.ViT(image_size=(32, 48), patch_size=8, hidden_size=32, num_layers=1,
    ...                             num_heads=4, mlp_dim=64))
    '32x48, patch 8x8'
    """
    patches, _ = _image_layers(model)
    patch = "x".join(map(str, patches.patch_size_pair))
    size = input_size(model)
    if size is None:
        return f"any size (native {'x'.join(map(str, native_image_size(model)))}), patch {patch}"
    return f"{size[0]}x{size[1]}, patch {patch}"

