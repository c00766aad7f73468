"""The README's set-up as a new user runs it: a fresh virtual environment, ``pip install -e ".[train]"``, then the first
``tfds:`` dataset. tensorflow-datasets imports a package it declares only for old Pythons (importlib_resources), so
only an install from nothing shows whether the extra brings everything it needs. Slow: it installs TensorFlow (from
pip's cache where the machine has one)."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROGRAM = """
import sys
sys.path.insert(0, {tests!r})
import keras_vit
from tiny_tfds import levels

levels.prepare({data_dir!r})
data = keras_vit.load_dataset("tfds:" + levels.NAME, data_dir={data_dir!r})
print(data.num_train, data.num_test, data.class_names)
"""


@pytest.mark.slow
def test_a_fresh_venv_with_the_train_extra_reads_a_tfds_dataset(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python")
    install = subprocess.run([python, "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[train]"],
                             capture_output=True, text=True, timeout=2400)
    assert install.returncode == 0, install.stderr[-3000:]
    program = PROGRAM.format(tests=os.path.join(ROOT, "tests"), data_dir=str(tmp_path / "tensorflow_datasets"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    env.pop("PYTHONPATH", None)
    done = subprocess.run([python, "-c", program], capture_output=True, text=True, timeout=600, cwd=str(tmp_path),
                          env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "6 4 ['dark', 'light']"
