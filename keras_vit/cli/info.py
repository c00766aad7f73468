"""Print the model variants with their sizes and parameter counts, and what this machine runs natively.

With ``--presets``: the named pretrained weights instead (builder, tag, resolution,
URL, whether the file is in the Keras cache).
"""

from keras_vit.models import params, variants


def add_arguments(parser):
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument(
        "--presets", action="store_true", help="list the preset weights (weights='<tag>') and whether each is cached"
    )


def _row(name, c, count, stages=""):
    return f"{name:9} {c['hidden_size']:>6} {c['num_layers']:>6} {c['mlp_dim']:>6} {c['num_heads']:>6} {count:>14,}{stages}"


def print_presets():
    """One line per preset: builder, tag, resolution, URL (after ``KERAS_VIT_WEIGHTS_URL``), cached or not."""
    from keras_vit.weights import download, presets

    print(f"{'builder':10} {'tag':25} {'res':>4} {'cached':6} url")
    for preset in presets.PRESETS:
        cached = "yes" if download.is_cached(preset) else "no"
        builder = variants.builder_name(preset.variant)
        print(f"{builder:10} {preset.tag:25} {preset.image_size:>4} {cached:6} {presets.url_of(preset)}")
    print(f"\ncache: {download.cache_root()}")


def run(args):
    if args.presets:
        print_presets()
        return 0
    print(f"{'variant':9} {'width':>6} {'depth':>6} {'mlp':>6} {'heads':>6} {'params':>14}  ResNet stages")
    for name in variants.VIT_VARIANTS:
        c = variants.decode_variant(name)
        print(_row(name, c, params.count_params(**c, num_classes=args.num_classes, image_size=args.image_size)))
    for name in variants.HYBRID_VARIANTS:
        c = variants.decode_hybrid_variant(name)
        n = params.count_hybrid_params(image_size=args.image_size, num_classes=args.num_classes, **c)
        print(_row(name, c, n, f"  {c['block_units']}"))
    from keras_vit.cli import ENVIRONMENT_SET, native_stderr_hidden
    from keras_vit.hardware.onednn import ONEDNN_VARIABLE
    from keras_vit.hardware.report import describe

    print()
    with native_stderr_hidden():  # TensorFlow's CUDA probing on a machine without a GPU
        lines = describe(onednn_set_by_keras_vit=ONEDNN_VARIABLE in ENVIRONMENT_SET)
    for line in lines:
        print(line)
    return 0
