"""The tiny stand-ins the README and docs/ run on (tests/test_docs_run.py): the files a reader has, made offline.

:func:`build` writes, once per session, under one folder:

* ``inputs/``: what every block's working folder starts with -- ``flowers/`` (3 classes of coloured photos),
  ``photo.jpg``, ``cat.jpg``, ``photos/``, ``digit.png``, and the checkpoints the pages name, each a Ti/16 of
  random weights in its own layout (``ViT-Ti_16.npz`` in Google's, ``vit_small/`` and ``model.safetensors`` in
  timm's, ``vit-base-patch16-224/`` in transformers', ``path/to/vit_preset`` and ``path/to/dinov2_preset`` in
  keras-hub's);
* ``made/``: files a page takes as already made by an earlier step (``runs/mnist/model.keras``, ``model.keras``,
  ``vit.tflite``...), copied into a block's folder only when its row asks for them (:data:`MADE`);
* ``hf/``: an offline Hugging Face cache holding every ``hf://`` repository and named preset the pages load;
* ``mirror/``: a ``file://`` mirror of the preset bucket (``KERAS_VIT_WEIGHTS_URL``), with the Ti/16 file.

Every writer is the one the other tests use (tests/helpers.py, tests/foreign_files.py, the family tests' writers).
"""

import json
import os
import shutil
import sys

import numpy as np

import foreign_files
import helpers
import reference_keras_hub as khub

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights"))
import test_timm_family as timm_family  # noqa: E402  (its writer of timm's family layouts)
import test_transformers_family as transformers_family  # noqa: E402  (its writer of transformers' layouts)

# the stand-in of every paper variant: ViT-Ti/16 of ImageNet's head, saved at 224 (14 x 14 patches)
TI = dict(patch_size=16, hidden_size=192, num_layers=12, num_heads=3, mlp_dim=768, num_classes=1000, grid=(14, 14))
FLOWERS = {"tulips": (200, 30, 40), "daisy": (240, 240, 230), "roses": (30, 40, 200)}
TI_PRESET_FILE = "augreg/Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0--imagenet2012-steps_20k-lr_0.03-res_224.npz"
# made/ files: what a page takes as made by an earlier step (a block's row names the ones it needs)
MADE = ("runs/mnist/model.keras", "runs/flowers/model.keras", "model.keras", "vit.tflite", "model-any.keras",
        "naflex.keras")


def flowers(root, per_class=20, seed=0):
    """``root/{tulips,daisy,roses}/NN.jpg``: 48 x 48 photos of one colour each, with noise; returns ``root``."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name, color in FLOWERS.items():
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(per_class):
            pixels = np.clip(np.array(color) + rng.normal(0, 25, (48, 48, 3)), 0, 255).astype("uint8")
            Image.fromarray(pixels).save(folder / f"{i:02d}.jpg")
    return root


def _photo(path, color, size=(60, 50)):
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((*size, 3), color, "uint8")).save(path)


def _timm_config(architecture, size=224):
    return {"architecture": architecture, "num_classes": TI["num_classes"], "num_features": TI["hidden_size"],
            "global_pool": "token", "pretrained_cfg": {"input_size": [3, size, size], "num_classes": TI["num_classes"],
                                                       "mean": [0.5] * 3, "std": [0.5] * 3}}


def _ti_keras_hub_preset(folder):
    config = dict(image_shape=[224, 224, 3], patch_size=[16, 16], num_layers=TI["num_layers"], num_heads=TI["num_heads"],
                  hidden_dim=TI["hidden_size"], mlp_dim=TI["mlp_dim"])
    backbone, task = khub.random_preset_weights(config, num_classes=10)
    khub.write_preset(str(folder), config, backbone, task, {"pooling": "token", "num_classes": 10}, scale=[1 / 127.5] * 3,
                      offset=[-1.0] * 3)


def _inputs(root, ti):
    flowers(root / "flowers")
    _photo(root / "photo.jpg", FLOWERS["tulips"])
    _photo(root / "cat.jpg", (120, 90, 60))
    for i, color in enumerate(((10, 200, 10), (200, 200, 20))):
        _photo(root / "photos" / f"{i}.png", color)
    _photo(root / "digit.png", (0, 0, 0), size=(28, 28))
    helpers.save_npz(root / "ViT-Ti_16.npz", ti)
    foreign_files.timm_file(root / "vit_small", ti, _timm_config("vit_tiny_patch16_224"), num_layers=TI["num_layers"],
                            d=TI["hidden_size"])
    foreign_files.timm_file(root, ti, None, num_layers=TI["num_layers"], d=TI["hidden_size"])  # model.safetensors
    _transformers_ti(root / "vit-base-patch16-224", ti)
    _ti_keras_hub_preset(root / "path" / "to" / "vit_preset")
    kind = "DINOV2Backbone"
    config = khub.family_config(kind)
    khub.write_family_preset(str(root / "path" / "to" / "dinov2_preset"), kind, config, khub.family_weights(kind, config))


def _transformers_ti(folder, ti):
    foreign_files.transformers_folder(folder, ti, num_layers=TI["num_layers"], d=TI["hidden_size"], heads=TI["num_heads"],
                                      mlp=TI["mlp_dim"], num_classes=TI["num_classes"], patch_size=16, image_size=224)


def _hub(root, ti):
    """The offline Hugging Face cache: every repository the pages load, as a tiny stand-in in its own layout."""
    import safetensors.numpy

    snapshot = lambda repo: helpers.hf_snapshot(root, repo)  # noqa: E731
    _transformers_ti(snapshot("google/vit-base-patch16-224"), ti)
    timm_repo = snapshot("timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    timm_repo.mkdir(parents=True)
    safetensors.numpy.save_file(foreign_files.timm_state_dict(ti, num_layers=TI["num_layers"], d=TI["hidden_size"]),
                                str(timm_repo / "model.safetensors"))
    (timm_repo / "config.json").write_text(json.dumps(_timm_config("vit_tiny_patch16_224")))
    timm_family.write_timm(str(snapshot("timm/vit_small_patch14_dinov2.lvd142m")), "dinov2")
    timm_family.write_timm(str(snapshot("timm/vit_small_patch14_reg4_dinov2.lvd142m")), "dinov2_reg4")
    timm_family.write_timm(str(snapshot("timm/vit_base_patch16_siglip_224.webli")), "siglip")
    cases = transformers_family.CASES
    for repo, case in (("facebook/dinov2-small", "dinov2_swiglu_model"), ("google/siglip-base-patch16-224", "siglip")):
        model_type, config, processor, _ = cases[case]
        transformers_family.write_folder(str(snapshot(repo)), model_type, config, processor)
    _ti_keras_hub_preset(snapshot("someone/vit-keras-hub"))


def _trained_flowers_model(inputs):
    """A tiny ViT (32 x 32, patches of 8) trained to tell the three flower colours apart, with their names."""
    import keras

    import keras_vit

    data = keras_vit.load_dataset(str(inputs / "flowers"))
    keras.utils.set_random_seed(0)
    model = helpers.tiny_vit(num_classes=data.num_classes)
    head = model.get_layer("head")  # a zero head passes no gradient at first
    head.kernel.assign(np.random.default_rng(0).normal(0, 0.05, head.kernel.shape))
    model.compile(optimizer=keras.optimizers.Adam(3e-3), loss="categorical_crossentropy")
    pipeline = keras_vit.make_pipeline(data.train, 32, 16, training=True, num_classes=data.num_classes)
    model.fit(pipeline, epochs=8, verbose=0)
    return model, data.class_names


def _made(root, inputs):
    import export_helpers
    import keras_vit

    (root / "runs" / "mnist").mkdir(parents=True)
    digits = keras_vit.load_model(export_helpers.trained_model_path())
    keras_vit.save_model(digits, str(root / "runs/mnist/model.keras"),
                         metadata={"class_names": [str(i) for i in range(10)], "dataset": "mnist", "image_size": 32})
    model, names = _trained_flowers_model(inputs)
    (root / "runs" / "flowers").mkdir(parents=True)
    keras_vit.save_model(model, str(root / "runs/flowers/model.keras"), metadata={"class_names": names})
    shutil.copy(root / "runs/flowers/model.keras", root / "model.keras")
    keras_vit.save_model(keras_vit.resize_model(model, image_size=None), str(root / "model-any.keras"),
                         metadata={"class_names": names})
    keras_vit.export_model(str(root / "model.keras"), "tflite", str(root / "vit.tflite"), eval_data=str(inputs / "flowers"))
    naflex = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64,
                           num_classes=len(names), class_token=False, pooling="gap", input_mode="naflex")
    naflex.get_layer("head").kernel.assign(np.random.default_rng(0).normal(0, 0.05, naflex.get_layer("head").kernel.shape))
    keras_vit.save_model(naflex, str(root / "naflex.keras"), metadata={"class_names": names})  # a NaFlex model, untrained


def build(root):
    """Write every stand-in under ``root`` (a pathlib folder); returns ``root``."""
    ti = helpers.vit_checkpoint(**TI)
    _inputs(root / "inputs", ti)
    _hub(root, ti)
    mirror = root / "mirror" / TI_PRESET_FILE
    mirror.parent.mkdir(parents=True)
    helpers.save_npz(mirror, ti)
    _made(root / "made", root / "inputs")
    return root


def workspace(world, folder, made=()):
    """``folder`` filled with the world's inputs and the ``made`` files a block's row asks for; returns its environment."""
    shutil.copytree(world / "inputs", folder, dirs_exist_ok=True)
    for name in made:
        assert name in MADE, f"{name!r} is not one of the made stand-ins {MADE}"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(world / "made" / name, folder / name)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return dict(
        os.environ, PYTHONPATH=root, HF_HOME=str(world / "hf"), HF_HUB_OFFLINE="1", KERAS_HOME=str(folder / ".keras"),
        KERAS_VIT_WEIGHTS_URL=(world / "mirror").as_uri(), MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="2",
        CUDA_VISIBLE_DEVICES="", KERAS_BACKEND="tensorflow",
    )
