"""The hybrid R50+ViT-B/16 (and its R26 / four-stage relatives): shapes, parity, loading, saving, training."""

import types

import numpy as np
import pytest

import keras
import keras_vit
from keras.src import testing as keras_testing
import reference_hybrid as ref
from hybrid_helpers import CONV_SCALE, TINY_VIT, hybrid_checkpoint, tiny_hybrid
from helpers import images, original_names, run_fit_step_test, run_layer_test, run_saving_test, save_npz, vit_checkpoint
from keras_vit import cli
from keras_vit.layers import resnet
from keras_vit.architecture import variants as configs
from keras_vit.models import hybrid
from keras_vit.models import vit as models
from keras_vit.weights import POSEMB_KEY, CheckpointError


# --------------------------------------------------------------------------- counts


def hybrid_param_count(block_units, vit_width, depth, mlp, num_classes=1000, tokens=197, root=64):
    """Parameters from the layer shapes of ``models_resnet.py`` / ``models_vit.py``, nothing else.

    ResNet: conv_root 7*7*3*64 (no bias) + gn_root 2*64. A unit of width f fed c
    channels: conv1 c*f, conv2 3*3*f*f, conv3 f*4f (no biases), gn1..gn3 2f + 2f + 2*4f;
    the first unit of a stage adds conv_proj c*4f + gn_proj 2*4f. ViT: the 1x1
    embedding (C_out*D + D) on the feature map, cls D, posemb tokens*D, per block
    2 LayerNorms 4D, q/k/v/out 4(D*D + D), MLP D*mlp + mlp + mlp*D + D; encoder_norm
    2D; head D*classes + classes (no pre-logits: timm's ``vit_base_r50_s16_224``).
    For R50+ViT-B/16: ResNet 9,408 + 128 + block1 215,808 + block2 1,219,584
    + block3 10,449,920 = 11,894,848; ViT 787,200 + 768 + 151,296 + 12 * 7,087,872
    + 1,536 + 769,000 = 86,764,264; total 98,659,112.
    """
    total = 7 * 7 * 3 * root + 2 * root
    c = root
    for i, units in enumerate(block_units):
        f = root * 2**i
        for j in range(units):
            total += c * f + 9 * f * f + f * 4 * f + 2 * (f + f + 4 * f)
            if j == 0:
                total += c * 4 * f + 2 * 4 * f
            c = 4 * f
    d = vit_width
    total += c * d + d + d + tokens * d
    total += depth * (4 * d + 4 * (d * d + d) + d * mlp + mlp + mlp * d + d)
    return total + 2 * d + d * num_classes + num_classes


def test_r50_vit_b16_parameter_count():
    expected = hybrid_param_count((3, 4, 9), 768, 12, 3072)
    assert expected == 98_659_112  # the sum spelled out in hybrid_param_count's docstring
    assert keras_vit.count_hybrid_params((3, 4, 9), patch_size=1, **configs.VARIANTS["B"]) == expected
    model = keras_vit.R50ViTB16()  # built for real: ~3 s
    assert model.count_params() == expected
    assert model.output_shape == (None, 1000)
    assert model.get_layer("block3_unit9").output.shape == (None, 14, 14, 1024)  # stride 16, 1024 channels
    assert model.get_layer("patch_encoder").projection.kernel.shape == (1024, 768)
    assert model.get_layer("patch_encoder").num_patches == 196


def test_r26_vit_s32_four_stages_stride_32():
    model = keras_vit.R26ViTS32()
    assert model.get_layer("block4_unit2").output.shape == (None, 7, 7, 2048)
    assert model.count_params() == hybrid_param_count((2, 2, 2, 2), 384, 12, 1536, tokens=50)
    assert model.count_params() == keras_vit.count_hybrid_params((2, 2, 2, 2), patch_size=1, **configs.VARIANTS["S"])


@pytest.mark.parametrize(
    "units, width, size, patch, classes, top",
    [((1, 1), 0.5, 32, 1, 3, True), ((2, 1, 1), 0.5, (64, 96), 2, 5, True), ((), 0.5, 16, 2, 4, False), ((1,), 1, 24, 1, 7, True)],
)
def test_count_hybrid_params_equals_built_model(units, width, size, patch, classes, top):
    vit = dict(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=64, patch_size=patch)
    model = keras_vit.HybridViT(
        block_units=units, width=width, image_size=size, num_classes=classes, include_top=top, **vit
    )
    counted = keras_vit.count_hybrid_params(units, width, size, num_classes=classes, include_top=top, **vit)
    assert counted == model.count_params()


def test_r50_vit_l32_count_without_allocating():
    # the L Transformer of the original config (get_r50_l32_config); some timm versions built it B-sized
    assert hybrid_param_count((3, 4, 6, 3), 1024, 24, 4096, tokens=50) == 328_994_856
    assert keras_vit.count_hybrid_params((3, 4, 6, 3), patch_size=1, **configs.VARIANTS["L"]) == 328_994_856


def test_info_lists_every_builder_with_its_count(capsys):
    assert cli.main(["info"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0]  # the machine's lines follow after a blank line
    rows = {line.split()[0]: line.split() for line in table.splitlines()[1:]}
    assert set(rows) == set(models.BUILDERS) | set(hybrid.HYBRID_BUILDERS)
    assert rows["B/16"][5] == "86,567,656"
    assert rows["R50+B/16"][5] == "98,659,112"
    assert rows["R50+L/32"][5] == "328,994,856"


@pytest.mark.slow
def test_r50_vit_l32_for_real():
    model = keras_vit.R50ViTL32()
    assert model.count_params() == hybrid_param_count((3, 4, 6, 3), 1024, 24, 4096, tokens=50)


# --------------------------------------------------------------------------- layers vs the NumPy reference


@pytest.mark.parametrize("size,kernel,stride", [((17, 18), 7, 2), ((16, 16), 3, 2), ((15, 16), 1, 2), ((9, 9), 3, 1)])
def test_std_conv_matches_reference(size, kernel, stride):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, *size, 5)).astype("float32")
    layer = resnet.StdConv2D(6, kernel, strides=stride)
    layer.build(x.shape)
    w = rng.normal(0.0, 0.01, size=(kernel, kernel, 5, 6)).astype("float32")
    layer.kernel.assign(w)
    out = run_layer_test(layer, x)
    expected = np.stack([ref.std_conv(xi.astype(np.float64), w.astype(np.float64), stride) for xi in x])
    np.testing.assert_allclose(np.asarray(out), expected, atol=1e-4, rtol=1e-4)


def test_std_conv_padding_is_tf_same_not_symmetric():
    """Flax/TF SAME puts the odd pixel after: 224 -> 7x7/2 pads (2, 3), 8 -> 3x3/2 pads (0, 1).

    A symmetric pad (PyTorch's ``padding=k // 2``) shifts the sampling grid by one pixel.
    """
    assert ref.same_pads(224, 7, 2) == (2, 3) and ref.same_pads(8, 3, 2) == (0, 1)
    assert ref.same_pads(112, 3, 2) == (0, 1) and ref.same_pads(56, 1, 2) == (0, 0)
    rng = np.random.default_rng(5)
    x = rng.normal(size=(1, 8, 8, 2)).astype("float32")
    w = rng.normal(size=(3, 3, 2, 4)).astype("float32")
    layer = resnet.StdConv2D(4, 3, strides=2)
    layer.build(x.shape)
    layer.kernel.assign(w)
    out = np.asarray(layer(x))[0]
    same = ref.std_conv(x[0].astype(np.float64), w.astype(np.float64), 2)
    padded = np.pad(x[0].astype(np.float64), ((1, 1), (1, 1), (0, 0)))  # symmetric pad 1, then VALID
    symmetric = ref.conv2d(padded, ref.weight_standardize(w.astype(np.float64)), 2)[:4, :4]
    np.testing.assert_allclose(out, same, atol=1e-4)
    assert np.abs(out - symmetric).max() > 0.1


def test_group_norm_matches_reference():
    rng = np.random.default_rng(1)
    x = rng.normal(2.0, 0.01, size=(2, 5, 6, 64)).astype("float32")  # variance 1e-4: epsilon 1e-6 matters
    layer = resnet.group_norm("gn")
    layer.build(x.shape)
    scale, bias = rng.normal(1, 0.2, 64), rng.normal(0, 0.2, 64)
    layer.set_weights([scale, bias])
    expected = np.stack([ref.group_norm(xi.astype(np.float64), scale, bias) for xi in x])
    # one float32 ulp of the group mean (2.4e-7 at 2.0) moves the output by ~2.4e-5 x scale, and the mean's summation
    # order differs between vector widths: measured 4.2e-5 (AMD EPYC, AVX-512), up to 8.8e-5 for other orders (NumPy);
    # a one-pass variance (E[x^2] - E[x]^2 in float32) is off by 3e-2 here
    np.testing.assert_allclose(np.asarray(layer(x)), expected, atol=3e-4)


@pytest.mark.parametrize("channels,features,stride", [(64, 32, 1), (128, 32, 1), (128, 64, 2)])
def test_residual_unit_matches_reference(channels, features, stride):
    rng = np.random.default_rng(2)
    x = np.abs(rng.normal(size=(2, 7, 8, channels))).astype("float32")
    unit = resnet.ResidualUnit(features, strides=stride)
    out = run_layer_test(unit, x)
    assert (unit.conv_proj is not None) == (channels != 4 * features or stride != 1)
    p = {}
    for name in ("conv1", "conv2", "conv3", "conv_proj"):
        layer = getattr(unit, name)
        if layer is not None:
            p[f"{name}/kernel"] = rng.normal(0, CONV_SCALE, size=layer.kernel.shape)
            layer.kernel.assign(p[f"{name}/kernel"])
    for name in ("gn1", "gn2", "gn3", "gn_proj"):
        layer = getattr(unit, name)
        if layer is not None:
            p[f"{name}/scale"] = rng.normal(1, 0.3, layer.gamma.shape)
            p[f"{name}/bias"] = rng.normal(0, 0.3, layer.gamma.shape)
            layer.set_weights([p[f"{name}/scale"], p[f"{name}/bias"]])
    expected = np.stack([ref.residual_unit(xi.astype(np.float64), p, features, stride) for xi in x])
    out = np.asarray(unit(x))
    assert out.shape == expected.shape == (2, -(-7 // stride), -(-8 // stride), 4 * features)
    np.testing.assert_allclose(out, expected, atol=1e-4 * np.abs(expected).max())


class ResNetLayersInKerasHarness(keras_testing.TestCase):
    """Keras' own layer test (serialisation, build, symbolic and eager calls, a fit step, mixed_float16), tiny shapes."""

    def test_std_conv(self):
        self.run_layer_test(
            resnet.StdConv2D,
            init_kwargs=dict(filters=4, kernel_size=3, strides=2),
            input_shape=(2, 7, 8, 3),
            expected_output_shape=(2, 4, 4, 4),
            expected_num_trainable_weights=1,
            expected_num_non_trainable_weights=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    def test_residual_unit_identity_shortcut(self):
        self.run_layer_test(
            resnet.ResidualUnit,
            init_kwargs=dict(features=32),
            input_shape=(2, 5, 6, 128),
            expected_output_shape=(2, 5, 6, 128),
            expected_num_trainable_weights=9,  # conv1..3 kernels, gn1..3 scale and bias
            expected_num_non_trainable_weights=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )

    def test_residual_unit_projection(self):
        self.run_layer_test(
            resnet.ResidualUnit,
            init_kwargs=dict(features=32, strides=2),
            input_shape=(2, 5, 6, 64),
            expected_output_shape=(2, 3, 3, 128),
            expected_num_trainable_weights=12,  # + conv_proj kernel, gn_proj scale and bias
            expected_num_non_trainable_weights=0,
            run_training_check=True,
            run_mixed_precision_check=True,
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(features=48), r"multiple of the 32 GroupNorm groups\. Received: features=48"),
        (dict(features=16), r"Received: features=16"),
        (dict(features=0), r"positive int\. Received: features=0"),
        (dict(features=32, strides=0), r"Received: strides=0"),
    ],
)
def test_residual_unit_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        resnet.ResidualUnit(**kwargs)


def test_fresh_unit_is_identity_plus_shortcut():
    """gn3's scale starts at zero (models_resnet: scale_init=zeros): a fresh identity unit is relu(x)."""
    x = np.random.default_rng(3).normal(size=(1, 4, 4, 128)).astype("float32")
    np.testing.assert_allclose(np.asarray(resnet.ResidualUnit(32)(x)), np.maximum(x, 0), atol=1e-6)


@pytest.fixture(scope="module")
def default_hybrid(tmp_path_factory):
    """The tiny hybrid (R50+ViT-B/16's three stages) with the default checkpoint loaded, its 64x64 inputs and the
    reference's logits for them: built, loaded and computed once for the tests that read them (none writes to it)."""
    arrays = hybrid_checkpoint()
    path = save_npz(tmp_path_factory.mktemp("hybrid") / "R.npz", arrays)
    x = images(2, 64)
    return types.SimpleNamespace(arrays=arrays, path=path, model=tiny_hybrid(weights=path), x=x,
                                 logits=ref.hybrid_logits(x, arrays, (2, 1, 1)))


def test_root_and_first_stage_match_reference(default_hybrid):
    arrays, model, x = default_hybrid.arrays, default_hybrid.model, default_hybrid.x
    probe = keras.Model(model.input, [model.get_layer("pool_root").output, model.get_layer("block1_unit2").output])
    root, stage1 = (np.asarray(t) for t in probe(x))
    for i, image in enumerate(x.astype(np.float64) / 127.5 - 1.0):
        expected_root = ref.root(image, arrays)
        assert root[i].shape == expected_root.shape == (16, 16, 32)
        np.testing.assert_allclose(root[i], expected_root, atol=1e-4 * np.abs(expected_root).max())
        expected = ref.stage(expected_root, arrays, 1, 2, 32)
        assert stage1[i].shape == expected.shape == (16, 16, 128)
        np.testing.assert_allclose(stage1[i], expected, atol=1e-4 * np.abs(expected).max())


# --------------------------------------------------------------------------- whole model, original checkpoint


@pytest.mark.parametrize(
    "units,width,patch,size,grid",
    [
        ((2, 1, 1), 0.5, 1, 64, (4, 4)),  # R50+ViT-B/16 shape: three stages, stride 16
        ((1, 1, 1, 1), 0.5, 1, 64, (2, 2)),  # R26 / R50+L/32 shape: four stages, stride 32
        ((), 0.5, 2, 32, (4, 4)),  # root only (R+ViT-Ti/16 of the original configs), patch 2
    ],
)
def test_whole_model_parity_with_reference(tmp_path, units, width, patch, size, grid, request):
    if (units, width, patch, size, grid) == ((2, 1, 1), 0.5, 1, 64, (4, 4)):  # the defaults: the shared model
        shared = request.getfixturevalue("default_hybrid")
        arrays, model, x, expected = shared.arrays, shared.model, shared.x, shared.logits
    else:
        arrays = hybrid_checkpoint(block_units=units, width=width, grid=grid, patch_size=patch)
        model = tiny_hybrid(block_units=units, width=width, patch_size=patch, image_size=size,
                            weights=save_npz(tmp_path / "R.npz", arrays))
        x = images(2, size)
        expected = ref.hybrid_logits(x, arrays, units)
    out = np.asarray(model(x))
    np.testing.assert_allclose(out, expected, atol=1e-4 * np.abs(expected).max(), rtol=0)
    assert sorted(model.load_report.loaded) == sorted(arrays)
    assert not model.load_report.unused and not model.load_report.skipped


@pytest.mark.parametrize("gn_layout,naming,representation_size", [("old", "original", 24), ("new", "flax", None)])
def test_checkpoint_layouts(tmp_path, gn_layout, naming, representation_size):
    arrays = hybrid_checkpoint(gn_layout=gn_layout, naming=naming, representation_size=representation_size)
    model = tiny_hybrid(weights=save_npz(tmp_path / "R.npz", arrays))
    if representation_size:
        assert model.get_layer("pre_logits").units == representation_size
    if gn_layout == "old":
        assert arrays["gn_root/scale"].shape == (1, 1, 1, 32)
        np.testing.assert_array_equal(np.asarray(model.get_layer("gn_root").gamma), arrays["gn_root/scale"].reshape(-1))
    x = images(2, 64)
    expected = ref.hybrid_logits(x, original_names(arrays), (2, 1, 1))
    np.testing.assert_allclose(np.asarray(model(x)), expected, atol=1e-4 * np.abs(expected).max(), rtol=0)


def test_position_embeddings_resized_on_the_feature_grid(tmp_path):
    arrays = hybrid_checkpoint(grid=(4, 4))  # 64 px / 16
    model = tiny_hybrid(image_size=96, weights=save_npz(tmp_path / "R.npz", arrays), num_classes=3)
    posemb = np.asarray(model.get_layer("patch_encoder").position_embedding)
    assert posemb.shape == (1, 6 * 6 + 1, 32)  # grid = 96 / 16
    assert model.load_report.resized[POSEMB_KEY] == ((1, 17, 32), (1, 37, 32))
    assert set(model.load_report.skipped) == {"head/kernel", "head/bias"}
    np.testing.assert_array_equal(posemb[0, 0], arrays[POSEMB_KEY][0, 0])
    assert np.all(np.isfinite(np.asarray(model(images(1, 96)))))


def test_missing_unit_names_the_key(tmp_path):
    arrays = hybrid_checkpoint()
    del arrays["block1/unit2/gn2/scale"]
    path = save_npz(tmp_path / "R.npz", arrays)
    model = tiny_hybrid()
    before = [np.asarray(w).copy() for w in model.weights]
    with pytest.raises(CheckpointError, match=r"block1/unit2/gn2/scale \(model expects \(32,\)\)"):
        keras_vit.load_checkpoint(model, path)
    for w, b in zip(model.weights, before):  # nothing written
        np.testing.assert_array_equal(np.asarray(w), b)
    with pytest.raises(CheckpointError, match=r"block1/unit2/gn2/scale"):
        tiny_hybrid(weights=path)


def test_missing_whole_unit_and_wrong_stage_count(tmp_path):
    arrays = hybrid_checkpoint(block_units=(2, 1, 1))
    short = {k: v for k, v in arrays.items() if not k.startswith("block1/unit2/")}
    path = save_npz(tmp_path / "short.npz", short)
    message = r"\(1, 1, 1\) units, the model \(2, 1, 1\): key 'block1/unit2/conv1/kernel' is missing"
    with pytest.raises(CheckpointError, match=message):
        tiny_hybrid(weights=path)
    with pytest.raises(CheckpointError, match=r"block1/unit2/conv1/kernel"):
        keras_vit.load_checkpoint(tiny_hybrid(), path)
    four = save_npz(tmp_path / "four.npz", hybrid_checkpoint(block_units=(2, 1, 1, 1), grid=(2, 2)))
    with pytest.raises(CheckpointError, match=r"key 'block4/unit1/conv1/kernel' is unexpected"):
        tiny_hybrid(weights=four)
    # straight through the loader, the first key that does not fit is named (here the wider embedding)
    with pytest.raises(CheckpointError, match=r"'embedding/kernel': checkpoint has \(1, 1, 1024, 32\)"):
        keras_vit.load_checkpoint(tiny_hybrid(), four)


_LOAD_WITHOUT_THE_HYBRID_MODULE = """
import json, sys
import numpy as np
import keras
import keras_vit.layers
from keras_vit.saving import load_model
from keras_vit.weights import load_checkpoint, targets_of

model = load_model(sys.argv[1] + "/hybrid.keras")
arrays = {key: np.asarray(t.variable).reshape(t.shape) for key, t in targets_of(model).items()}
for variable in model.weights:
    variable.assign(np.zeros(variable.shape))
report = load_checkpoint(model, arrays)
x = np.load(sys.argv[1] + "/inputs.npy")[:, :32, :32]
error = float(np.abs(np.asarray(model(x)) - np.asarray(json.load(open(sys.argv[1] + "/outputs.json"))["hybrid"])).max())
print(json.dumps(dict(loaded=len(report.loaded), weights=len(model.weights), error=error,
                      hybrid_imported="keras_vit.models.hybrid" in sys.modules)))
"""


def test_hybrid_mapping_does_not_depend_on_importing_the_hybrid_module():
    """The loader picks the ResNet mapping because the model has a ResNet stem, not because hybrid.py registered it.

    In a fresh process that never imports keras_vit.models.hybrid: the 0.1.0 hybrid fixture's weights, written
    out as checkpoint arrays, load back into the zeroed model and give the outputs it computed then.
    """
    import json
    import os
    import subprocess
    import sys

    fixtures = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "v0.1.0")
    run = subprocess.run(
        [sys.executable, "-c", _LOAD_WITHOUT_THE_HYBRID_MODULE, fixtures], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert not result["hybrid_imported"]
    assert result["loaded"] == result["weights"] == 51
    assert result["error"] < 1e-5  # same weights, same graph: float32 rounding only


def test_loading_into_a_model_read_from_keras_file(tmp_path, default_hybrid):
    """Keys map to variable paths, which a .keras round trip keeps."""
    tiny_hybrid().save(tmp_path / "fresh.keras")
    model = keras_vit.load_model(tmp_path / "fresh.keras")
    report = keras_vit.load_checkpoint(model, default_hybrid.path)
    assert sorted(report.loaded) == sorted(default_hybrid.arrays)
    expected = default_hybrid.logits  # the reference's, for default_hybrid.x
    np.testing.assert_allclose(np.asarray(model(default_hybrid.x)), expected, atol=1e-4 * np.abs(expected).max(), rtol=0)


def test_plain_and_hybrid_checkpoints_do_not_mix(tmp_path):
    plain = save_npz(tmp_path / "ViT.npz", vit_checkpoint(patch_size=8))
    with pytest.raises(CheckpointError, match="conv_root/kernel"):
        tiny_hybrid(weights=plain)
    hybrid_path = save_npz(tmp_path / "R.npz", hybrid_checkpoint())
    with pytest.raises(CheckpointError, match="conv_root/kernel|embedding/kernel"):
        keras_vit.ViT(image_size=64, patch_size=16, num_classes=5, **TINY_VIT, weights=hybrid_path)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"block_units=\(3, 0\)"):
        tiny_hybrid(block_units=(3, 0))
    with pytest.raises(ValueError, match=r"width=0.3"):
        tiny_hybrid(width=0.3)
    with pytest.raises(ValueError, match=r"image_size=72"):
        tiny_hybrid(image_size=72)
    with pytest.raises(ValueError, match=r"pooling='median'"):
        tiny_hybrid(pooling="median")


# --------------------------------------------------------------------------- Keras contract


def test_builders_share_the_vit_signature():
    import inspect

    hybrid_args = list(inspect.signature(keras_vit.R50ViTB16).parameters)
    # and the ResNet's own switch: its normalisation constants (timm's hybrid weights take timm's)
    assert [name for name in hybrid_args if name != "resnet_norms"] == list(inspect.signature(keras_vit.ViTB16).parameters)
    assert "resnet_norms" in hybrid_args


def test_headless_and_gap_variants():
    x = images(2, 64)
    tokens = tiny_hybrid(include_top=False, pooling=None)
    assert np.asarray(tokens(x)).shape == (2, 17, 32)
    gap = tiny_hybrid(pooling="gap")
    assert not gap.get_layer("patch_encoder").class_token
    assert np.asarray(gap(x)).shape == (2, 5)


def test_saving_round_trip_safe_mode(tmp_path):
    model = tiny_hybrid(weights=save_npz(tmp_path / "R.npz", hybrid_checkpoint(representation_size=16)))
    loaded = run_saving_test(model, images(2, 64), tmp_path, atol=1e-5)
    assert isinstance(loaded.get_layer("block1_unit1"), resnet.ResidualUnit)
    assert loaded.get_layer("block1_unit1").conv_proj is not None
    assert loaded.get_layer("block1_unit2").conv_proj is None


def test_fit_step_every_weight_gets_gradient():
    # one stage of two units: every kind of hybrid weight (root, a unit with its projection, an identity unit, the
    # 1x1 embedding, the Transformer, the head) at the least tracing of a train step (each unit adds ~2 s)
    model = tiny_hybrid(block_units=(2,), image_size=32, classifier_activation="softmax", dropout=0.1,
                        drop_path_rate=0.1)
    units = [layer for layer in model.layers if isinstance(layer, resnet.ResidualUnit)]
    assert [unit.conv_proj is not None for unit in units] == [True, False]
    for unit in units:  # gn3 starts at zero scale, which blocks the residual branch's gradient
        unit.gn3.gamma.assign(np.ones(unit.gn3.gamma.shape))
    run_fit_step_test(model, images(4, 32), 5)


# --------------------------------------------------------------------------- mixed precision


@pytest.fixture
def restore_policy():
    yield
    keras.config.set_dtype_policy("float32")


# the largest |16-bit - float32| logit as a share of the largest float32 logit: measured 0.009 (float16) and 0.046
# (bfloat16) for the hybrid, 0.002 and 0.021 for the ViT (AMD EPYC, AVX-512 with native bfloat16). Mostly the
# rounding of weights and activations to 11 or 8 significant bits, the same on every CPU; the kernels (native,
# emulated bfloat16 or Eigen) add their own order of sums, so each bar leaves 4-5x
BARS_16_BIT = {("hybrid", "mixed_float16"): 0.04, ("hybrid", "mixed_bfloat16"): 0.2,
               ("vit", "mixed_float16"): 0.01, ("vit", "mixed_bfloat16"): 0.1}


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("kind", ["hybrid", "vit"])
def test_mixed_precision_close_to_float32(tmp_path, restore_policy, policy, kind, request):
    if kind == "hybrid":
        shared = request.getfixturevalue("default_hybrid")  # built in float32 (outside this test's policy)
        path, size = shared.path, 64
    else:
        path, size = save_npz(tmp_path / "V.npz", vit_checkpoint()), 32

    def build():
        if kind == "hybrid":
            return tiny_hybrid(weights=path)
        return keras_vit.ViT(image_size=32, patch_size=8, num_classes=5, classifier_activation=None, weights=path,
                             **TINY_VIT)

    x = images(2, size)
    expected = np.asarray((shared.model if kind == "hybrid" else build())(x))
    keras.config.set_dtype_policy(policy)
    model = build()
    out = model(x)
    assert all(w.dtype == "float32" for w in model.weights)  # master weights stay float32
    norm_types = (keras.layers.GroupNormalization, keras.layers.LayerNormalization)
    norms = [layer for layer in model.layers if isinstance(layer, norm_types)]
    assert norms and all(layer.dtype_policy.name == policy for layer in norms)
    out = np.asarray(keras.ops.cast(out, "float32"))
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, expected, atol=BARS_16_BIT[kind, policy] * np.abs(expected).max(), rtol=0)


def test_norm_statistics_in_float32(restore_policy):
    """Under mixed_float16, inputs whose squares overflow float16 (x ~ 300, x^2 > 65504) still normalise."""
    keras.config.set_dtype_policy("mixed_float16")
    rng = np.random.default_rng(4)
    x = (300.0 + 30.0 * rng.normal(size=(1, 4, 4, 64))).astype("float32")
    gn = resnet.group_norm("gn")
    out = np.asarray(keras.ops.cast(gn(x), "float32"))
    expected = ref.group_norm(x[0].astype(np.float64), np.ones(64), np.zeros(64))
    # float16 outputs of order 1-3 (11 significant bits; measured 1e-3); statistics taken in float16 overflow
    np.testing.assert_allclose(out[0], expected, atol=0.02)
    ln = keras.layers.LayerNormalization(epsilon=1e-6)
    out = np.asarray(keras.ops.cast(ln(x.reshape(1, 16, 64)), "float32"))
    tokens = x.reshape(16, 64).astype(np.float64)
    expected = (tokens - tokens.mean(-1, keepdims=True)) / tokens.std(-1, keepdims=True)
    np.testing.assert_allclose(out[0], expected, atol=0.02)
    conv = resnet.StdConv2D(8, 3)
    assert keras.backend.standardize_dtype(conv(x).dtype) == "float16"
    assert conv.kernel.dtype == "float32"
