"""One kind of checkpoint: the :class:`Source` interface, the typed :class:`Reading` every reader returns, and
:class:`CheckpointInfo`, what :func:`keras_vit.weights.formats.describe` hands on (how a source is written:
docs/architecture.md, "Adding a weight source"). This module imports no source: the sources import it.
"""

import copy
import dataclasses

from keras_vit.errors import CheckpointError
from keras_vit.weights.config import check_against_weights, has_query_bias
from keras_vit.weights.declared import declare


@dataclasses.dataclass
class NaFlexForm:
    """How a source whose model runs at its native grid and at any other (SigLIP 2's) reads as keras_vit's NaFlex
    model, asked for by ``from_pretrained(..., max_patches=N)`` or ``input_mode="naflex"``.

    Attributes:
        declared: ``{ViTConfig field: Declaration}`` that replace the source's own (``input_mode``, ``grid_rule``...).
        position_resampling: the rule that resamples the position table to each image's grid.
        note: a sentence for the load report.
    """

    declared: dict
    position_resampling: str
    note: str


@dataclasses.dataclass(kw_only=True)
class Said:
    """What a source's files say beyond the tensors, the fields :class:`Reading` and :class:`CheckpointInfo` share.

    Attributes:
        declared: ``{ViTConfig field: Declaration}`` (:mod:`keras_vit.weights.declared`): the architecture, each
            field with the place of the file that says it; compared with the model's before a load.
        architecture: the timm model name, transformers class or keras-hub class, if known.
        tag: the pretrained tag of a timm file, if known.
        class_names: names of the head's outputs, or None.
        mean, std: the input normalisation the weights were trained with (None: keras_vit's [-1, 1]).
        notes: sentences for the load report (where the normalisation comes from, a zero bias standing in...).
        skipped: ``{keys: reason}`` of the tensors left out on purpose (a text tower, a decoder).
        position_resampling: the source's rule for resampling its position embeddings, or None (the model's).
        classifier_activation: ``(activation, said)`` when the source declares its head's activation, else ``()``.
        naflex: a :class:`NaFlexForm` where the source's model also takes each image at its own grid, else None.
    """

    declared: dict = dataclasses.field(default_factory=dict)
    architecture: str | None = None
    tag: str | None = None
    class_names: list | None = None
    mean: list | None = None
    std: list | None = None
    notes: list = dataclasses.field(default_factory=list)
    skipped: dict = dataclasses.field(default_factory=dict)
    position_resampling: str | None = None
    classifier_activation: tuple = ()
    naflex: NaFlexForm | None = None

    num_heads = property(lambda self: self.declared["num_heads"].value if "num_heads" in self.declared else None)
    layer_norm_epsilon = property(
        lambda self: self.declared["layer_norm_epsilon"].value if "layer_norm_epsilon" in self.declared else None)


@dataclasses.dataclass(kw_only=True)
class Reading(Said):
    """What a source's files say beyond the tensors: one typed result, whatever the layout (:class:`Said`), and

    Attributes:
        expected: ``[(quantity, said, value), ...]``: the sizes the files state, checked against the weights'
            shapes (:func:`keras_vit.weights.config.check_against_weights`).
        layout: the source's own conversion switches (a typed object of that source, read by its
            :meth:`Source.arrays` only), or None.

    Example:
    >>> from keras_vit.weights.declared import declare
    >>> Reading(declared=declare({}, "num_heads", 4, "num_heads=4", "config.json")).num_heads
    4
    """

    expected: list = dataclasses.field(default_factory=list)
    layout: object = None

    def info(self, path, format, shapes, origin):
        """The :class:`CheckpointInfo` of this reading with the weights' ``shapes``: checked against the sizes the files
        state (:func:`~keras_vit.weights.config.check_against_weights`), the heads against their width; without query
        biases (zeros stand in for none) ``qkv_bias=False`` declared, the model must have none; the position grid from
        the image size the files state. ``origin`` is named in errors."""
        check_against_weights(self.expected, shapes, origin, self.declared)
        declared = dict(self.declared)
        if not has_query_bias(shapes):
            declare(declared, "qkv_bias", False, "no query/key/value bias tensors (qkv_bias=False)", path)
        kernel = shapes.get("embedding/kernel", (None,) * 4)
        heads = self.num_heads
        if heads is not None and (isinstance(heads, bool) or not isinstance(heads, int) or heads < 1):
            said = self.declared["num_heads"]  # a timm model_args.num_heads of "3" or 0 (transformers' are checked as read)
            raise CheckpointError(f"{said.origin!r}: {said.said}, expected a positive integer (the attention heads).")
        if heads is not None and kernel[3] is not None and kernel[3] % heads:
            raise CheckpointError(f"{origin!r}: {self.num_heads} heads do not divide the width {kernel[3]} of the weights.")
        size = next((tuple(value) for quantity, _, value in self.expected if quantity == "image_size"), None)
        grid = (size[0] // kernel[0], size[1] // kernel[1]) if size and len(kernel) == 4 and kernel[0] else None
        shared = {field.name: copy.copy(getattr(self, field.name)) for field in dataclasses.fields(Said)}
        return CheckpointInfo(**{**shared, "declared": declared}, path=path,
                              format=format, shapes=shapes, grid=grid, image_size=size)


@dataclasses.dataclass(kw_only=True)
class CheckpointInfo(Said):
    """What a checkpoint holds, read without its tensor data: what its files say (:class:`Said`), and

    Attributes:
        path: the file or folder.
        format: the :attr:`Source.name` that read it (``"npz"``, ``"timm"``, ``"transformers"``, ``"keras"``...).
        shapes: ``{original key: shape}`` (attention kernels of foreign layouts with merged head axes).
        grid: ``(rows, cols)`` of the position embeddings when the file says (a ``.keras`` model, a config's image
            size), else None (a square is assumed).
        image_size: ``(height, width)`` of the images a config states, or None; with a remainder the patches
            do not cover (timm's So400m/14 at 384), the model crops it (``ViTConfig.crop_remainder``).
    """

    path: str
    format: str
    shapes: dict
    grid: tuple | None = None
    image_size: tuple | None = None

    def as_naflex(self):
        """This checkpoint read as keras_vit's NaFlex model (its :class:`NaFlexForm` applied), or a ``ValueError``."""
        if self.naflex is None:
            raise ValueError(f"{self.path!r} ({self.format}) has no NaFlex form: its model takes images of one size.")
        return dataclasses.replace(self, declared={**self.declared, **self.naflex.declared}, naflex=None,
                                   position_resampling=self.naflex.position_resampling,
                                   notes=[*self.notes, self.naflex.note])


class Source:
    """One kind of checkpoint keras_vit reads.

    Attributes:
        name: the :attr:`CheckpointInfo.format` of what it reads (``"timm"``).
        reads: what kind of path it reads: ``"file"``, ``"folder"`` or ``"file or folder"``.
        label: how an error names the layout (``"timm ViT"``), or None for a source of its own file kind.
    """

    name = None
    reads = "file"
    label = None

    def claims(self, opened):
        """Whether this source reads ``opened`` (by content, not only by name); it may raise a ``CheckpointError``
        naming what is wrong with a path it recognises. By default: a file of its own kind (``opened.kind``, told
        by the file's first bytes, is :attr:`name`: ``.npz``, ``.keras``)."""
        return opened.kind == self.name

    def describe(self, opened, architecture=None):
        """A :class:`CheckpointInfo`: shapes and what the files declare, no tensor data read; ``architecture``
        replaces the one the files name (a timm registration)."""
        raise NotImplementedError

    def arrays(self, opened, architecture=None, input_mean=None, input_std=None):
        """``{original key: np.ndarray}``, every array read now; a foreign input normalisation folded into the
        patch embedding for a model that scales its inputs with ``input_mean`` / ``input_std``."""
        raise NotImplementedError
