"""Move a .keras model to another image size (or any size), patch size or NaFlex budget, every weight kept.

The position embeddings are resampled in 2-D to the new patch grid (a
hybrid's grid is its feature map's) and, with --patch-size, the
patch-embedding kernel by FlexiViT's pseudo-inverse resize
(keras_vit.resize_model). --image-size none gives a model that takes any size
the patch size divides. The class names and other metadata stored with the
model are kept. A NaFlex model keeps the pixels of its budget under another patch size (64 patches of 16x16
become 256 of 8x8) unless --max-patches says otherwise. The output is written atomically, over an existing
file only with --overwrite.
"""

import argparse
import re

from keras_vit.domains import POSITIVE_INT

_KEEP = object()  # --image-size not given (argparse converts string defaults with `type`; this it leaves alone)


def parse_image_size(text, allow_any=True):
    """``"384" -> 384``, ``"384x512" -> (384, 512)``, ``"none"`` -> None (any size; refused, not ignored, where a
    size has no "any": ``allow_any=False``).

    Example:
    >>> parse_image_size("384"), parse_image_size("384x512"), parse_image_size("none")
    (384, (384, 512), None)
    """
    if text.lower() in ("none", "any", "dynamic"):
        if allow_any:
            return None
        raise argparse.ArgumentTypeError(f"must be N or HxW of positive ints ('any size' is no choice here), got {text}")
    match = re.fullmatch(r"(\d+)(?:x(\d+))?", text)
    sides = [] if match is None else [int(side) for side in match.groups() if side is not None]
    if not sides or not all(POSITIVE_INT.contains(side) for side in sides):  # the builders' image_size domain
        domain = "N, HxW or 'none' (any size)" if allow_any else "N or HxW"
        raise argparse.ArgumentTypeError(f"must be {domain} of positive ints, got {text}")
    return sides[0] if len(sides) == 1 else tuple(sides)


def parse_fixed_size(text):
    """:func:`parse_image_size` of a size with no "any" (``--patch-size``, export's ``--image-size``).

    Example:
    >>> parse_fixed_size("16x8")
    (16, 8)
    """
    return parse_image_size(text, allow_any=False)


def parse_budget(text):
    """``"256" -> 256``, ``"none" -> None`` (any number of patches).

    Example:
    >>> parse_budget("256"), parse_budget("none")
    (256, None)
    """
    return None if text.lower() in ("none", "any") else POSITIVE_INT.parse(text)


def add_arguments(parser):
    parser.add_argument("model", help="the .keras file")
    parser.add_argument("--output", required=True, help="the .keras file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file at --output")
    parser.add_argument(
        "--image-size", type=parse_image_size, default=_KEEP,
        help="N, HxW, or 'none' for any size (default: the model's own)",
    )
    parser.add_argument("--patch-size", type=parse_fixed_size, help="N or HxW (default: the model's own)")
    parser.add_argument(
        "--max-patches", type=parse_budget, default=_KEEP,
        help="a NaFlex model's budget of patches per image, or 'none' for any number (default: its own; with "
             "--patch-size, the budget that covers the same pixels)",
    )


def run(args):
    from keras_vit.models.resize import SAME, resize_model
    from keras_vit.saving import check_output, load_model, read_metadata, save_model

    if args.image_size is _KEEP and args.patch_size is None and args.max_patches is _KEEP:
        raise ValueError("Nothing to change: give --image-size, --patch-size and/or --max-patches")
    check_output(args.output, overwrite=args.overwrite, what="--output", extension=".keras")  # before the model is read
    metadata = read_metadata(args.model)
    model = load_model(args.model)
    image_size = SAME if args.image_size is _KEEP else args.image_size
    max_patches = SAME if args.max_patches is _KEEP else args.max_patches
    resized = resize_model(model, image_size=image_size, patch_size=args.patch_size, max_patches=max_patches)
    if "image_size" in metadata:  # what keras-vit train records (a NaFlex model's: its native size; it takes a dict)
        config = resized.vit_config
        size = config.native_image_size if config.input_mode == "naflex" else config.image_size
        metadata["image_size"] = None if size is None else size[0] if size[0] == size[1] else list(size)
    save_model(resized, args.output, metadata=metadata or None)
    print(f"{args.model} ({model.vit_config.describe_size()}) -> {args.output} ({resized.vit_config.describe_size()})")
    return 0
