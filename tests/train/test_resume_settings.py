"""A resumed run keeps the settings stored with its backup: flags left out are taken from there, others refused."""

import contextlib
import csv
import io
import json
import shutil

import keras
import pytest

from helpers import image_folder
from keras_vit.train import backup as backup_lib
from keras_vit.train import config as config_lib
from keras_vit.train import job
from keras_vit.train import resumable


def _folder(root, per_class=10):
    return str(image_folder(root, per_class=per_class, size=(28, 28)))


def _run(config):
    stream = io.StringIO()
    with contextlib.redirect_stdout(stream):
        metrics = job.run(config)
    return metrics, stream.getvalue()


def _killed_run(out, dataset, monkeypatch, *, at_step, **settings):
    """``job.run`` killed (KeyboardInterrupt) after optimizer step ``at_step``, its backup of that step written."""

    def interrupted(model, train, *, callbacks, **options):
        class Kill(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                if int(self.model.optimizer.iterations.numpy()) == at_step:
                    raise KeyboardInterrupt("simulated kill")

        return resumable.fit_resumable(model, train, callbacks=[*callbacks, Kill()], **options)

    with monkeypatch.context() as patch:
        patch.setattr(job, "fit_resumable", interrupted)
        with pytest.raises(KeyboardInterrupt):
            _run(job.TrainConfig(dataset=dataset, output=str(out), verbose=0, tensorboard=False, **settings))


def shared_killed_run(factory, name, *, at_step, **settings):
    """One :func:`_killed_run` (and its image folder) for the tests of a module: ``(output, dataset)``, to be copied
    with :func:`copy_run` by each test that writes into it (the runs' settings name the dataset, not the output)."""
    root = factory.mktemp(name)
    dataset = _folder(root / "pets")
    _killed_run(root / "run", dataset, pytest.MonkeyPatch(), at_step=at_step, **settings)
    return root / "run", dataset


def copy_run(shared, tmp_path):
    """A copy of a :func:`shared_killed_run` output in ``tmp_path``: ``(output, dataset)``."""
    out = tmp_path / "run"
    shutil.copytree(shared[0], out)
    return out, shared[1]


# LoRA, accumulation and the EMA in one run: the killed_run fixture (tests/train/conftest.py) kills it after update 4
# of 6 once for this module and test_lora_training, and resumed_run resumes it once for both
RUN = dict(model="micro", epochs=2, steps_per_epoch=3, batch_size=4, accumulate=3, ema=0.9, lora=2, save_freq=1)


def test_resume_without_the_flags_continues_the_stored_run(resumed_run):
    """Issue 23 item 6: resumed without --accumulate 3 --ema 0.9, the run restarted at step 0 and lost log.csv's epoch."""
    out, stored, metrics, printed = (resumed_run[key] for key in ("out", "stored", "metrics", "printed"))
    assert stored["accumulate"] == 3 and stored["ema"] == 0.9 and stored["model"] == "micro"
    assert [r["epoch"] for r in csv.DictReader(resumed_run["log_before"].splitlines())] == ["0"]

    assert "resuming with the stored settings: " in printed
    assert "accumulate=3" in printed and "ema=0.9" in printed and "model=micro" in printed
    assert metrics["resumed_from_step"] == 4 and metrics["steps"] == 6
    assert (metrics["accumulate"], metrics["ema"], metrics["model"], metrics["batch_size"]) == (3, 0.9, "micro", 4)
    assert [r["epoch"] for r in csv.DictReader(open(out / "log.csv"))] == ["0", "1"]  # the first run's epoch kept


def test_resume_with_other_settings_is_refused_naming_each(tmp_path, killed_run, capsys):
    """Issue 23 items 6 and 11: other flags, or another --model, are refused before Keras reads the backup."""
    from keras_vit import cli

    out, dataset = copy_run(killed_run, tmp_path)
    before = {p.name: p.read_bytes() for p in (out / "backup").iterdir()}
    log = (out / "log.csv").read_text()

    with pytest.raises(ValueError, match=r"--accumulate: stored 3, given 2; --ema: stored 0\.9, given 0\.5"):
        job.run(job.TrainConfig(dataset=dataset, output=str(out), accumulate=2, ema=0.5))
    code = cli.main(["train", "--dataset", dataset, "--output", str(out), "--model", "tiny", "--no-tensorboard"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"The backup in {out / 'backup'} was made by another model: --model: stored 'micro', given 'tiny'" in err
    assert "could not be loaded" not in err and len(err) < 600, err
    # the same values given again are the stored run's: accepted, and not news
    resumed, taken = config_lib.reconcile(
        job.TrainConfig(model="micro", ema=0.90, accumulate=3), backup_lib.stored_settings(out / "backup"), where="b"
    )
    assert (resumed.accumulate, resumed.ema, resumed.batch_size) == (3, 0.9, 4) and not {"model", "ema", "accumulate"} & set(taken)
    assert {p.name: p.read_bytes() for p in (out / "backup").iterdir()} == before and (out / "log.csv").read_text() == log


def test_a_backup_of_another_model_without_stored_settings_is_one_line(tmp_path):
    """A backup from before the settings were stored: Keras' kilobytes of arrays become one line naming the file."""
    import keras_vit
    from keras_vit.train import model_setup, optimizers

    def compiled(**sizes):
        model = keras_vit.ViT(image_size=28, patch_size=7, num_layers=1, num_heads=2, mlp_dim=32, num_classes=2, **sizes)
        return model_setup.compile_model(model, optimizers.build_optimizer(1e-3, 10), 0.0)

    first = compiled(hidden_size=16)
    first.optimizer.build(first.trainable_variables)
    (tmp_path / "backup").mkdir()
    first.save_weights(tmp_path / "backup" / "latest.weights.h5")
    backup = backup_lib.Backup(str(tmp_path / "backup"))
    backup.set_model(compiled(hidden_size=32))
    with pytest.raises(ValueError, match=r"latest\.weights\.h5.*does not fit this model") as error:
        backup.restore()
    assert len(str(error.value)) < 600


def test_backup_metadata_holds_the_settings(tmp_path):
    settings = job.TrainConfig(model="micro").resolved().settings()
    assert set(settings) == set(config_lib.RUN_SETTINGS)
    (tmp_path / "latest.weights.h5").write_bytes(b"")
    (tmp_path / "training_metadata.json").write_text(json.dumps({"epoch": 0, "iterations": 3, "settings": settings}))
    assert backup_lib.stored_settings(tmp_path) == settings
    assert backup_lib.stored_settings(tmp_path / "nothing") is None
