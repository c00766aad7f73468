"""Print the model variants with their sizes and parameter counts, and what this machine runs natively."""

from keras_vit.models import params, variants


def add_arguments(parser):
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--image-size", type=int, default=224)


def _row(name, c, count, stages=""):
    return f"{name:9} {c['hidden_size']:>6} {c['num_layers']:>6} {c['mlp_dim']:>6} {c['num_heads']:>6} {count:>14,}{stages}"


def run(args):
    print(f"{'variant':9} {'width':>6} {'depth':>6} {'mlp':>6} {'heads':>6} {'params':>14}  ResNet stages")
    for name in variants.VIT_VARIANTS:
        c = variants.decode_variant(name)
        print(_row(name, c, params.count_params(**c, num_classes=args.num_classes, image_size=args.image_size)))
    for name in variants.HYBRID_VARIANTS:
        c = variants.decode_hybrid_variant(name)
        n = params.count_hybrid_params(image_size=args.image_size, num_classes=args.num_classes, **c)
        print(_row(name, c, n, f"  {c['block_units']}"))
    from keras_vit import hardware
    from keras_vit.cli import native_stderr_hidden

    print()
    with native_stderr_hidden():  # TensorFlow's CUDA probing on a machine without a GPU
        lines = hardware.describe()
    for line in lines:
        print(line)
    return 0
