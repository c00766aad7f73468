"""build_optimizer's layer decay and gradient accumulation are TensorFlow's: another backend is refused by name.

On JAX, ``layer_decay`` failed at the first step with ``AttributeError: 'LayerDecayAdamW' object has no attribute
'_distribution_strategy'`` and ``accumulate`` with JAX's ``UnexpectedTracerError``, leaving the model unable to fit
again ("Unable to automatically build the model").
"""

import pytest

import keras
import keras_vit


@pytest.mark.parametrize("options, named", [(dict(layer_decay=0.75), "layer_decay=0.75"), (dict(accumulate=2), "accumulate=2")])
def test_layer_decay_and_accumulation_are_refused_on_another_backend(options, named, monkeypatch):
    model = keras_vit.ViT(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32, num_classes=2)
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ValueError, match=rf"{named} run on the TensorFlow backend only.*'jax' backend"):
        keras_vit.build_optimizer(1e-3, total_steps=4, model=model, **options)
    assert isinstance(keras_vit.build_optimizer(1e-3, total_steps=4), keras.optimizers.AdamW)  # Keras' own: any backend
