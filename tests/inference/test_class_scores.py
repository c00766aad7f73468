"""What a classifier's outputs are called: an embedding is never decoded as class scores, and class names are ones a
label file can hold."""

import numpy as np
import pytest

import keras_vit
from helpers import images, tiny_vit
from keras_vit.inference import labels
from keras_vit.inference import predictors as inference


def test_decode_predictions_refuses_an_embedding_as_class_scores(tmp_path):
    """An embedding's dimensions used to come back as ('2', 'class_2', 2.10): scores of classes the model has not."""
    model = tiny_vit(include_top=False)
    embeddings = np.asarray(model(images(2)))
    with pytest.raises(ValueError, match=r"decodes class scores; the model returns 'embedding' \(it has no "
                                         r"classification head\)\. Received: preds of shape \(2, 32\)"):
        inference.decode_predictions(embeddings, model=model)
    path = str(tmp_path / "embedding.keras")
    keras_vit.save_model(model, path)
    with pytest.raises(ValueError, match=r"the model returns 'embedding'"):
        inference.decode_predictions(embeddings, model=keras_vit.load_predictor(path))


def test_a_class_name_a_label_file_cannot_hold_is_refused():
    """An empty name, or one with a line break, passed the export and then failed predict (a name short) or shifted
    every name after it ('hot\\ndog': class 0 became 'hot', class 1 'dog')."""
    for names in (["cat", "", "bird"], ["", "hot\ndog", "bird"]):
        with pytest.raises(ValueError, match=r"stored one a line .*empty or with a line break"):
            labels.class_names(3, labels=names)
    assert labels.class_names(3, labels=["cat", "hot dog", 7]) == ["cat", "hot dog", "7"]


@pytest.mark.parametrize("pooling", [None, "feature_map"])
def test_predict_refuses_tokens_and_feature_maps_by_name(tmp_path, pooling, capsys):
    """A model of tokens or a feature map crashed predict inside ('only 0-dimensional arrays can be converted to
    Python scalars'); export refused it by name."""
    from PIL import Image

    from keras_vit import cli

    model = tiny_vit(include_top=False, pooling=pooling)
    path = str(tmp_path / "tokens.keras")
    keras_vit.save_model(model, path)
    Image.new("RGB", (40, 30), (200, 30, 30)).save(tmp_path / "red.png")
    message = rf"predict needs a model of class scores or an embedding, \(batch, n\) \(it gives {model.vit_config.output}: "
    with pytest.raises(ValueError, match=message):
        keras_vit.predict(model, [str(tmp_path / "red.png")])
    assert cli.main(["predict", path, str(tmp_path / "red.png")]) == 2
    assert "predict needs a model of class scores or an embedding" in capsys.readouterr().err


def test_predict_takes_any_keras_classifier_of_one_output(tmp_path):
    """A keras.Sequential crashed predict ('The layer sequential has never been called and thus has no defined
    input'), a dict of one output crashed it later; a model of two outputs is refused as such, not as tokens."""
    import keras
    from PIL import Image

    Image.new("RGB", (40, 30), (200, 30, 30)).save(tmp_path / "red.png")
    image = str(tmp_path / "red.png")
    sequential = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Rescaling(1 / 255), keras.layers.Flatten(),
                                   keras.layers.Dense(4, activation="softmax")])
    want = keras_vit.predict(sequential, image)[0]["predictions"]
    path = str(tmp_path / "sequential.keras")
    sequential.save(path)
    assert [p["index"] for p in keras_vit.predict(path, image)[0]["predictions"]] == [p["index"] for p in want]
    x = keras.Input((32, 32, 3))
    features = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(x))
    scores = keras.layers.Dense(3, activation="softmax")(features)
    (result,) = keras_vit.predict(keras.Model(x, {"probabilities": scores}), image)
    assert len(result["predictions"]) == 3
    with pytest.raises(ValueError, match=r"predict takes a model of one output .* has 2"):
        keras_vit.predict(keras.Model(x, [scores, features]), image)
