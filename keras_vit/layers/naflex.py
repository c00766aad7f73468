"""NaFlex's embedding and pooling: patches of each image's own grid, padded to a budget, with their coordinates and mask.

A NaFlex model (timm's ``NaFlexVit``, SigLIP 2 NaFlex) takes the dict of :mod:`keras_vit.layers.naflex_grid`:
``patches`` ``(B, N, ph * pw * C)``, ``patch_coord`` ``(B, N, 2)`` ``(row, col)`` and ``patch_valid`` ``(B, N)``.
Each image has its own grid ``(h, w)`` (``1 + the largest row and column of its valid patches``), and its position
embeddings are the stored table resampled to that grid, as timm's ``NaFlexEmbeds`` does per image:

* a learned table ``(rows, cols, D)`` (:class:`NaFlexPatchEncoder` ``factorized=False``): resampled in 2-D to
  ``(h, w)`` by ``resampling`` (timm's ``F.interpolate(mode=bicubic | bilinear, antialias=True)``, or C-RADIO's
  ``mode='bilinear', antialias=False`` with ``align_corners`` False or True: :data:`GRID_RESAMPLING`,
  :mod:`keras_vit.layers.resampling`), or with ``aspect_preserving`` to the square ``(L, L)``, ``L = max(h, w)``, and
  its top-left ``(h, w)`` kept (timm's ``pos_embed_ar_preserving``);
* a factorised one (``factorized=True``, timm's ``pos_embed='factorized'``): a row table ``(rows, D)`` and a column
  table ``(cols, D)``, each resampled linearly (``F.interpolate(mode='linear', align_corners=False)``) to ``h`` and
  ``w`` (``L`` and ``L`` with ``aspect_preserving``), summed at each patch.

Each patch takes the resampled table at its own coordinates: one row of resampling weights per token
(:func:`keras_vit.layers.resampling.sample_weights`), so images of different grids share one batch without a Python
loop. timm adds the table to the first ``h * w`` tokens in order, which are the patches at those coordinates in the
row-major order :func:`~keras_vit.layers.naflex_grid.patchify` writes. Padding tokens get positions too; the mask
keeps them out of every valid token's attention (``SelfAttention``'s ``key_mask``) and out of the pooling
(:class:`MaskedPooling`, ``AttentionPooling``'s ``key_mask``).

The weights have the names and shapes of :class:`~keras_vit.layers.PatchEncoder`'s (``projection`` ``(ph * pw * C,
D)``, ``class_token``, ``register_tokens``, ``position_embedding`` ``(1, prefix + rows * cols, D)``), so a checkpoint
of the paper's ViT loads into its NaFlex form unchanged; the factorised tables are ``position_embedding_rows``
``(1, rows, D)`` and ``position_embedding_cols`` ``(1, cols, D)``.
"""

import keras
from keras import ops

from keras_vit.layers import formulation, kernels
from keras_vit.layers import resampling as resampling_lib
from keras_vit.layers.checks import PACKAGE as _PACKAGE, built_when_created, check_rate, pair, positive_int
from keras_vit.layers.policies import SublayerPolicies

FACTORIZED_RESAMPLING = "linear_torch"  # timm's factorised tables: F.interpolate(mode='linear', align_corners=False)
# per-token rules of a 2-D table: "bilinear_torch" is F.interpolate(mode='bilinear', antialias=False,
# align_corners=False), "linear_aligned" the same with align_corners=True (keras_vit.layers.resampling)
GRID_RESAMPLING = ("linear_aligned", "bicubic_torch_antialias", "bilinear_torch_antialias", "bilinear_torch")


def image_grids(coords, valid):
    """``(rows, cols)`` per image ``(B,)`` each: 1 + the largest coordinate of its valid patches (timm's
    ``calculate_naflex_grid_sizes``)."""
    kept = ops.where(ops.expand_dims(ops.cast(valid, "bool"), -1), ops.cast(coords, "int32"), 0)
    grid = ops.max(kept, axis=1) + 1
    return grid[:, 0], grid[:, 1]


@keras.saving.register_keras_serializable(package=_PACKAGE)
class NaFlexPatchEncoder(SublayerPolicies, keras.layers.Layer):
    """``[prefix; patches E] + E_pos`` of a NaFlex batch, each image's positions resampled to its own grid.

    Args:
        grid_size: ``(rows, cols)`` of the stored position table.
        hidden_size: the model width D.
        class_token: a learnable class token first.
        num_register_tokens: learnable register tokens after it (no positions).
        prefix_positions: the class token has a stored position (the first row of ``position_embedding``), added
            to it (timm's conversion of a classic ViT folds it into the token the same way).
        dropout: dropout rate after the positions.
        resampling: the 2-D table's rule, one of :data:`GRID_RESAMPLING` (unused with ``factorized``).
        aspect_preserving: resample to the square of the longer side and keep the image's top-left part (timm's
            ``pos_embed_ar_preserving``).
        factorized: a row and a column table instead of a grid (timm's ``pos_embed='factorized'``).
        position_embedding: False: no positions at all.

    Call arguments:
        inputs: ``[patches (B, N, ph * pw * C), coords (B, N, 2) int, valid (B, N) bool]``.

    Returns:
        ``(B, prefix + N, D)``.

    Example:
    >>> import numpy as np
    >>> encoder = NaFlexPatchEncoder(grid_size=(4, 4), hidden_size=8, num_register_tokens=2, class_token=False)
    >>> coords = np.array([[[0, 0], [0, 1], [0, 2], [0, 0]]]); valid = np.array([[True, True, True, False]])
    >>> tuple(encoder([np.zeros((1, 4, 12), "float32"), coords, valid]).shape)
    (1, 6, 8)
    """

    def __init__(self, grid_size, hidden_size, *, class_token=False, num_register_tokens=0, prefix_positions=False,
                 dropout=0.0, resampling="bicubic_torch_antialias", aspect_preserving=False, factorized=False,
                 position_embedding=True, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = pair(grid_size, "grid_size")
        self.hidden_size = positive_int(hidden_size, "hidden_size")
        self.class_token = bool(class_token)
        if isinstance(num_register_tokens, bool) or not isinstance(num_register_tokens, int) or num_register_tokens < 0:
            raise ValueError(f"`num_register_tokens` must be an int >= 0. Received: num_register_tokens={num_register_tokens!r}")
        self.num_register_tokens = num_register_tokens
        self.prefix_positions = bool(prefix_positions) and self.class_token
        self.dropout = check_rate(dropout, "dropout")
        if resampling not in GRID_RESAMPLING:
            raise ValueError(f"NaFlex resamples a table per token with one of {GRID_RESAMPLING}. Received: resampling={resampling!r}")
        self.resampling = resampling
        self.aspect_preserving = bool(aspect_preserving)
        self.factorized = bool(factorized)
        self.has_position_embedding = bool(position_embedding)
        self.projection = keras.layers.Dense(self.hidden_size, kernel_initializer="lecun_normal", dtype=self.dtype_policy,
                                             name="projection")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy, name="dropout")

    @property
    def num_prefix_tokens(self):
        return int(self.class_token) + self.num_register_tokens

    def build(self, input_shape):
        patches_shape = input_shape[0]
        self.projection.build(patches_shape)
        width, (rows, cols) = self.hidden_size, self.grid_size
        if self.class_token:
            self.cls = self.add_weight(shape=(1, 1, width), initializer="zeros", name="class_token")
        if self.num_register_tokens:
            self.registers = self.add_weight(shape=(1, self.num_register_tokens, width),
                                             initializer=keras.initializers.RandomNormal(stddev=1e-6), name="register_tokens")
        if not self.has_position_embedding:
            return
        normal = keras.initializers.RandomNormal(stddev=0.02)
        if self.factorized:
            self.rows_table = self.add_weight(shape=(1, rows, width), initializer=normal, name="position_embedding_rows",
                                              autocast=False)
            self.cols_table = self.add_weight(shape=(1, cols, width), initializer=normal, name="position_embedding_cols",
                                              autocast=False)
        else:
            self.position_embedding = self.add_weight(
                shape=(1, int(self.prefix_positions) + rows * cols, width), initializer=normal, name="position_embedding",
                autocast=False)

    def positions(self, coords, valid):
        """``(B, N, D)`` float32: each patch's position, the table resampled to its image's grid at its coordinates."""
        if formulation.active():
            return self._float_positions(coords, valid)
        rows, cols = self.grid_size
        grid_h, grid_w = image_grids(coords, valid)
        if self.aspect_preserving:
            grid_h = grid_w = ops.maximum(grid_h, grid_w)
        y = ops.cast(coords[..., 0], "float32")
        x = ops.cast(coords[..., 1], "float32")
        new_h, new_w = ops.expand_dims(grid_h, 1), ops.expand_dims(grid_w, 1)  # (B, 1): broadcast over the tokens
        if self.factorized:
            w_rows = resampling_lib.sample_weights(y, new_h, rows, method=FACTORIZED_RESAMPLING)  # (B, N, rows)
            w_cols = resampling_lib.sample_weights(x, new_w, cols, method=FACTORIZED_RESAMPLING)  # (B, N, cols)
            return ops.matmul(w_rows, ops.convert_to_tensor(self.rows_table[0])) + ops.matmul(
                w_cols, ops.convert_to_tensor(self.cols_table[0]))
        w_rows = resampling_lib.sample_weights(y, new_h, rows, method=self.resampling)
        w_cols = resampling_lib.sample_weights(x, new_w, cols, method=self.resampling)
        both = ops.expand_dims(w_rows, -1) * ops.expand_dims(w_cols, -2)  # (B, N, rows, cols)
        shape = ops.shape(both)
        table = ops.convert_to_tensor(self.position_embedding)[0, int(self.prefix_positions):]  # (rows * cols, D)
        return ops.matmul(ops.reshape(both, (shape[0], shape[1], rows * cols)), table)

    def _float_positions(self, coords, valid):
        """:meth:`positions` in float32 ops of rank 4 at most, for the TFLite export (:func:`formulation.rank4`):
        the coordinates and the mask cast first, no strided slice dropping an axis, the 2-D weights as a batched
        matmul of a column and a row (the GPU delegate takes every tensor of it)."""
        rows, cols = self.grid_size
        coords = ops.cast(coords, "float32")
        keep = ops.expand_dims(ops.cast(valid, "float32"), -1)  # (B, N, 1)
        batch, tokens = ops.shape(coords)[0], ops.shape(coords)[1]
        grid = ops.max(coords * keep, axis=1, keepdims=True) + 1.0  # (B, 1, 2)
        new_h, new_w = (ops.reshape(g, (batch, 1)) for g in ops.split(grid, 2, axis=-1))  # (B, 1) each
        if self.aspect_preserving:
            new_h = new_w = ops.maximum(new_h, new_w)
        y, x = (ops.reshape(c, (batch, tokens)) for c in ops.split(coords, 2, axis=-1))  # (B, N) each
        method = FACTORIZED_RESAMPLING if self.factorized else self.resampling
        w_rows = resampling_lib.sample_weights(y, new_h, rows, method=method)  # (B, N, rows)
        w_cols = resampling_lib.sample_weights(x, new_w, cols, method=method)  # (B, N, cols)
        if self.factorized:
            return ops.matmul(w_rows, ops.convert_to_tensor(self.rows_table[0])) + ops.matmul(
                w_cols, ops.convert_to_tensor(self.cols_table[0]))
        both = ops.matmul(ops.reshape(w_rows, (batch * tokens, rows, 1)), ops.reshape(w_cols, (batch * tokens, 1, cols)))
        table = ops.convert_to_tensor(self.position_embedding)[0, int(self.prefix_positions):]  # (rows * cols, D)
        return ops.matmul(ops.reshape(both, (batch, tokens, rows * cols)), table)

    def call(self, inputs, training=None):
        patches, coords, valid = inputs
        x = kernels.dense(patches, self.projection)
        if self.has_position_embedding:
            x = x + ops.cast(self.positions(coords, valid), x.dtype)
        batch = ops.shape(x)[0]
        prefix = []
        if self.class_token:
            token = ops.cast(self.cls, x.dtype)
            if self.has_position_embedding and self.prefix_positions:
                token = token + ops.cast(self.position_embedding[:, :1], x.dtype)
            prefix.append(ops.broadcast_to(token, (batch, 1, self.hidden_size)))
        if self.num_register_tokens:
            prefix.append(ops.broadcast_to(ops.cast(self.registers, x.dtype), (batch, self.num_register_tokens, self.hidden_size)))
        if prefix:
            x = ops.concatenate(prefix + [x], axis=1)
        return self.dropout_layer(x, training=training)

    def compute_output_shape(self, input_shape):
        tokens = input_shape[0][1]
        return (input_shape[0][0], None if tokens is None else tokens + self.num_prefix_tokens, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update({
            "grid_size": self.grid_size, "hidden_size": self.hidden_size, "class_token": self.class_token,
            "num_register_tokens": self.num_register_tokens, "prefix_positions": self.prefix_positions,
            "dropout": self.dropout, "resampling": self.resampling, "aspect_preserving": self.aspect_preserving,
            "factorized": self.factorized, "position_embedding": self.has_position_embedding,
        })
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenMask(keras.layers.Layer):
    """``(B, prefix + N)`` bool: the prefix tokens and ``patch_valid`` (timm's ``create_attention_mask`` keys); the
    prefix tokens are valid, or left out with ``prefix_valid=False`` (timm's attention pooling of the patches only).

    Example:
    >>> keras.ops.convert_to_numpy(TokenMask(2)(keras.ops.convert_to_tensor([[True, False]]))).tolist()
    [[True, True, True, False]]
    """

    def __init__(self, num_prefix_tokens=0, prefix_valid=True, **kwargs):
        super().__init__(**kwargs)
        if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"`num_prefix_tokens` must be an int >= 0. Received: num_prefix_tokens={num_prefix_tokens!r}")
        self.num_prefix_tokens = num_prefix_tokens
        self.prefix_valid = bool(prefix_valid)
        built_when_created(self)

    def call(self, valid):
        dtype = "float32" if formulation.active() else "bool"  # the TFLite graph: 0/1 floats (no bool concatenation)
        valid = ops.cast(valid, dtype)
        if not self.num_prefix_tokens:
            return valid
        prefix = ops.full((ops.shape(valid)[0], self.num_prefix_tokens), self.prefix_valid, dtype)
        return ops.concatenate([prefix, valid], axis=1)

    def compute_output_spec(self, valid):
        tokens = valid.shape[1]
        return keras.KerasTensor((valid.shape[0], None if tokens is None else tokens + self.num_prefix_tokens), dtype="bool")

    def get_config(self):
        return {**super().get_config(), "num_prefix_tokens": self.num_prefix_tokens, "prefix_valid": self.prefix_valid}


@keras.saving.register_keras_serializable(package=_PACKAGE)
class MaskedPooling(keras.layers.Layer):
    """One vector per image of a padded NaFlex batch: the class token, or the mean / maximum of its valid patches.

    Args:
        mode: ``"token"`` (token 0), ``"gap"`` (the mean of the valid patch tokens after ``num_prefix_tokens``:
            timm's ``global_pool_naflex(pool_type='avg')``) or ``"max"`` (their maximum).
        num_prefix_tokens: tokens before the patches, left out of ``"gap"`` and ``"max"``.

    Call arguments:
        inputs: ``[x (B, prefix + N, D), valid (B, N) bool]``.

    Example:
    >>> x = keras.ops.reshape(keras.ops.arange(12, dtype="float32"), (1, 3, 4))
    >>> keras.ops.convert_to_numpy(MaskedPooling("gap", 1)([x, keras.ops.convert_to_tensor([[True, False]])])).tolist()
    [[4.0, 5.0, 6.0, 7.0]]
    """

    MODES = ("token", "gap", "max")

    def __init__(self, mode="gap", num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        if mode not in self.MODES:
            raise ValueError(f"Unknown NaFlex pooling mode: expected one of {self.MODES}. Received: mode={mode!r}")
        if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"`num_prefix_tokens` must be an int >= 0. Received: num_prefix_tokens={num_prefix_tokens!r}")
        self.mode = mode
        self.num_prefix_tokens = num_prefix_tokens
        built_when_created(self)

    def call(self, inputs):
        x, valid = inputs
        if self.mode == "token":
            return formulation.take_token(x, 0) if formulation.active() else x[:, 0]
        patches = x[:, self.num_prefix_tokens:]
        if formulation.active() and self.mode == "gap":  # the TFLite graph: float ops only
            weights = ops.expand_dims(ops.cast(valid, patches.dtype), -1)
            count = ops.maximum(ops.sum(weights, axis=1), ops.cast(1.0, patches.dtype))
            return ops.sum(patches * weights, axis=1) * (1.0 / count)
        keep = ops.expand_dims(ops.cast(valid, "bool"), -1)
        if self.mode == "max":
            return ops.max(ops.where(keep, patches, ops.cast(float("-inf"), patches.dtype)), axis=1)
        weights = ops.cast(keep, patches.dtype)
        count = ops.maximum(ops.sum(weights, axis=1), ops.cast(1.0, patches.dtype))  # timm's clamp(min=1)
        return ops.sum(patches * weights, axis=1) / count

    def compute_output_shape(self, input_shape):
        return (input_shape[0][0], input_shape[0][-1])

    def get_config(self):
        return {**super().get_config(), "mode": self.mode, "num_prefix_tokens": self.num_prefix_tokens}
