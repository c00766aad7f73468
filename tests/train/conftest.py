"""What the training tests share."""

import pytest


@pytest.fixture(scope="session")
def killed_run(tmp_path_factory):
    """``(output, dataset)``: a `keras-vit train` job with LoRA, gradient accumulation and the weight EMA
    (test_resume_settings.RUN) killed after update 4 of 6, once for test_resume_settings and test_lora_training;
    a test that writes into it takes a copy (test_resume_settings.copy_run)."""
    from test_resume_settings import RUN, shared_killed_run

    return shared_killed_run(tmp_path_factory, "killed", at_step=4, **RUN)


@pytest.fixture(scope="session")
def resumed_run(killed_run, tmp_path_factory):
    """``killed_run`` resumed once without its flags, for the tests that read what the resumed run did: a dict of
    the output folder, the settings stored in the backup and log.csv as the kill left them, the metrics and the
    printed text (nothing may write into the folder)."""
    import keras_vit
    from keras_vit.train import backup as backup_lib
    from keras_vit.train import job
    from test_resume_settings import _run, copy_run

    out, dataset = copy_run(killed_run, tmp_path_factory.mktemp("resumed"))
    stored, log_before = backup_lib.stored_settings(out / "backup"), (out / "log.csv").read_text()
    metrics, printed = _run(job.TrainConfig(dataset=dataset, output=str(out), verbose=0, tensorboard=False))
    return dict(out=out, stored=stored, log_before=log_before, metrics=metrics, printed=printed,
                weights=[v.path for v in keras_vit.load_model(str(out / "model.keras")).weights])
