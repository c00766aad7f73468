"""A resumed stream with RandAugment / MixUp / CutMix is the uninterrupted stream's (make_pipeline(skip_batches=)).

Keras' RandAugment, MixUp and CutMix draw from their own seed generators, a state each batch they augment advances.
skip_batches=n skipped the elements before the batch augmenter, so batch n of a resumed run was augmented with the
generators' first draws (another batch than the uninterrupted run's, which ``.skip(n)`` of the pipeline gives); and
the batch map ran in parallel, so two builds of one seeded RandAugment pipeline raced on the generator's state and
gave different batches.
"""

import numpy as np
import pytest

from helpers import image_folder
from keras_vit.train import data

OPTIONS = dict(image_size=16, batch_size=4, training=True, augment="inception", seed=5, shuffle_buffer=8, repeat=True)


def batches(pipeline, count):
    return [(x.numpy(), y.numpy()) for x, y in pipeline.take(count)]


def assert_same(expected, actual):
    assert len(expected) == len(actual)
    for (x, y), (x2, y2) in zip(expected, actual):
        np.testing.assert_allclose(x, x2, atol=1e-4)
        np.testing.assert_allclose(y, y2, atol=1e-6)


@pytest.mark.parametrize("mixing", [dict(mixup=0.8, cutmix=0.5), dict(randaugment=True)], ids=["mixup-cutmix", "randaugment"])
def test_a_stream_skipped_to_a_batch_is_the_uninterrupted_stream(mixing, tmp_path):
    root = image_folder(tmp_path / "photos", classes=("a", "b", "c"), per_class=5, size=(20, 30))
    dataset = data.load_image_folder(str(root), test_every=5)
    options = dict(OPTIONS, num_classes=3, **mixing)
    uninterrupted = batches(data.make_pipeline(dataset.train, **options), 8)
    assert_same(uninterrupted, batches(data.make_pipeline(dataset.train, **options), 8))  # seeded: the same again
    assert_same(uninterrupted[3:], batches(data.make_pipeline(dataset.train, skip_batches=3, **options), 5))
