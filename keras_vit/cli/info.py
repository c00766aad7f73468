"""Print the model variants with their sizes and parameter counts, and what this machine runs natively."""

from keras_vit.models import variants as configs
from keras_vit.models import hybrid


def add_arguments(parser):
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--image-size", type=int, default=224)


def _row(name, c, params, stages=""):
    return f"{name:9} {c['hidden_size']:>6} {c['num_layers']:>6} {c['mlp_dim']:>6} {c['num_heads']:>6} {params:>14,}{stages}"


def run(args):
    print(f"{'variant':9} {'width':>6} {'depth':>6} {'mlp':>6} {'heads':>6} {'params':>14}  ResNet stages")
    for name in ("Ti/16", "S/16", "S/32", "B/16", "B/32", "L/16", "L/32", "H/14"):
        c = configs.decode_variant(name)
        print(_row(name, c, configs.count_params(**c, num_classes=args.num_classes, image_size=args.image_size)))
    for name, (units, size) in hybrid.HYBRID_VARIANTS.items():
        c = dict(configs.VARIANTS[size], patch_size=1)
        n = hybrid.count_hybrid_params(units, 1, args.image_size, num_classes=args.num_classes, **c)
        print(_row(name, c, n, f"  {units}"))
    from keras_vit import hardware
    from keras_vit.cli import native_stderr_hidden

    print()
    with native_stderr_hidden():  # TensorFlow's CUDA probing on a machine without a GPU
        lines = hardware.describe()
    for line in lines:
        print(line)
    return 0
