"""The checkpoint dispatcher is a loop over a registry of sources: the first that claims a path reads it."""

import numpy as np
import pytest

from keras_vit.errors import CheckpointError
from keras_vit.weights import formats
from keras_vit.weights.source import CheckpointInfo, Source


class FakeSource(Source):
    """Reads ``*.fake`` files (one class token of ones); records every path it was asked about."""

    name = "fake"

    def __init__(self):
        self.asked = []

    def claims(self, opened):
        self.asked.append(opened.path)
        return opened.path.endswith(".fake")

    def describe(self, opened, architecture=None):
        return CheckpointInfo(path=opened.path, format=self.name, shapes={"cls": (1, 1, 8)})

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        return {"cls": np.ones((1, 1, 8), np.float32)}


@pytest.fixture
def registry(monkeypatch):
    monkeypatch.setattr(formats, "SOURCES", list(formats.SOURCES))
    return formats.SOURCES


def _files(tmp_path):
    fake = tmp_path / "w.fake"
    fake.write_bytes(b"not a checkpoint of any built-in kind")
    npz = tmp_path / "w.npz"
    np.savez(npz, cls=np.zeros((1, 1, 8)))
    return str(fake), str(npz)


def test_a_registered_source_reads_its_own_files_and_no_other(registry, tmp_path):
    fake_path, npz_path = _files(tmp_path)
    with pytest.raises(CheckpointError, match="neither an .npz archive nor a .safetensors file"):
        formats.describe(fake_path)  # no source reads it yet
    first = formats.register(FakeSource(), first=True)
    info = formats.describe(fake_path)
    assert (info.format, info.shapes) == ("fake", {"cls": (1, 1, 8)})
    np.testing.assert_allclose(formats.read(fake_path)["cls"], np.ones((1, 1, 8)), rtol=0, atol=0)
    # the built-in sources still read theirs, after the new one said no
    assert formats.describe(npz_path).format == "npz"
    assert first.asked == [fake_path, fake_path, npz_path]


def test_the_first_source_that_claims_a_path_reads_it(registry, tmp_path):
    """A source registered last is never asked about a path an earlier one claims."""
    fake_path, npz_path = _files(tmp_path)
    last = formats.register(FakeSource())
    assert registry[-1] is last
    assert formats.describe(npz_path).format == "npz"
    assert formats.describe(fake_path).format == "fake"  # every built-in source said no first
    assert last.asked == [fake_path]


def test_register_takes_sources_only(registry):
    with pytest.raises(TypeError, match="register\\(\\) takes a keras_vit.weights.source.Source"):
        formats.register(object())


def test_a_quantized_keras_file_is_refused_by_name_as_a_checkpoint(tmp_path):
    """An int8 ``.keras`` holds integer kernels and scales, not float weights: from_pretrained names the
    quantization and the way out (keras_vit.load_model), which loads it as it is."""
    import keras_vit
    from keras_vit.weights import CheckpointError

    model = keras_vit.ViT(image_size=32, patch_size=16, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
                          num_classes=3)
    model.quantize("int8")
    path = str(tmp_path / "int8.keras")
    model.save(path)
    with pytest.raises(CheckpointError, match=r"quantized \(int8.*keras_vit\.load_model"):
        keras_vit.from_pretrained(path)
    assert keras_vit.load_model(path).count_params() == model.count_params()
