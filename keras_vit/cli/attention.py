"""Save an image with its attention-rollout heatmap overlaid (a .keras model).

Attention rollout (Abnar & Zuidema, 2020) of the class token over the image, as a
figure for a report: at least 480 pixels on its long side (a small image is
upsampled), with a colour bar and the model's predicted class and score in the
title; ``--plain`` writes the bare blend at the image's own size instead.
Optionally also writes the mean attention distance per head and depth and the
position-embedding similarity (Figure 7 of the ViT paper).
"""

from keras_vit.cli.predict import INPUT_RANGES
from keras_vit.domains import FRACTION, PROBABILITY
from keras_vit.inspect.options import HEAD_FUSIONS


def add_arguments(parser):
    parser.add_argument("model", help="a .keras model file (the layers are needed)")
    parser.add_argument("image", help="an image file (JPEG, PNG, ...)")
    parser.add_argument("--out", required=True, help="PNG to write: the image with the heatmap, a colour bar and the "
                        "predicted class in the title, at least 480 pixels on its long side")
    parser.add_argument("--plain", action="store_true", help="write only the image with the heatmap, at the image's own size")
    parser.add_argument("--head-fusion", choices=HEAD_FUSIONS, default="mean", help="how heads are combined (default mean)")
    parser.add_argument("--discard-ratio", type=FRACTION.argparse_type(), default=0.0, help="share of the weakest attention dropped per row")
    parser.add_argument("--alpha", type=PROBABILITY.argparse_type(), default=0.5, help="heatmap opacity (default 0.5)")
    parser.add_argument("--distance-out", help="also write the mean attention distance plot (PNG)")
    parser.add_argument("--position-out", help="also write the position-embedding similarity plot (PNG)")
    parser.add_argument(
        "--input-range", choices=sorted(INPUT_RANGES), default="auto",
        help="pixels the model takes: 0-255 (keras_vit default) or -1-1; auto asks the model",
    )


def run(args):
    from keras_vit.architecture.model import config_of
    from keras_vit import saving
    from keras_vit.inference import images, runtimes
    from keras_vit.inference.predictors import preprocess_input
    from keras_vit.inspect import attention
    from keras_vit.inspect import figures as visualize

    kind = runtimes.model_format(args.model)
    if kind != "keras":
        raise ValueError(f"Attention maps need the model's layers: pass a .keras file. Received: {args.model!r} ({kind})")
    model = saving.load_model(args.model)
    original = images.read_image(args.image)
    include_preprocessing = INPUT_RANGES[args.input_range]
    if include_preprocessing is None:
        include_preprocessing = runtimes.model_takes_pixels(model)
    pixels = images.load_image(args.image, config_of(model).native_image_size)  # the input size (native size: any-size models)
    x = preprocess_input(pixels, include_preprocessing=include_preprocessing)
    weights = attention.attention_weights(model, x)
    # straight from the patch grid to the size drawn: one resize, not two
    size = original.shape[:2] if args.plain else visualize.display_size(original.shape[:2])
    heatmap = attention.rollout_map(model, x, args.head_fusion, args.discard_ratio, weights=weights, size=size)
    if args.plain:
        print(visualize.save_heatmap_overlay(original, heatmap, args.out, alpha=args.alpha))
    else:
        title = _prediction_title(model, x, args.model)
        print(visualize.save_attention_figure(original, heatmap, args.out, title=title, alpha=args.alpha))
    if args.distance_out:
        distances = attention.mean_attention_distance(model, x, weights=weights)
        print(visualize.plot_attention_distance(distances, args.distance_out))
    if args.position_out:
        similarity = attention.position_embedding_similarity(model)
        print(visualize.plot_position_similarity(similarity, args.position_out))
    return 0


def _prediction_title(model, x, model_path):
    """``"predicted: cat (0.93)"`` (the top class and its probability), or the model's name for a model without a head."""
    from keras_vit.architecture.model import config_of
    from keras_vit.inference import labels
    from keras_vit.inference.predictors import to_probabilities

    config = config_of(model)
    if not config.include_top:
        return f"attention rollout of {model.name} (no classification head)"
    probabilities = to_probabilities(model.predict(x[None], verbose=0), output=config.output)[0]
    best = int(probabilities.argmax())
    name = labels.class_names(len(probabilities), model_path=model_path, loaded=model)[best]
    return f"predicted: {name} ({probabilities[best]:.2f})"
