"""``keras-vit train --lora RANK``: LoRA factors and the head train, the run resumes exactly, settings are kept."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.models.lora import lora_layers
from keras_vit.train import backup as backup_lib
from keras_vit.train import config as config_lib
from keras_vit.train import job
from keras_vit.train import resumable
from test_resume_settings import copy_run


def _adapted_micro():
    model = keras_vit.ViT(image_size=28, patch_size=7, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=2)
    keras_vit.enable_lora(model, 2)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="categorical_crossentropy")
    resumable.build_optimizer_slots(model)  # as fit_resumable does: one trace of the step, not two
    return model


def test_a_lora_backup_restores_the_factors_that_keep_training(tmp_path):
    """The defect: the backup's weights file holds merged kernels and Keras zeroes both factors when it loads it,
    so a resumed --lora run had no gradient left for them (a silent stall); the backup keeps them unmerged."""
    images = np.random.default_rng(0).uniform(0, 255, (4, 28, 28, 3)).astype("float32")
    labels = np.eye(2, dtype="float32")[[0, 1, 0, 1]]
    model = _adapted_micro()
    backup = backup_lib.Backup(str(tmp_path / "backup"), save_freq=1)
    model.fit(images, labels, batch_size=2, epochs=1, callbacks=[backup], verbose=0)
    assert [p.name for p in (tmp_path / "backup").glob("lora-*.npz")] == ["lora-2.npz"]  # the older step's removed
    resumed = _adapted_micro()
    backup = backup_lib.Backup(str(tmp_path / "backup"), save_freq=1)
    backup.set_model(resumed)
    assert backup.restore() == 2
    np.testing.assert_allclose(np.asarray(resumed(images)), np.asarray(model(images)), rtol=1e-5, atol=1e-6)
    for restored, trained in zip(lora_layers(resumed), lora_layers(model)):
        np.testing.assert_array_equal(np.array(restored.lora_kernel_a), np.array(trained.lora_kernel_a))
        np.testing.assert_array_equal(np.array(restored.lora_kernel_b), np.array(trained.lora_kernel_b))
    before = [np.array(layer.lora_kernel_a) for layer in lora_layers(resumed)]
    resumed.fit(images, labels, batch_size=4, epochs=1, verbose=0)
    assert all(not np.array_equal(a, np.array(l.lora_kernel_a)) for a, l in zip(before, lora_layers(resumed)))
    (tmp_path / "backup" / "lora-2.npz").unlink()
    with pytest.raises(ValueError, match=r"has no LoRA factors .*lora-2\.npz"):
        backup.restore()


def test_train_lora_stores_the_rank_and_writes_a_merged_model(resumed_run):
    """The killed --lora 2 run (with accumulation and the EMA, tests/train/conftest.py) resumed without its flags."""
    printed = resumed_run["printed"]
    assert resumed_run["stored"]["lora"] == 2
    assert "lora=2" in printed and "LoRA of rank 2" in printed and resumed_run["metrics"]["resumed_from_step"] == 4
    assert not any("lora" in path for path in resumed_run["weights"])


def test_resume_with_another_lora_rank_is_refused(tmp_path, killed_run):
    out, dataset = copy_run(killed_run, tmp_path)
    with pytest.raises(ValueError, match=r"--lora: stored 2, given 4"):
        job.run(job.TrainConfig(dataset=dataset, output=str(out), lora=4))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(lora=0), r"`lora` must be .*Received: lora=0"),
        (dict(lora=2.5), r"`lora` must be .*Received: lora=2.5"),
        (dict(lora=2, freeze_blocks=1), r"--freeze-blocks has nothing left to freeze. Received: lora=2, freeze_blocks=1"),
    ],
)
def test_bad_lora_settings_are_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        config_lib.TrainConfig(**settings)


def test_the_lora_flag_takes_its_type_from_the_domain(capsys):
    from keras_vit import cli

    with pytest.raises(SystemExit):
        cli.main(["train", "--lora", "0"])
    assert "argument --lora: must be a positive int, got 0" in capsys.readouterr().err
