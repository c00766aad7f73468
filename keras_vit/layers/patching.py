"""Images to patches: ``Patches`` cuts the image (Eq. 1's ``x_p``), ``StemInputCheck`` guards a striding stem.

The embedding of the patches, ``PatchEncoder``, is in :mod:`keras_vit.layers.embedding`.
"""

import keras
from keras import ops

from keras_vit.layers.checks import PACKAGE as _PACKAGE, built_when_created, pair, positive_int


@keras.saving.register_keras_serializable(package=_PACKAGE)
class Patches(keras.layers.Layer):
    """Cut images into non-overlapping patches and flatten each one.

    ``(batch, H, W, C) -> (batch, (H / P) * (W / P), P * P * C)``, patches in
    row-major order and each patch flattened as ``(row, col, channel)``: the
    order of a ``(P, P, C, D)`` convolution kernel reshaped to ``(P*P*C, D)``.
    Implemented with reshape and a 4-D transpose (no ``extract_patches``,
    which is a Flex op in TFLite).

    With ``flatten=True`` (a model of fixed image size) the image size must be
    static and divisible by the patch size, checked when the layer is called
    (or its output shape computed). The first call with a static size fixes
    it (as a ``Dense`` layer's first call fixes its input width): a model built
    for 224x224 rejects 384x384 images with a message naming both sizes. The
    reshapes name the batch size, so a graph traced for one size fails on an
    image of another size rather than returning rows that belong to no image.

    With ``flatten=False`` (a model built with ``image_size=None``) the output
    keeps the grid, ``(batch, H / P, W / P, P * P * C)``, for a
    :class:`PatchEncoder` that resamples its position embeddings to it; any
    ``H`` and ``W`` divisible by the patch size are taken, sizes known only when
    the graph runs included (an indivisible one fails with both sizes named).

    An image smaller than one patch in either dimension (``0x16``, ``7x8`` for
    patch 8) is refused as well, with both sizes named: a ``ValueError`` when
    the size is static, an ``InvalidArgumentError`` from the graph (a
    SavedModel, TF Serving) when it is known only when it runs.

    Args:
        patch_size: int or ``(ph, pw)``, positive.
        flatten: return the patches as one sequence (True) or on their grid.

    Call arguments:
        images: ``(batch, H, W, C)``.

    Returns:
        ``(batch, (H / ph) * (W / pw), ph * pw * C)``, or
        ``(batch, H / ph, W / pw, ph * pw * C)`` with ``flatten=False``.

    Example:
    >>> tuple(Patches(16)(keras.ops.zeros((2, 224, 224, 3))).shape)
    (2, 196, 768)
    >>> tuple(Patches(16, flatten=False)(keras.ops.zeros((2, 64, 96, 3))).shape)
    (2, 4, 6, 768)
    """

    def __init__(self, patch_size, flatten=True, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.flatten = bool(flatten)
        self._ph, self._pw = pair(patch_size, "patch_size")
        built_when_created(self)  # no weights: built when created, so model.quantize() never meets it unbuilt

    @property
    def patch_size_pair(self):
        """``(ph, pw)``: the patch height and width (``patch_size`` as given may be an int)."""
        return self._ph, self._pw

    def grid_size(self, input_shape):
        """``(rows, cols)`` of patches for an input shape ``(batch, H, W, C)``."""
        _, h, w, _ = input_shape
        if h is None or w is None:
            raise ValueError(f"Patches needs a static image size. Received: input_shape={tuple(input_shape)}")
        if h % self._ph or w % self._pw or h < self._ph or w < self._pw:
            raise ValueError(
                f"The image size{_STEM} must be divisible by the patch size, and at least one patch{_NO_PATCH}. "
                f"Received: image_size=({h}, {w}), patch_size=({self._ph}, {self._pw})"
            )
        return h // self._ph, w // self._pw

    def call(self, images):
        if self.flatten:
            images, (h, w) = self._image_size(images)
        else:
            _, h, w, _ = images.shape
            if h is None or w is None:
                images = _checked_divisible(images, (self._ph, self._pw))
        c = images.shape[-1]
        shape = ops.shape(images)
        if h is None or w is None:  # known when the graph runs
            gh, gw = shape[1] // self._ph, shape[2] // self._pw
        else:
            gh, gw = self.grid_size((None, h, w, c))
        ph, pw = self._ph, self._pw
        batch = shape[0]
        # (B, H, W, C) -> (B*gh, ph, gw, pw*C) -> (B*gh, gw, ph, pw*C) -> (B, N, ph*pw*C). The batch is
        # spelled out, never -1: in a graph traced for HxW (a SavedModel signature, a resized TFLite
        # input) an image of another size then fails the reshape instead of being regrouped into
        # more or fewer rows that belong to no image.
        x = ops.reshape(images, (batch * gh, ph, gw, pw * c))
        x = ops.transpose(x, (0, 2, 1, 3))
        if self.flatten:
            return ops.reshape(x, (batch, gh * gw, ph * pw * c))
        return ops.reshape(x, (batch, gh, gw, ph * pw * c))

    def _image_size(self, images):
        """``(images, (H, W))``, the first static size fixing the layer's (Keras checks ``input_spec``).

        A size Keras relaxed to None when it retraced (``predict_on_batch`` after
        a call with other images) is taken to be the fixed one and checked
        when the graph runs.
        """
        _, h, w, _ = images.shape
        fixed = self.input_spec.axes if isinstance(self.input_spec, keras.InputSpec) else {}
        if (h is None or w is None) and fixed.get(1) is not None and fixed.get(2) is not None:
            h, w = fixed[1], fixed[2]
            images = _checked_size(images, (h, w))
        elif h is not None and w is not None and not fixed:
            # like Dense's input width: a model built for HxW rejects other sizes with a message naming
            # both, here and not as a reshape into rows that belong to no image
            self.input_spec = keras.InputSpec(ndim=4, axes={1: h, 2: w})
        return images, (h, w)

    def compute_output_shape(self, input_shape):
        batch, h, w, channels = input_shape
        depth = self._ph * self._pw * channels
        if not self.flatten and (h is None or w is None):  # checked when the graph runs
            return (batch, None if h is None else h // self._ph, None if w is None else w // self._pw, depth)
        gh, gw = self.grid_size(input_shape)
        return (batch, gh * gw, depth) if self.flatten else (batch, gh, gw, depth)

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "flatten": self.flatten})
        return config


_STEM = " (after a stem: its feature map's, the image size / the stem's stride rounded up)"
_NO_PATCH = " in each dimension (an image smaller than a patch has no patch to classify)"


def _checked_divisible(images, patch_size):
    """``images``, failing when the graph runs if their size is not a positive multiple of the patch size (both named).

    An image smaller than a patch (``0x16`` included) is refused as an indivisible one is: its
    sequence would hold the class token alone, and the model would classify nothing.
    """
    if keras.backend.backend() != "tensorflow":
        return images  # other backends trace static shapes: Patches.grid_size checks them
    import tensorflow as tf  # deferred: the TensorFlow backend only

    size = tf.shape(images)[1:3]
    patch = tf.constant(patch_size, tf.int32)
    whole = tf.reduce_all(tf.logical_and(tf.equal(size % patch, 0), size >= patch))
    message = (
        f"The image size{_STEM} must be divisible by the patch size {tuple(patch_size)} (H, W), and at least one "
        f"patch{_NO_PATCH}. Received: (batch, H, W, C) ="
    )
    with tf.control_dependencies([tf.debugging.Assert(whole, [message, tf.shape(images)], summarize=4)]):
        return tf.identity(images)


def _checked_size(images, size):
    """``images``, failing when the graph runs if they are not ``size`` (the message names both sizes)."""
    if keras.backend.backend() != "tensorflow":
        return images  # other backends trace static shapes; the reshapes still refuse another size
    import tensorflow as tf  # deferred: the TensorFlow backend only

    same = tf.reduce_all(tf.equal(tf.shape(images)[1:3], tf.constant(size, tf.int32)))
    message = f"Patches was built for images of size (H, W) = {tuple(size)}. Received: (batch, H, W, C) ="
    with tf.control_dependencies([tf.debugging.Assert(same, [message, tf.shape(images)], summarize=4)]):
        return tf.identity(images)  # the reshapes wait for the check


@keras.saving.register_keras_serializable(package=_PACKAGE)
class StemInputCheck(keras.layers.Layer):
    """The images, refused when a stem of total ``stride`` would leave no whole grid of patches.

    A stem pads ``"same"``: an ``H x W`` image gives a ``ceil(H / stride) x ceil(W / stride)`` feature
    map, which the patches must divide, at least one patch in each dimension
    (:meth:`~keras_vit.architecture.config.ViTConfig.grid_for`'s rule). Checked on the image, so that
    the message names the image size (the ``Patches`` after the stem only see the feature map): a
    ``ValueError`` when the size is static, an ``InvalidArgumentError`` from the graph (TensorFlow) when
    it is known only when the graph runs.

    With ``exact`` (a stem of patchify convolutions, timm's ``ConvStem`` of ``padding=0``: MobileCLIP's), the
    image size must be a multiple of the stride itself: timm's unpadded convolutions drop what ``"same"`` padding
    would add (a 236 x 236 image gives timm's ``vit_base_mci_224`` 14 x 14 patches, a padded stem 15 x 15), so
    only there do the two agree, as the fixed-size rule (:meth:`ViTConfig.grid_for`) already demands.

    Args:
        patch_size: int or ``(ph, pw)``, the patch size on the feature map.
        stride: the stem's total stride.
        exact: the image size a multiple of ``stride`` (no padding in the stem); saved only when set.

    Example:
    >>> tuple(StemInputCheck(2, 4)(keras.ops.zeros((1, 8, 16, 3))).shape)
    (1, 8, 16, 3)
    >>> try:
    ...     StemInputCheck(2, 8, exact=True)(keras.ops.zeros((1, 236, 236, 3)))  # ceil(236 / 8) = 30, but 236 % 8 = 4
    ... except ValueError as error:
    ...     print("multiple of the stem's stride 8" in str(error))
    True
    """

    def __init__(self, patch_size, stride, exact=False, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self.stride = positive_int(stride, "stride")
        self.exact = bool(exact)
        self._patch = pair(patch_size, "patch_size")
        built_when_created(self)

    def _message(self):
        s = self.stride
        if self.exact:
            return (f"The image size must be a multiple of the stem's stride {s} (its convolutions have no padding) "
                    f"whose quotient the patch size {self._patch} divides, and at least one patch{_NO_PATCH}")
        return (
            f"The image size must give the stem (stride {s}) a feature map (the image size / {s}, rounded up) "
            f"divisible by the patch size {self._patch}, and at least one patch{_NO_PATCH}"
        )

    def _check_static(self, h, w):
        if h is None or w is None:
            return
        rows, cols = -(-h // self.stride), -(-w // self.stride)
        (ph, pw), valid = self._patch, min(h, w) >= 1
        if self.exact and (h % self.stride or w % self.stride):
            valid = False
        if not valid or rows % ph or cols % pw or rows < ph or cols < pw:
            raise ValueError(f"{self._message()}. Received: image_size=({h}, {w}), patch_size={self._patch}, stride={self.stride}")

    def call(self, images):
        _, h, w, _ = images.shape
        self._check_static(h, w)
        if (h is not None and w is not None) or keras.backend.backend() != "tensorflow":
            return images  # other backends trace static shapes: checked above
        import tensorflow as tf  # deferred: the TensorFlow backend only

        size = tf.shape(images)[1:3]
        patch = tf.constant(self._patch, tf.int32)
        rows = (size + self.stride - 1) // self.stride
        valid = tf.reduce_all(tf.logical_and(size >= 1, tf.logical_and(tf.equal(rows % patch, 0), rows >= patch)))
        if self.exact:
            valid = tf.logical_and(valid, tf.reduce_all(tf.equal(size % self.stride, 0)))
        message = f"{self._message()}. Received: (batch, H, W, C) ="
        with tf.control_dependencies([tf.debugging.Assert(valid, [message, tf.shape(images)], summarize=4)]):
            return tf.identity(images)

    def compute_output_shape(self, input_shape):
        self._check_static(input_shape[1], input_shape[2])
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "stride": self.stride})
        if self.exact:  # saved only when set: the other stems' files stay as they were
            config["exact"] = True
        return config


@keras.saving.register_keras_serializable(package=_PACKAGE)
class TokenGrid(keras.layers.Layer):
    """The patch tokens of a sequence laid out on their grid: a feature map, as a ConvNet's.

    ``(batch, prefix + rows * cols, D) -> (batch, rows, cols, D)``: the first ``num_prefix_tokens``
    (class, distillation, register tokens) are dropped and the patch tokens, in the row-major order
    :class:`Patches` cuts them, are reshaped to the grid. The grid is that of ``feature_map`` (what the
    patches were cut from: the image, or a stem's output) cut into ``patch_size`` patches, so a model of
    any image size (``image_size=None``) gets the grid of each image.

    Args:
        patch_size: int or ``(ph, pw)``, as the model's ``Patches``.
        num_prefix_tokens: tokens before the patches.

    Call arguments:
        inputs: ``[tokens, feature_map]`` (a list, as Keras' merge layers take): ``tokens``
            ``(batch, prefix + rows * cols, D)``, ``feature_map`` ``(batch, rows * ph, cols * pw, C)``,
            the tensor the patches were cut from.

    Example:
    >>> tokens = keras.ops.reshape(keras.ops.arange(2 * 7 * 3, dtype="float32"), (2, 7, 3))  # class token + 2x3 patches
    >>> grid = TokenGrid(patch_size=4, num_prefix_tokens=1)([tokens, keras.ops.zeros((2, 8, 12, 3))])
    >>> tuple(grid.shape), keras.ops.convert_to_numpy(grid[0, 1, 0]).tolist()  # patch 3 (row 1, col 0) = token 4
    ((2, 2, 3, 3), [12.0, 13.0, 14.0])
    """

    def __init__(self, patch_size, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.patch_size = patch_size
        self._patch = pair(patch_size, "patch_size")
        if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) or num_prefix_tokens < 0:
            raise ValueError(f"`num_prefix_tokens` must be an int >= 0. Received: num_prefix_tokens={num_prefix_tokens!r}")
        self.num_prefix_tokens = num_prefix_tokens
        built_when_created(self)

    def call(self, inputs):
        tokens, feature_map = inputs
        shape = ops.shape(feature_map)
        rows, cols = shape[1] // self._patch[0], shape[2] // self._patch[1]
        patches = tokens[:, self.num_prefix_tokens :] if self.num_prefix_tokens else tokens
        return ops.reshape(patches, (-1, rows, cols, tokens.shape[-1]))

    def compute_output_shape(self, input_shape):
        tokens_shape, feature_map_shape = input_shape
        rows, cols = (None if size is None else size // patch for size, patch in zip(feature_map_shape[1:3], self._patch))
        return (tokens_shape[0], rows, cols, tokens_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update({"patch_size": self.patch_size, "num_prefix_tokens": self.num_prefix_tokens})
        return config
