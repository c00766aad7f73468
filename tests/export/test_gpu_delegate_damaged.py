"""``gpu_delegate_report`` on damaged files: the documented ``ValueError`` naming the file, never a parser's exception."""

import numpy as np
import pytest

from keras_vit.export import gpu_delegate_report


@pytest.fixture(scope="module")
def flatbuffer():
    """A small real ``.tflite`` (a matmul and a softmax), converted in a second."""
    import tensorflow as tf

    weights = tf.constant(np.random.default_rng(0).normal(size=(8, 5)).astype("float32"))
    fn = tf.function(lambda x: tf.nn.softmax(tf.matmul(x, weights)), input_signature=[tf.TensorSpec((1, 3, 8), tf.float32)])
    return bytes(tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()]).convert())


def _damaged(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError) as caught:
        gpu_delegate_report(path)
    assert str(path) in str(caught.value), caught.value
    return str(caught.value)


def test_the_whole_file_is_read(flatbuffer, tmp_path):
    path = tmp_path / "whole.tflite"
    path.write_bytes(flatbuffer)
    assert gpu_delegate_report(path).whole


def test_truncated_file_names_the_file(flatbuffer, tmp_path):
    message = _damaged(tmp_path, "truncated.tflite", flatbuffer[: len(flatbuffer) // 2])
    assert message.startswith("Damaged TFLite flatbuffer") and "truncated or overwritten?" in message


def test_header_only_file_names_the_file(flatbuffer, tmp_path):
    assert flatbuffer[4:8] == b"TFL3"
    _damaged(tmp_path, "header.tflite", flatbuffer[:16])


def test_random_bytes_behind_the_identifier_name_the_file(tmp_path):
    rng = np.random.default_rng(1)
    for seed in range(20):
        content = bytearray(rng.integers(0, 256, size=int(rng.integers(8, 4096)), dtype=np.uint8).tobytes())
        content[4:8] = b"TFL3"
        _damaged(tmp_path, f"random_{seed}.tflite", bytes(content))


def test_empty_file_names_the_file(tmp_path):
    assert "no TFL3 identifier" in _damaged(tmp_path, "empty.tflite", b"")


def test_every_truncation_is_a_report_or_the_documented_error(flatbuffer, tmp_path):
    """Cut at every 16th byte: each prefix gives a report or the ValueError naming the file, nothing else."""
    for end in range(0, len(flatbuffer), 16):
        try:
            gpu_delegate_report(flatbuffer[:end])
        except ValueError as error:
            assert "<bytes>" in str(error), error
