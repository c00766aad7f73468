import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

# the scripts that wrote the fixtures are not tests: --doctest-modules would import them (and once rewrote the
# fixtures of tests/architecture/test_functional_files.py with the code under test, so that test could not fail)
collect_ignore_glob = ["fixtures/*"]


def pytest_configure(config):
    # one folder for the run, shared by the xdist workers (they inherit the environment): the trained fixture
    # models of tests/export_helpers.py are trained once per run, not once per worker
    if not hasattr(config, "workerinput") and "KERAS_VIT_TEST_SHARED" not in os.environ:
        import tempfile

        config._keras_vit_shared = os.environ["KERAS_VIT_TEST_SHARED"] = tempfile.mkdtemp(prefix="keras_vit_tests_")
        # what the doctests, tensorflow-datasets (DatasetInfo.initialize_from_bucket) and the CLI's subprocesses
        # leave in the temporary directory goes in the run's folder, removed with it (each run left them in
        # /tmp: 19 folders from the weights and inference doctests and tests/train/test_data.py alone). pytest's own tmp_path folders stay where they were (it keeps the last three runs' to debug).
        config._keras_vit_temproot = os.environ.get("PYTEST_DEBUG_TEMPROOT")  # put back when the run ends
        os.environ.setdefault("PYTEST_DEBUG_TEMPROOT", tempfile.gettempdir())
        scratch = os.path.join(config._keras_vit_shared, "tmp")
        os.mkdir(scratch)
        config._keras_vit_tmpdir = os.environ.get("TMPDIR")  # put back when the run ends
        os.environ["TMPDIR"] = tempfile.tempdir = scratch


def pytest_unconfigure(config):
    folder = getattr(config, "_keras_vit_shared", None)
    if folder:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("KERAS_VIT_TEST_SHARED", None)
        import tempfile

        tempfile.tempdir = None
        for name, value in (("TMPDIR", config._keras_vit_tmpdir), ("PYTEST_DEBUG_TEMPROOT", config._keras_vit_temproot)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _controller(config):
    """xdist's controller process, whose workers run the tests: it only hands them out and reports."""
    # as xdist decides it (its _is_distribution_mode): --dist without -n runs the tests here
    return (not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no"
            and bool(getattr(config.option, "tx", None)))


def pytest_sessionstart(session):
    if _controller(session.config):
        return  # TensorFlow's import here cost ~6 s before the workers were started, and it ran no test
    # TensorFlow, Keras and keras_vit leave ~460k Python objects alive after import; every full garbage
    # collection scans them all (0.26 s here). Keras calls gc.collect() on each variable it deletes, e.g.
    # 14 times in one model.quantize("int8"), which made a tiny quantization test take 13 s instead of 1 s.
    # Freezing what the imports made moves it out of the collector's reach; objects the tests create
    # are collected as usual.
    import gc

    import keras  # noqa: F401  (imports the backend the environment above names)

    import keras_vit  # noqa: F401

    gc.collect()
    gc.freeze()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # Keras' initializers and TensorFlow's random ops draw from global generators, seeded here before each test's
    # fixtures are set up: a test's weights no longer depend on which tests its worker ran before (--dist worksteal
    # moves them). A module or session fixture draws after the seed of the test that first needs it, so that test's
    # own draws follow the fixture's; fixtures whose numbers matter seed themselves. Costs ~10 us a test (TensorFlow
    # clears its eager kernel cache)
    import keras

    keras.utils.set_random_seed(0)


@pytest.fixture(autouse=True)
def _freeze_what_outlives_a_test():
    # TensorFlow keeps the graphs a test traced alive after the test (~300k objects for one fit step of
    # ViT-Ti/16, still there after gc.collect()), so they too would be scanned by every later full collection.
    # The price: what is alive now and dies later in a reference cycle (a module fixture's model) is not
    # collected until the worker exits; the suite's peak memory stays far below CI's 24 GiB.
    yield
    import gc

    gc.collect()
    gc.freeze()


def _hardware_lines():
    """What the log says of the machine the tests ran on."""
    # the CPU class decides which kernels (and so which float32 roundings) the suite met
    from keras_vit.hardware.report import describe

    lines = list(describe())
    # what programs see through CPUID (the kernels' dispatch), which an emulator or a VM can narrow below the
    # kernel's /proc/cpuinfo above (make test-avx2: QEMU's AVX2-only CPU on any machine)
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # NumPy moved it
        return lines
    seen = [name for name in ("AVX2", "FMA3", "AVX512F", "AVX512BF16", "AVX512VNNI") if features.get(name)]
    return lines + ["cpu features through CPUID (NumPy): " + (", ".join(seen) or "none of AVX2, AVX-512")]


_WORKERS_SAW = []


def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):  # told where the tests ran: TensorFlow has started here already
        session.config.workeroutput["keras_vit_hardware"] = _hardware_lines()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    lines = getattr(node, "workeroutput", {}).get("keras_vit_hardware")
    if lines and not _WORKERS_SAW:
        _WORKERS_SAW.extend(lines)


def pytest_terminal_summary(terminalreporter):
    # every log says it, also under -q (a report header would be hidden there)
    terminalreporter.section("keras_vit hardware")
    # no worker told (none ran, or all were lost): read here, which starts TensorFlow in xdist's controller
    for line in _WORKERS_SAW or _hardware_lines():
        terminalreporter.write_line(line)
