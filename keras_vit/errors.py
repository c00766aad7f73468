"""The exception classes that several floors of keras_vit raise or catch, at the bottom so none imports another for them.

Every checkpoint reader, the loader, the model builders and the command line
raise or catch :class:`CheckpointError`; a preset's download raises
:class:`DownloadError` through the builders. Both are public as
``keras_vit.weights.CheckpointError`` / ``keras_vit.weights.DownloadError``
(and ``keras_vit.CheckpointError``).
"""


class CheckpointError(ValueError):
    """A checkpoint that cannot be read or does not fit the model."""


class DownloadError(OSError):
    """A preset's file could not be downloaded and is not in the cache."""
