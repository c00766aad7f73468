"""An any-size model of a patchify conv stem (``stem_strides``: timm's ConvStem, MobileCLIP's ``vit_base_mci_224``)
refuses images whose size is not a multiple of the stem's stride.

timm's ConvStem convolves with ``padding=0``: a 236 x 236 image gives ``vit_base_mci_224`` a 59 -> 29 -> 14 x 14
grid, while keras_vit's ``"same"`` padding gave 59 -> 30 -> 15 x 15 (a zero-padded row and column of patches): the
any-size model computed another model (5.4e-2 relative off timm 1.0.31 at 236, 5.0e-2 at 252) where the fixed-size
model (``ViTConfig.grid_for``) already refused the size.
"""

import numpy as np
import pytest

import keras_vit
from keras_vit.layers.patching import StemInputCheck


def _model(image_size=None, stem_strides=(4, 2)):
    return keras_vit.build_model(keras_vit.ViTConfig(
        image_size=image_size, native_image_size=32, stem="conv", stem_channels=(8, 8), stem_strides=stem_strides,
        patch_size=2, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=3))


def test_any_size_patchify_stem_refuses_a_size_its_stride_does_not_divide():
    model = _model()
    assert model(np.zeros((1, 48, 32, 3), "float32")).shape == (1, 3)  # 48 / 8 = 6 and 32 / 8 = 4: whole patches
    with pytest.raises(ValueError, match="stride 8 .its convolutions have no padding"):
        model(np.zeros((1, 44, 32, 3), "float32"))  # ceil(44 / 8) = 6 (the "same" rule) but timm's floor gives 5
    with pytest.raises(ValueError, match="divisible by the backbone stride times the patch size"):  # as before
        keras_vit.build_model(keras_vit.ViTConfig(image_size=(44, 32), stem="conv", stem_channels=(8, 8), stem_strides=(4, 2),
                                                  patch_size=2, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32))


def test_the_check_runs_in_the_graph_when_the_size_is_dynamic():
    model = _model()
    import tensorflow as tf

    run = tf.function(lambda x: model(x), input_signature=[tf.TensorSpec((None, None, None, 3), tf.float32)])
    assert tuple(run(tf.zeros((1, 48, 32, 3))).shape) == (1, 3)
    with pytest.raises(tf.errors.InvalidArgumentError, match="stride 8 .its convolutions have no padding"):
        run(tf.zeros((1, 44, 32, 3)))


def test_padded_conv_stems_keep_their_rule_and_config():
    model = _model(stem_strides=())  # the main job's 3 x 3 stem pads "same": ceil(H / 2) is its feature map
    assert model(np.zeros((1, 35, 36, 3), "float32")).shape == (1, 3)  # ceil(35 / 2) = 18
    assert "exact" not in model.get_layer("stem_input_check").get_config()
    layer = _model().get_layer("stem_input_check")
    assert layer.get_config()["exact"] is True
    assert StemInputCheck.from_config(layer.get_config()).exact
