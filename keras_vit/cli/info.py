"""Print the model variants with their sizes and parameter counts, and what this machine runs natively.

With ``--presets``: the named pretrained weights instead (builder, tag, resolution,
URL, whether the file is in the Keras cache), then the ViT family's named presets (timm Hub repositories:
family, resolution, parameters, what the model gives, whether the Hugging Face cache holds them). With a ``.keras`` file: that model's
architecture (its ``ViTConfig``, field by field) and parameter count.
"""

from keras_vit.domains import POSITIVE_INT


def add_arguments(parser):
    parser.add_argument("model", nargs="?", help="a .keras model: print its architecture (ViTConfig) instead")
    parser.add_argument(
        "--num-classes", type=POSITIVE_INT.argparse_type(),
        help="head size the parameter counts of the table are for (default 1000; not with a model)",
    )
    parser.add_argument(
        "--image-size", type=POSITIVE_INT.argparse_type(),
        help="input size the parameter counts of the table are for (position embeddings; default 224; not with a model)",
    )
    parser.add_argument(
        "--presets", action="store_true", help="list the preset weights (weights='<tag>') and whether each is cached"
    )


def _row(name, config, stages=""):
    from keras_vit.architecture import params

    c = config
    count = params.count_config_params(c)
    return f"{name:9} {c.hidden_size:>6} {c.num_layers:>6} {c.mlp_dim:>6} {c.num_heads:>6} {count:>14,}{stages}"


def print_model(path):
    """The architecture of the model in ``path``, one field a line, and its parameter count."""
    from keras_vit.architecture.config import field_names
    from keras_vit.architecture.model import config_of
    from keras_vit.hardware.terminal import native_stderr_filtered
    from keras_vit.saving import load_model

    if str(path).startswith(("hf://", "kaggle://")):  # a source, no file: what converts it
        raise ValueError(f"keras-vit info reads a .keras file; {path!r} is a source of weights: keras-vit convert {path} "
                         "--output model.keras builds its model (keras_vit.from_pretrained), which info then reads.")
    with native_stderr_filtered():  # TensorFlow's CUDA probing on a machine without a GPU
        model = load_model(path)
    config = config_of(model)
    print(f"{path}: {model.name} ({config.variant or 'no registered variant'}), {config.describe_size()}")
    for name in field_names():
        print(f"  {name:22} {getattr(config, name)!r}")
    if config.input_mode == "naflex":  # the native grid is where its position embeddings are stored, no limit
        budget = config.max_patches
        tokens = f"up to {config.num_prefix_tokens + budget!r}" if budget else "any number (the patches given)"
        print(f"  {'native grid':22} {config.grid!r}")
        print(f"  {'tokens':22} {tokens}")
    else:
        print(f"  {'grid':22} {config.grid!r}")
        print(f"  {'tokens':22} {config.num_tokens!r}")
    print(f"  {'parameters':22} {model.count_params():,}")


def print_presets():
    """One line per preset: builder, tag, resolution, URL (after ``KERAS_VIT_WEIGHTS_URL``), cached or not."""
    from keras_vit.architecture import variants
    from keras_vit.fetch import cache
    from keras_vit.weights import presets, sources

    print(f"{'builder':10} {'tag':25} {'res':>4} {'cached':6} url")
    for preset in presets.PRESETS:
        cached = "yes" if sources.is_cached(preset) else "no"
        builder = variants.builder_name(preset.variant)
        print(f"{builder:10} {preset.tag:25} {preset.image_size:>4} {cached:6} {presets.url_of(preset)}")
    print(f"\ncache: {cache.cache_root()}")
    print_hub_presets()


def print_hub_presets():
    """One line per family preset (``keras_vit.from_pretrained(name)``): its Hub repository, family, resolution,
    parameter count of the model it builds (from timm's registration, no download), what the model gives."""
    import os

    # deferred: huggingface_hub, only to say whether its cache holds a repository
    from huggingface_hub import constants

    from keras_vit.architecture import params
    from keras_vit.architecture.config import ViTConfig
    from keras_vit.weights import presets, timm_config

    print(f"\n{'name':33} {'family':21} {'res':>4} {'params':>13} {'gives':10} {'cached':6} repository (hf://)")
    for preset in presets.HUB_PRESETS.values():
        projection = preset.num_classes if preset.output == "embedding" and preset.num_classes else None
        fields = timm_config.config_fields(preset.timm_architecture, 0 if projection else preset.num_classes, projection)
        count = params.count_config_params(ViTConfig(**fields))
        gives = "logits" if preset.output == "logits" else ("embedding" if not projection else "projection")
        folder = os.path.join(constants.HF_HUB_CACHE, "models--" + preset.repo.replace("/", "--"), "snapshots")
        cached = "yes" if os.path.isdir(folder) and os.listdir(folder) else "no"
        print(f"{preset.name:33} {preset.family:21} {preset.image_size:>4} {count:>13,} {gives:10} {cached:6} {preset.repo}")
    print(f"\nHugging Face cache: {constants.HF_HUB_CACHE} (keras_vit.from_pretrained(name) fetches a family preset there)")


def run(args):
    from keras_vit.architecture import variants
    from keras_vit.architecture.config import ViTConfig

    table_only = [flag for flag, value in (("--num-classes", args.num_classes), ("--image-size", args.image_size))
                  if value is not None]
    if table_only and (args.model or args.presets):  # they size the variants' table only: ignored, they would mislead
        raise ValueError(f"{' and '.join(table_only)} size the table of variants; a model's architecture is its own "
                         f"(keras-vit resize writes it at another size). Received: {args.model or '--presets'}")
    if args.presets:
        print_presets()
        return 0
    if args.model:
        print_model(args.model)
        return 0
    head = dict(num_classes=args.num_classes or 1000, image_size=args.image_size or 224)
    rows = [_row(name, ViTConfig(**variants.decode_variant(name), **head)) for name in variants.VIT_VARIANTS]
    for name in variants.HYBRID_VARIANTS:  # every row built before any is printed: a bad --image-size prints none
        config = ViTConfig(stem="resnet", **variants.decode_hybrid_variant(name), **head)
        rows.append(_row(name, config, f"  {config.block_units}"))
    print(f"{'variant':9} {'width':>6} {'depth':>6} {'mlp':>6} {'heads':>6} {'params':>14}  ResNet stages")
    print("\n".join(rows))
    from keras_vit.cli import ENVIRONMENT_SET
    from keras_vit.hardware.onednn import ONEDNN_VARIABLE
    from keras_vit.hardware.report import describe
    from keras_vit.hardware.terminal import native_stderr_filtered

    print()
    with native_stderr_filtered():  # TensorFlow's CUDA probing on a machine without a GPU
        lines = describe(onednn_set_by_keras_vit=ONEDNN_VARIABLE in ENVIRONMENT_SET)
    for line in lines:
        print(line)
    return 0
