"""transformers' SigLIP 2 NaFlex (``modeling_siglip2.py``, ``image_processing_siglip2.py``) as keras_vit's NaFlex model.

``Siglip2VisionModel`` takes each image at its own grid: ``pixel_values`` ``(B, N, P * P * C)`` (patches flattened
as ``(P, P, C)``), ``pixel_attention_mask`` ``(B, N)`` and ``spatial_shapes`` ``(B, 2)``. Its
``Siglip2VisionEmbeddings`` adds to the first ``h * w`` patches of each image the ``(S, S)`` table
(``S = sqrt(num_patches)``) resampled to ``(h, w)`` by the weights of ``F.interpolate(mode="bilinear",
align_corners=False, antialias=True)`` (``resize_positional_embeddings``: keras_vit's ``bilinear_torch_antialias``);
the padding takes the first position and the mask keeps it out of every attention (the keys) and of the
attention-pooling head's, and ``Siglip2ForImageClassification`` averages the valid tokens. Its processor gives each
image its grid by ``get_image_size_for_max_num_patches`` (:data:`keras_vit.layers.naflex_grid.GRID_RULES`
``"siglip2"``) and resizes it bilinearly with antialiasing.

keras_vit reads the same weights two ways: as the image model at the table's own grid (square images of ``S * P``
pixels, where the resampling is the identity: the default, as before) and, with ``from_pretrained(...,
max_patches=N)`` or ``input_mode="naflex"``, as the NaFlex model (:func:`naflex_form`).
"""

from keras_vit.weights.declared import declare
from keras_vit.weights.source import NaFlexForm

POSITION_RESAMPLING = "bilinear_torch_antialias"  # Siglip2VisionEmbeddings.resize_positional_embeddings


def naflex_form(size, said, path):
    """The :class:`~keras_vit.weights.source.NaFlexForm` of a SigLIP 2 config whose table's grid makes ``size``
    pixels (``said``: how the config says it)."""
    record = {}
    declare(record, "input_mode", "naflex", "Siglip2VisionModel (pixel_values, pixel_attention_mask, spatial_shapes: "
            "each image at its own grid)", path)
    declare(record, "grid_rule", "siglip2", "Siglip2ImageProcessor (get_image_size_for_max_num_patches)", path)
    declare(record, "image_size", tuple(size), f"{said} (the table's grid; resampled to each image's)", path)
    note = ("SigLIP 2 NaFlex: each image at its own grid (Siglip2ImageProcessor's rule, ViTConfig.grid_rule='siglip2'),"
            " the position table resampled to it bilinearly with antialiasing (resize_positional_embeddings), the "
            "padding masked")
    return NaFlexForm(declared=record, position_resampling=POSITION_RESAMPLING, note=note)
