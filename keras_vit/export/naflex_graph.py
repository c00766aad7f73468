"""The graphs a NaFlex model is exported as: the SavedModel's two signatures and the TFLite file's function.

A NaFlex model (``ViTConfig(input_mode="naflex")``) takes ``{patches, patch_coord, patch_valid}``
(:mod:`keras_vit.layers.naflex_grid`), each image at its own aspect ratio under a budget of patches:

* SavedModel (:func:`build_archive`): ``serving_default`` takes that dict (``patches`` float32
  ``(batch, N, ph * pw * 3)`` RGB in [0, 255], ``patch_coord`` int32 ``(batch, N, 2)``, ``patch_valid`` bool
  ``(batch, N)``; ``N`` the model's ``max_patches``, any with ``max_patches=None``); ``serving_bytes`` takes
  ``image_bytes``, encoded images of any size, and applies the model's grid rule (``grid_rule``) in the graph: each
  decoded by the one decoder, resized under the budget and cut into patches (:mod:`keras_vit.inference.naflex_input`),
  as ``keras-vit predict`` reads a file. Outputs as the image model's SavedModel (:func:`keras_vit.export.saved_model.signature_outputs`).
* TFLite (:func:`frozen_function`): the three inputs at a fixed batch and a fixed budget ``N`` (any aspect ratio at
  one sequence length; the mask says which patches are an image's), all float32 (:data:`TFLITE_DTYPES`: the
  coordinates as whole numbers, the mask as 1 or 0), traced in the graph of rank 4 at most
  (:func:`keras_vit.layers.formulation.rank4`): the coordinates and the mask are cast to float32 at once, so the GPU
  delegate takes every op.
"""

from keras_vit.architecture.model import config_of
from keras_vit.export import saved_model
from keras_vit.inference import decoding, naflex_input
from keras_vit.layers import formulation
from keras_vit.layers.naflex_grid import KEYS

PATCHES_DTYPES = {"patches": "float32", "patch_coord": "int32", "patch_valid": "bool"}
# the TFLite file's: every input float32 (the row and column as whole numbers, the mask as 1 or 0), what LiteRT's
# Kotlin TensorBuffer.writeFloat writes; the graph casts them to the model's int32 and bool at once
TFLITE_DTYPES = {"patches": "float32", "patch_coord": "float32", "patch_valid": "float32"}


def input_specs(model, batch_size, max_patches, dtypes=PATCHES_DTYPES):
    """``tf.TensorSpec`` of each input (:data:`KEYS` order) at ``(batch_size, max_patches, ...)``; None: any."""
    import tensorflow as tf  # deferred: TensorFlow, not imported under the JAX and PyTorch backends

    (ph, pw), n = config_of(model).patch_size, max_patches
    shapes = {"patches": (batch_size, n, ph * pw * 3), "patch_coord": (batch_size, n, 2), "patch_valid": (batch_size, n)}
    return [tf.TensorSpec(shapes[key], dtypes[key], name=key) for key in KEYS]


def frozen_function(model, batch_size, max_patches):
    """The TFLite converter's input: the model at a fixed batch and budget, rank 4 at most, variables frozen."""
    import tensorflow as tf  # deferred: TensorFlow, as above
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    def call(patches, patch_coord, patch_valid):
        inputs = {"patches": patches, "patch_coord": patch_coord, "patch_valid": patch_valid}
        return tf.cast(model(inputs, training=False), tf.float32)

    fn = tf.function(call, input_signature=input_specs(model, batch_size, max_patches, TFLITE_DTYPES))
    with formulation.rank4(model):
        concrete = fn.get_concrete_function()
    return convert_variables_to_constants_v2(concrete)


def bytes_to_inputs(image_bytes, patch_size, max_patches, rule="timm"):
    """``(patches, coords, valid)`` of a batch of encoded images ``(batch,)`` string, in the graph: each decoded by
    the one decoder, then resized by the grid rule ``rule`` (the model's ``grid_rule``) under ``max_patches`` and
    cut, as ``keras-vit predict`` reads a file."""
    import tensorflow as tf  # deferred: TensorFlow, as above

    (ph, pw), n = patch_size if isinstance(patch_size, tuple) else (patch_size, patch_size), max_patches
    decode = decoding.traced_decode()  # the process's one trace of the decoder
    signature = (tf.TensorSpec((n, ph * pw * 3), tf.float32), tf.TensorSpec((n, 2), tf.int32), tf.TensorSpec((n,), tf.bool))
    return tf.map_fn(lambda data: naflex_input.image_to_patches(decode(data), (ph, pw), n, rule), image_bytes,
                     fn_output_signature=signature)


def build_archive(model, labels, top_k, max_patches):
    """A ``keras.export.ExportArchive`` with ``serving_default`` (the dict) and ``serving_bytes`` (encoded images,
    the grid rule in the graph at ``max_patches``)."""
    config = config_of(model)
    outputs_of = saved_model.signature_outputs(model, labels, top_k)
    patch = config.patch_size

    def serve(patches, patch_coord, patch_valid):
        inputs = {"patches": patches, "patch_coord": patch_coord, "patch_valid": patch_valid}
        return outputs_of(model(inputs, training=False))

    return saved_model.traced_archive(model, serve, input_specs(model, None, config.max_patches),
                                      lambda image_bytes: bytes_to_inputs(image_bytes, patch, max_patches, config.grid_rule))
