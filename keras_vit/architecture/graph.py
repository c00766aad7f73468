"""The functional graph a :class:`~keras_vit.architecture.config.ViTConfig` describes.

Input -> optional [0, 255] -> [-1, 1] scaling -> optional stem (the hybrid's ResNet-v2, or small convs)
-> ``Patches`` -> Eq. 1 embedding (``PatchEncoder``) -> ``num_layers`` pre-LN blocks -> final norm ->
pooling, optional pre-logits and the zero-initialised head. Layer names are stable (``preprocessing``,
``patches``, ``patch_encoder``, ``transformer_block_{i}``, ``encoder_norm``, ``pool``, ``feature_map``, ``pre_logits``,
``head``, ``predictions``; the ResNet's ``conv_root``, ``block{i}_unit{j}``; the conv stem's
``stem_conv_{i}``; the family's ``pre_norm``, ``map_head``, ``fc_norm``, ``projection``,
``pool_distillation``, ``head_distillation``, ``head_average``), so checkpoints map by name and
features are pulled with ``get_layer``.
"""

import keras

from keras_vit.architecture.family import PAPER
from keras_vit.layers import PatchEncoder, Patches, TokenPooling, TransformerBlock, diff_attention
from keras_vit.layers.normalization import make_norm
from keras_vit.layers.patching import StemInputCheck, TokenGrid
from keras_vit.layers.pooling import AttentionPooling
from keras_vit.layers.resnet import resnet_stem


def image_input(config, input_tensor=None):
    """``(inputs, x)``: the model input (``(None, None, C)`` for ``image_size=None``) and the scaled pixels.

    An ``input_tensor`` computed by other layers is used as ``keras.applications`` uses it: the model's inputs are
    the ``keras.Input``s it comes from (``keras.utils.get_source_inputs``), the layers between them part of the model.
    """
    h, w = config.image_size or (None, None)
    if input_tensor is None:
        inputs = x = keras.Input(shape=(h, w, 3), name="images")
    else:
        sources = keras.utils.get_source_inputs(input_tensor)
        inputs, x = (sources[0] if len(sources) == 1 else sources), input_tensor
    if config.include_preprocessing:
        if (config.input_mean, config.input_std) == (PAPER["input_mean"], PAPER["input_std"]):
            scale, offset = 1.0 / 127.5, -1.0  # [-1, 1], the paper's: the layer the original files were saved with
        else:  # (x / 255 - mean) / std per channel
            scale = [1.0 / (255.0 * std) for std in config.input_std]
            offset = [-mean / std for mean, std in zip(config.input_mean, config.input_std)]
        x = keras.layers.Rescaling(scale=scale, offset=offset, name="preprocessing")(x)
    return inputs, x


def stem(x, config):
    """The feature map the patches are cut from: the image itself, a ResNet-v2's or a conv stem's.

    Before a stem that strides, the images are checked (``stem_input_check``): one that would give no
    whole grid of patches is refused naming its size, not the feature map's.
    """
    if config.stride > 1:
        # patchify convolutions (stem_strides) have no padding in timm: the image a multiple of their stride
        x = StemInputCheck(config.patch_size, config.stride, exact=bool(config.stem_strides), name="stem_input_check")(x)
    if config.stem == "resnet":
        return resnet_stem(x, config.block_units, config.width, config.resnet_norms)
    for i, channels in enumerate(config.stem_channels):
        if config.stem_strides:  # patchify convolutions, a kernel their stride (MobileCLIP's ConvStem)
            kernel = stride = config.stem_strides[i]
        else:  # 3 x 3, stride 1 then 2
            kernel, stride = 3, 1 if i == 0 else 2
        x = keras.layers.Conv2D(channels, kernel, strides=stride, padding="same", use_bias=False, name=f"stem_conv_{i}")(x)
        # momentum 0.9 (PyTorch's 0.1): Keras' 0.99 left the moving statistics far from the batches' after a short
        # run (3 epochs of the main job: 16.7 % test accuracy at 56 % training accuracy; 66.5 % with 0.9)
        x = keras.layers.BatchNormalization(momentum=0.9, epsilon=config.stem_norm_epsilon, name=f"stem_norm_{i}")(x)
        x = keras.layers.Activation("gelu", name=f"stem_act_{i}")(x)
    return x


def embed(x, config):
    """Patches of the feature map ``x`` and the Eq. 1 embedding: ``[x_class; x_p E] + E_pos``.

    A feature map of static size is cut into one sequence; one of a size known only when the model
    runs (``image_size=None``) keeps its grid (``Patches(flatten=False)``) and the position
    embeddings, stored for ``config.grid``, are resampled to it in the graph.
    """
    dynamic = config.image_size is None
    if config.crop_remainder:  # the rows and columns past the last whole patch, as a stride-P convolution drops them
        (h, w), (ph, pw) = config.image_size, config.patch_size
        x = keras.layers.Cropping2D(((0, h % ph), (0, w % pw)), name="crop_remainder")(x)
    patches = Patches(config.patch_size, flatten=not dynamic, name="patches")(x)
    x = PatchEncoder(
        num_patches=config.num_patches,
        hidden_size=config.hidden_size,
        class_token=config.class_token,
        dropout=config.dropout,
        grid_size=config.grid,
        distillation_token=config.distillation_token,
        num_register_tokens=config.num_register_tokens,
        prefix_positions=config.prefix_positions,
        **({"register_positions": True} if config.register_positions else {}),
        resampling=config.position_resampling,
        position_embedding=config.position_embedding,
        **({"patch_norm": config.norm_type, "patch_norm_epsilon": config.layer_norm_epsilon} if config.patch_norm else {}),
        name="patch_encoder",
    )(patches)
    if config.pre_norm:
        x = make_norm(config.norm_type, config.layer_norm_epsilon, "pre_norm")(x)
    return x


def encoder(x, config, *, key_mask=None):
    """``num_layers`` blocks (``transformer_block_{i}``) and the final norm.

    Stochastic depth grows linearly with depth from 0 to ``drop_path_rate``; RoPE (``config.rope``) rotates the
    queries and keys of every block on the model's patch grid. ``key_mask`` ``(batch, tokens)``: the keys every
    block's attention may read (NaFlex's padding left out; None: the unmasked blocks).
    """
    masked = {} if key_mask is None else {"key_mask": key_mask}
    rope = None
    if config.rope is not None:
        rope = dict(kind=config.rope, grid=config.grid_for(config.image_size), temperature=config.rope_temperature,
                    grid_indexing=config.rope_grid_indexing, grid_offset=config.rope_grid_offset,
                    num_prefix_tokens=config.num_prefix_tokens)
        if config.rope_reference_grid is not None:
            rope["reference_grid"] = config.rope_reference_grid
    for i in range(config.num_layers):
        x = TransformerBlock(
            num_heads=config.num_heads,
            mlp_dim=config.mlp_dim,
            dropout=config.dropout,
            attention_dropout=config.attention_dropout,
            drop_path=config.drop_path_rate * i / max(config.num_layers - 1, 1),
            layer_norm_epsilon=config.layer_norm_epsilon,
            layer_scale_init=config.layer_scale_init,
            activation=config.mlp_activation,
            mlp_type=config.mlp_type,
            qkv_bias=config.qkv_bias,
            rope=rope,
            **{name: getattr(config, name) for name in ("norm_type", "proj_bias", "mlp_bias")},
            mlp_norm=config.mlp_norm,
            attention_norm=config.attention_norm,
            res_post_norm=config.res_post_norm,
            parallel=config.parallel_blocks,
            differential_lambda_init=diff_attention.lambda_init(i) if config.differential_attention else None,
            name=f"transformer_block_{i}",
        )(x, **masked)
    if not config.final_norm:
        return x
    return make_norm(config.norm_type, config.layer_norm_epsilon, "encoder_norm")(x)


def pool(x, config):
    """The pooled vector: the class token, the mean of the patch tokens, or SigLIP's attention pooling;
    then the family's ``fc_norm`` and ``projection``."""
    prefix = 0 if config.pool_include_prefix else config.num_prefix_tokens  # the tokens before the patches pooled or not
    if config.pooling == "map":
        x = x[:, prefix:] if prefix else x
        x = AttentionPooling(
            config.map_num_heads or config.num_heads, config.map_mlp_dim or config.mlp_dim,
            layer_norm_epsilon=config.layer_norm_epsilon,
            activation=config.mlp_activation, qkv_bias=config.qkv_bias, name="map_head",
        )(x)
    else:  # keras.applications' "avg" is the mean of the patch tokens: "gap"'s pooling, with the class token kept
        mode = "gap" if config.pooling == "avg" else config.pooling
        x = TokenPooling(mode, num_prefix_tokens=prefix, name="pool")(x)
    return pooled_tail(x, config)


def pooled_tail(x, config):
    """The family's ``fc_norm`` and ``projection`` of the pooled vector."""
    if config.fc_norm:
        x = make_norm(config.norm_type, config.layer_norm_epsilon, "fc_norm")(x)
    if config.projection_dim:
        x = keras.layers.Dense(config.projection_dim, use_bias=False, name="projection")(x)
    return x


def distilled_head(x, config):
    """DeiT's two heads, on the class and the distillation token, averaged (what DeiT does at inference)."""
    tokens = TokenPooling("token", name="pool")(x), TokenPooling("distillation", name="pool_distillation")(x)
    if config.include_top:
        tokens = (
            keras.layers.Dense(config.num_classes, kernel_initializer="zeros", name="head")(tokens[0]),
            keras.layers.Dense(config.num_classes, kernel_initializer="zeros", name="head_distillation")(tokens[1]),
        )
    x = keras.layers.Average(name="head_average")(list(tokens))
    if config.include_top and config.classifier_activation is not None:
        x = keras.layers.Activation(config.classifier_activation, dtype="float32", name="predictions")(x)
    return x


def head(x, config, *, feature_map=None):
    """Pool the encoded tokens, optional pre-logits (tanh), then the zero-initialised head.

    ``pooling=None`` returns the tokens; ``"feature_map"`` the patch tokens on the grid of ``feature_map``
    (what the patches were cut from), ``(batch, rows, cols, hidden_size)``.
    """
    if config.pooling is None:
        return x
    if config.pooling == "feature_map":
        return TokenGrid(config.patch_size, num_prefix_tokens=config.num_prefix_tokens, name="feature_map")([x, feature_map])
    if config.distillation_token:
        return distilled_head(x, config)
    return top(pool(x, config), config)


def top(x, config):
    """The optional pre-logits (tanh) and the zero-initialised head of the pooled vector."""
    if config.representation_size:
        x = keras.layers.Dense(config.representation_size, activation="tanh", name="pre_logits")(x)
    if not config.include_top:
        return x
    x = keras.layers.Dense(config.num_classes, kernel_initializer="zeros", name="head")(x)
    if config.classifier_activation is not None:
        x = keras.layers.Activation(config.classifier_activation, dtype="float32", name="predictions")(x)
    return x


def build_graph(config, input_tensor=None):
    """``(inputs, outputs)`` of the model ``config`` describes, with fresh layers.

    Example:
    >>> from keras_vit.architecture.config import ViTConfig
    >>> inputs, outputs = build_graph(ViTConfig(image_size=32, patch_size=8, hidden_size=32, num_layers=1,
    ...                                         num_heads=4, mlp_dim=64, num_classes=3))
    >>> tuple(outputs.shape)
    (None, 3)
    """
    inputs, x = image_input(config, input_tensor)
    feature_map = stem(x, config)
    x = embed(feature_map, config)
    return inputs, head(encoder(x, config), config, feature_map=feature_map)
