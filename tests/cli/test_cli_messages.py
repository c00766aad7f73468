"""What the command prints for a model it cannot take: the reason and the way out on one line, exit status 2, no traceback."""

import pytest

from helpers import tiny_vit
from keras_vit import cli, saving


def _error(capsys, argv):
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and "Traceback" not in captured.out
    (line,) = [line for line in captured.err.splitlines() if line.startswith("keras-vit ")]
    return line


def test_info_of_a_folder_says_it_is_a_folder(tmp_path, capsys):
    line = _error(capsys, ["info", str(tmp_path)])
    assert f"{str(tmp_path)!r} is a folder, not a .keras model file" in line
    assert "not found" not in line  # it is there
    assert "keras-vit convert FOLDER" in line


@pytest.mark.parametrize(
    "name, says",
    [("vit.safetensors", "is a safetensors checkpoint: keras_vit.from_pretrained"),
     ("vit.npz", "is an original ViT checkpoint"),
     ("vit.tflite", "is a TFLite model: keras_vit.predict runs it"),
     ("notes.txt", "is no zip archive, which every .keras file is")],
)
def test_info_of_another_kind_of_file_names_its_kind(tmp_path, capsys, name, says):
    path = tmp_path / name
    path.write_bytes(b"\x00" * 64)
    line = _error(capsys, ["info", str(path)])
    assert f"Not a .keras model file: {str(path)!r} {says}" in line
    assert "Corrupt" not in line  # nothing is damaged: it is another kind of file


def test_info_of_a_hub_source_says_what_converts_it_and_a_bad_size_prints_no_table(capsys):
    line = _error(capsys, ["info", "hf://timm/vit_base_patch16_224.augreg_in21k"])
    assert "is a source of weights: keras-vit convert hf://timm/vit_base_patch16_224.augreg_in21k" in line
    assert "not found" not in line  # it was called a missing file
    assert cli.main(["info", "--image-size", "30"]) == 2
    assert "variant" not in capsys.readouterr().out  # the table's header was printed before the error


def test_a_damaged_keras_file_is_still_called_corrupt(tmp_path, capsys):
    path = tmp_path / "vit.keras"
    path.write_bytes(b"\x00" * 64)
    assert "Corrupt model file" in _error(capsys, ["info", str(path)])


@pytest.fixture(scope="module")
def quantized_file(tmp_path_factory):
    model = tiny_vit(num_classes=3)
    model.quantize("int8")
    path = str(tmp_path_factory.mktemp("state") / "int8.keras")
    saving.save_model(model, path)
    return path


_FLOAT_THEN_QUANTIZE = "the float model, then call model.quantize('int8'). Nothing was assigned or written"


@pytest.mark.parametrize(
    "argv, refusal, way_out",
    [(["resize", "MODEL", "--image-size", "48", "--output", "OUT/r.keras"], "Cannot resize model 'vit'",
      "Instead, resize " + _FLOAT_THEN_QUANTIZE),
     (["export", "MODEL", "--format", "keras-hub", "--output", "OUT/preset"],
      "Cannot export as a keras-hub preset model 'vit'", "Instead, export " + _FLOAT_THEN_QUANTIZE),
     # TFLite's converter quantizes the float model itself: refused before the resize the size asks for
     (["export", "MODEL", "--format", "tflite", "--image-size", "48", "--output", "OUT/m.tflite"],
      "Cannot export model 'vit' to TFLite", "Instead, export the float model with quantize='dynamic'")],
)
def test_a_quantized_model_is_refused_in_one_line(quantized_file, tmp_path, capsys, argv, refusal, way_out):
    argv = [a.replace("MODEL", quantized_file).replace("OUT", str(tmp_path)) for a in argv]
    line = _error(capsys, argv)
    assert f"{refusal}: it is quantized (int8," in line
    assert way_out in line and "Nothing was" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written


def test_info_refuses_the_table_sizes_with_a_model_and_describes_a_naflex_budget(tmp_path, capsys):
    """``info nf.keras --image-size 64`` printed the model as it is, the flag ignored; a NaFlex model's
    token count was its native grid's, not the budget it cuts images under."""
    import keras_vit

    model = keras_vit.ViT(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          num_classes=3, input_mode="naflex", max_patches=24)
    path = str(tmp_path / "nf.keras")
    saving.save_model(model, path)
    line = _error(capsys, ["info", path, "--image-size", "64"])
    assert "--image-size size the table of variants" in line and path in line
    assert "--num-classes size the table" in _error(capsys, ["info", "--presets", "--num-classes", "10"])
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "NaFlex, up to 24 patches (native 32x32), patch 8x8" in out
    assert "up to 25" in [line.split(None, 1)[1] for line in out.splitlines() if line.strip().startswith("tokens")][0]
