"""Pickle files are refused, never unpickled: which files they are, and the error that says what to use instead.

PyTorch's ``.bin``, ``.pth``, ``.pt``, ``.ckpt`` (and ``.pkl``, ``.pickle``) and
``torch.save`` zip archives run code when unpickled; keras_vit reads weights
only from ``.npz``, ``.safetensors`` and ``.keras`` files.
"""

from keras_vit.errors import CheckpointError

PICKLE_SUFFIXES = (".bin", ".pth", ".pt", ".ckpt", ".pkl", ".pickle")


def refuse_pickle(path, what=None):
    """Raise the ``CheckpointError`` that refuses ``path``: ``what`` it is (default: a pickle file) and what to use instead."""
    raise CheckpointError(
        f"Checkpoint {path!r} is {what or 'a pickle file (PyTorch .bin/.pth)'}: keras_vit never unpickles weights. "
        "Use the .safetensors file that the same model publishes (model.safetensors on the Hugging Face Hub), "
        "or save one with safetensors.torch.save_file(model.state_dict(), 'model.safetensors')."
    )
