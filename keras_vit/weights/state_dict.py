"""What the ``.safetensors`` sources (timm, transformers) share: a state dict converted to the original keys
(:class:`StateDictSource`).
"""

import numpy as np

from keras_vit.weights.input_normalization import fold_normalization, read_normalization
from keras_vit.weights.source import Source


class StateDictSource(Source):
    """A :class:`~keras_vit.weights.source.Source` of ``.safetensors`` state dicts; a layout implements
    :meth:`matches`, :meth:`reading` and :meth:`convert`."""

    reads = "file or folder"

    def matches(self, keys):
        """Whether a state dict with these keys is of this layout."""
        raise NotImplementedError

    def reading(self, opened, architecture=None):
        """The :class:`~keras_vit.weights.source.Reading` of ``opened``'s ``config.json`` (and tensors)."""
        raise NotImplementedError

    def convert(self, tensors, reading, path):
        """``{original key: array}`` of ``{layout key: array}`` (arrays or stand-ins); it may add to
        ``reading.skipped`` and ``reading.notes``."""
        raise NotImplementedError

    def claims(self, opened):
        return self.matches(opened.keys())

    def _reading(self, opened, architecture):
        _, _, config_path = opened.state_dict()
        return read_normalization(opened.path, self.reading(opened, architecture), config_path)

    def describe(self, opened, architecture=None):
        tensors, _, config_path = opened.state_dict()
        path = opened.path
        reading = self._reading(opened, architecture)
        shapes = {k: tuple(v.shape) for k, v in self.convert(tensors.stand_ins(), reading, path).items()}
        return reading.info(path, self.name, shapes, config_path or path)

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        tensors, _, _ = opened.state_dict()
        reading = self._reading(opened, architecture)
        arrays = {k: np.asarray(v) for k, v in self.convert(tensors.arrays(), reading, opened.path).items()}
        return fold_normalization(arrays, reading.mean, reading.std, input_mean, input_std)
