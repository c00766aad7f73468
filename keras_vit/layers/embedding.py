"""Eq. 1 of the paper, ``z0 = [x_class; x_p E] + E_pos``, and the ViT family's extra tokens: ``PatchEncoder``."""

import math

import keras
from keras import ops

from keras_vit.layers import kernels
from keras_vit.layers import resampling as resampling_lib
from keras_vit.layers.checks import LAYER_NORM_EPSILON, PACKAGE as _PACKAGE, check_rate, pair, positive_int
from keras_vit.layers.normalization import NORM_TYPES, check_epsilon, make_norm, normalize
from keras_vit.layers.policies import SublayerPolicies


def position_prefix(learned, registers, prefix_positions, register_positions):
    """Rows of the position table before the patches': the ``learned`` class and distillation tokens' with
    ``prefix_positions``, and the ``registers``' too with ``register_positions`` (none without ``prefix_positions``).

    Example:
    >>> position_prefix(1, 4, True, False), position_prefix(1, 4, True, True), position_prefix(1, 4, False, False)
    (1, 5, 0)
    """
    return learned + (registers if register_positions else 0) if prefix_positions else 0


@keras.saving.register_keras_serializable(package=_PACKAGE)
class PatchEncoder(SublayerPolicies, keras.layers.Layer):
    """Eq. 1 of the paper: ``z0 = [x_class; x_p E] + E_pos``.

    A linear projection ``E`` of each flattened patch, a learnable class token
    prepended to the sequence, and learned 1-D position embeddings added to
    every token (class token included), then optional dropout.

    The ViT family's tokens: DeiT's distillation token after the class token
    (with a position, as the class token), register tokens after them (with a
    position only with ``register_positions``: DINOv2 with registers and timm's
    ``reg_tokens`` have none, timm's SBB ``vit_so150m*_reg*`` models one), and
    position embeddings over the patches only (timm's ``no_embed_class``:
    ``prefix_positions=False``). The sequence is ``[class, distillation,
    registers, patches]``.

    The position embeddings are stored for ``num_patches`` patches on a grid
    of ``grid_size`` rows and columns. Patches given on their grid,
    ``(batch, rows, cols, P*P*C)`` (``Patches(flatten=False)``), may come on
    another grid, sizes known only when the graph runs included: the grid of
    position embeddings is then resampled in 2-D to it (the class token's
    position kept), with the interpolation of the checkpoint loader
    (:mod:`keras_vit.layers.resampling`); on the stored grid they are added as
    they are.

    Args:
        num_patches: number of patches N in the input sequence (the stored grid's).
        hidden_size: the model width D.
        class_token: prepend the learnable ``[class]`` token (False for GAP
            models, as in the original code).
        dropout: dropout rate after adding position embeddings.
        grid_size: ``(rows, cols)`` of the stored grid, ``rows * cols ==
            num_patches``; None: a square grid (needed only for patches given on
            their grid).
        distillation_token: a learnable distillation token after the class token.
        num_register_tokens: learnable register tokens after them, without positions.
        prefix_positions: the class and distillation tokens have position embeddings.
        register_positions: the register tokens have position embeddings too (with ``prefix_positions``),
            the rows after the class token's. Saved only when True.
        resampling: the rule of :mod:`keras_vit.layers.resampling` for another grid
            (``"linear_aligned"``, the paper's; timm's and transformers' bicubic ones).
        position_embedding: learned position embeddings (False: none, as RoPE-ViT's models without
            ``_ape``, whose positions are the attention's rotary embeddings). Saved only when False.
        patch_norm: None, or ``"layernorm"`` / ``"rmsnorm"``: a norm of the projected patches before the tokens and
            positions are added (timm's ``embed_norm_layer``, AIMv2's RMSNorm), named ``patch_norm``. Saved only when set.
        patch_norm_epsilon: its epsilon.

    Call arguments:
        patches: ``(batch, N, P*P*C)``, or ``(batch, rows, cols, P*P*C)``.

    Returns:
        ``(batch, tokens, D)``: ``tokens`` is the number of patches, plus one
        with a class token.

    Example:
    >>> encoder = PatchEncoder(num_patches=196, hidden_size=192)
    >>> tuple(encoder(keras.ops.zeros((2, 196, 768))).shape)
    (2, 197, 192)
    >>> tuple(encoder(keras.ops.zeros((2, 24, 20, 768))).shape)  # 14 x 14 embeddings resampled to 24 x 20
    (2, 481, 192)
    """

    def __init__(
        self,
        num_patches,
        hidden_size,
        *,
        class_token=True,
        dropout=0.0,
        grid_size=None,
        distillation_token=False,
        num_register_tokens=0,
        prefix_positions=True,
        register_positions=False,
        resampling="linear_aligned",
        position_embedding=True,
        patch_norm=None,
        patch_norm_epsilon=LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.has_position_embedding = bool(position_embedding)
        if patch_norm is not None and patch_norm not in NORM_TYPES:
            raise ValueError(f"Unknown `patch_norm`: expected None or one of {NORM_TYPES}. Received: patch_norm={patch_norm!r}")
        self.patch_norm = patch_norm
        self.patch_norm_epsilon = check_epsilon(patch_norm_epsilon)
        self.patch_norm_layer = None if patch_norm is None else make_norm(
            patch_norm, self.patch_norm_epsilon, "patch_norm", dtype=self.dtype_policy)
        self.num_patches = positive_int(num_patches, "num_patches")
        self.hidden_size = positive_int(hidden_size, "hidden_size")
        self.class_token = bool(class_token)
        self.distillation_token = bool(distillation_token)
        if self.distillation_token and not self.class_token:
            raise ValueError("A distillation token follows a class token. Received: class_token=False, distillation_token=True")
        if isinstance(num_register_tokens, bool) or not isinstance(num_register_tokens, int) or num_register_tokens < 0:
            raise ValueError(f"`num_register_tokens` must be an int >= 0. Received: num_register_tokens={num_register_tokens!r}")
        self.num_register_tokens = num_register_tokens
        self.prefix_positions = bool(prefix_positions)
        self.register_positions = bool(register_positions)
        if self.register_positions and not (self.prefix_positions and self.num_register_tokens):
            raise ValueError("`register_positions` adds the registers' rows after the class token's: it needs "
                             f"prefix_positions=True and registers. Received: prefix_positions={prefix_positions!r}, "
                             f"num_register_tokens={num_register_tokens!r}")
        self.resampling = resampling
        resampling_lib.check_method(resampling)
        self.dropout = check_rate(dropout, "dropout")
        self.grid_size = None if grid_size is None else pair(grid_size, "grid_size")
        if self.grid_size is not None and self.grid_size[0] * self.grid_size[1] != self.num_patches:
            raise ValueError(
                "`grid_size` must have `num_patches` cells. "
                f"Received: grid_size={grid_size!r}, num_patches={num_patches!r}"
            )
        self.projection = keras.layers.Dense(
            self.hidden_size,
            kernel_initializer="lecun_normal",
            dtype=self.dtype_policy,
            name="projection",
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")

    @property
    def num_tokens(self):
        return self.num_patches + self.num_prefix_tokens

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: class, distillation and register tokens."""
        return self.num_learned_prefix + self.num_register_tokens

    @property
    def num_learned_prefix(self):
        """The class and distillation tokens (those that may have position embeddings)."""
        return int(self.class_token) + int(self.distillation_token)

    @property
    def num_position_prefix(self):
        """Position embeddings before the patches' (the class and distillation tokens', unless ``prefix_positions=False``;
        the registers' too with ``register_positions``)."""
        return position_prefix(self.num_learned_prefix, self.num_register_tokens, self.prefix_positions,
                               self.register_positions)

    @property
    def stored_grid(self):
        """``(rows, cols)`` of the stored position embeddings: ``grid_size``, else a square; None if neither."""
        if self.grid_size is not None:
            return self.grid_size
        side = math.isqrt(self.num_patches)
        return (side, side) if side * side == self.num_patches else None

    def build(self, input_shape):
        if len(input_shape) == 4:
            if self.stored_grid is None:
                raise ValueError(
                    f"PatchEncoder needs grid_size=(rows, cols) for patches given on a grid: num_patches="
                    f"{self.num_patches} is not a square. Received: input_shape={tuple(input_shape)}"
                )
        elif input_shape[1] is not None and input_shape[1] != self.num_patches:
            raise ValueError(
                f"PatchEncoder expects {self.num_patches} patches. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        self.projection.build(input_shape)
        if self.patch_norm_layer is not None:
            self.patch_norm_layer.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        if self.class_token:
            self.cls = self.add_weight(
                shape=(1, 1, self.hidden_size), initializer="zeros", name="class_token"
            )
        if self.distillation_token:
            self.dist = self.add_weight(shape=(1, 1, self.hidden_size), initializer="zeros", name="distillation_token")
        if self.num_register_tokens:
            self.registers = self.add_weight(
                shape=(1, self.num_register_tokens, self.hidden_size),
                initializer=keras.initializers.RandomNormal(stddev=1e-6),
                name="register_tokens",
            )
        if not self.has_position_embedding:
            self.position_embedding = None
            return
        self.position_embedding = self.add_weight(
            shape=(1, self.num_patches + self.num_position_prefix, self.hidden_size),
            initializer=keras.initializers.RandomNormal(stddev=0.02),
            name="position_embedding",
            autocast=False,  # resampled in float32 (under a 16-bit policy too), then cast
        )

    def position_embedding_for(self, grid):
        """The position embeddings for a ``(rows, cols)`` grid: the stored ones, resampled in 2-D if it differs.

        ``rows`` and ``cols`` may be scalar tensors known only when the graph runs.
        """
        rows, cols = self.stored_grid
        if all(isinstance(n, int) for n in grid) and tuple(grid) == (rows, cols):
            return self.position_embedding
        posemb = ops.convert_to_tensor(self.position_embedding)
        prefix = posemb[:, : self.num_position_prefix]
        patches = ops.reshape(posemb[0, self.num_position_prefix :], (rows, cols, self.hidden_size))
        patches = resampling_lib.resize_grid(patches, grid, method=self.resampling)
        patches = ops.reshape(patches, (1, grid[0] * grid[1], self.hidden_size))
        return ops.concatenate([prefix, patches], axis=1)

    def call(self, patches, training=None):
        position = self.position_embedding
        if len(patches.shape) == 4:
            shape = ops.shape(patches)
            position = self.position_embedding_for((shape[1], shape[2])) if self.has_position_embedding else None
            patches = ops.reshape(patches, (shape[0], shape[1] * shape[2], patches.shape[-1]))
        x = kernels.dense(patches, self.projection)
        if self.patch_norm_layer is not None:
            x = normalize(x, self.patch_norm_layer)
        batch = ops.shape(x)[0]
        prefix = [self.cls] if self.class_token else []
        prefix += [self.dist] if self.distillation_token else []
        prefix = [ops.broadcast_to(ops.cast(token, x.dtype), (batch, 1, self.hidden_size)) for token in prefix]
        registers = []
        if self.num_register_tokens:
            shape = (batch, self.num_register_tokens, self.hidden_size)
            registers = [ops.broadcast_to(ops.cast(self.registers, x.dtype), shape)]
        if position is None:  # no learned positions (RoPE in the attention)
            x = ops.concatenate(prefix + registers + [x], axis=1) if prefix or registers else x
        elif self.register_positions:  # [class, distillation, registers, patches] + positions of them all
            x = ops.concatenate(prefix + registers + [x], axis=1) + ops.cast(position, x.dtype)
        elif self.prefix_positions:
            x = ops.concatenate(prefix + [x], axis=1) if prefix else x
            x = x + ops.cast(position, x.dtype)
            if registers:  # after the class (and distillation) token, as DINOv2 inserts them
                k = self.num_learned_prefix
                x = ops.concatenate([x[:, :k]] + registers + [x[:, k:]], axis=1)
        else:
            x = x + ops.cast(position, x.dtype)
            x = ops.concatenate(prefix + registers + [x], axis=1) if prefix or registers else x
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, input_shape):
        if len(input_shape) == 4:
            rows, cols = input_shape[1], input_shape[2]
            tokens = None if rows is None or cols is None else rows * cols + self.num_prefix_tokens
            return (input_shape[0], tokens, self.hidden_size)
        return (input_shape[0], self.num_tokens, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_patches": self.num_patches,
                "hidden_size": self.hidden_size,
                "class_token": self.class_token,
                "dropout": self.dropout,
                "grid_size": self.grid_size,
                "distillation_token": self.distillation_token,
                "num_register_tokens": self.num_register_tokens,
                "prefix_positions": self.prefix_positions,
                "resampling": self.resampling,
            }
        )
        if not self.has_position_embedding:
            config["position_embedding"] = False
        if self.register_positions:
            config["register_positions"] = True
        if self.patch_norm is not None:
            config.update(patch_norm=self.patch_norm, patch_norm_epsilon=self.patch_norm_epsilon)
        return config
