"""Save the model that pretrained weights describe (.npz, timm, transformers, hf://, a preset) as a .keras file.

The architecture is read from the source (:func:`keras_vit.from_pretrained`);
the .keras file is written atomically, with the class names the source carries
and the source itself in its metadata, so ``keras-vit predict``, ``attention``
and ``export`` print class names. ``--num-classes`` gives a new zero-initialised
head for fine-tuning, ``--image-size`` resamples the position embeddings. Prints the load report. Bad values are refused by the
builders with the value received; an existing --output file is replaced only with --overwrite.
"""



def add_arguments(parser):
    from keras_vit.domains import POSITIVE_INT  # from_pretrained's sizes: the builders check them with the same domain

    parser.add_argument(
        "source",
        help="an original .npz, a timm .safetensors, a transformers folder, hf://ORG/NAME[@revision], "
        "or a preset VARIANT:TAG such as B/16:augreg_in21k_ft_in1k (keras-vit info --presets)",
    )
    parser.add_argument("--output", required=True, help="the .keras file to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing file at --output")
    parser.add_argument("--num-classes", type=POSITIVE_INT.argparse_type(), help="a new zero-initialised head of N classes (default: the source's head)")
    parser.add_argument("--image-size", type=POSITIVE_INT.argparse_type(), help="input size; position embeddings resampled (default: the source's)")
    parser.add_argument("--num-heads", type=POSITIVE_INT.argparse_type(), help="attention heads, for a timm file without a config.json naming them")


def run(args):
    from keras_vit.models.pretrained import from_pretrained
    from keras_vit.saving import check_output, save_model

    check_output(args.output, overwrite=args.overwrite, what="--output", extension=".keras")  # before the weights are read
    overrides = {
        name: value
        for name, value in (("num_classes", args.num_classes), ("image_size", args.image_size), ("num_heads", args.num_heads))
        if value is not None
    }
    model = from_pretrained(args.source, **overrides)
    metadata = {"source": args.source}
    names = getattr(model, "class_names", None)
    if names:
        metadata["class_names"] = list(names)
    save_model(model, args.output, metadata=metadata)
    print(model.load_report)
    classes = f"{len(names)} named classes" if names else "no class names"
    config = model.vit_config  # a NaFlex model takes patches (three inputs), not images of one size
    takes = f"NaFlex, up to {config.max_patches} patches" if config.input_mode == "naflex" else f"input {model.input_shape[1:3]}"
    print(f"wrote {args.output}: {model.name}, {takes}, output {model.output_shape[1:]}, {classes}")
    return 0
