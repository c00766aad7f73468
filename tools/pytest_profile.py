"""A pytest plugin that profiles each xdist worker of a run (cProfile), for finding where the suite's time goes.

    PYTHONPATH=.:tools KERAS_VIT_PROFILE_DIR=/tmp/prof .venv/bin/python -m pytest -p pytest_profile \
        -m "not slow" -q -p no:cacheprovider -n 2 --dist worksteal --doctest-modules keras_vit tests
    .venv/bin/python -c "import pstats; p = pstats.Stats('/tmp/prof/gw0.prof'); p.add('/tmp/prof/gw1.prof'); \
        p.sort_stats('cumulative').print_stats(60)"

cProfile slows the run by about half (14:22 against 9:50 on an AMD EPYC, AVX2, 2 cores): read its times as shares.
"""

import cProfile
import os

_profile = []


def pytest_sessionstart(session):
    if hasattr(session.config, "workerinput"):  # the workers run the tests; the controller only hands them out
        _profile.append(cProfile.Profile())
        _profile[0].enable()


def pytest_sessionfinish(session):
    if _profile:
        _profile[0].disable()
        folder = os.environ.get("KERAS_VIT_PROFILE_DIR", ".")
        os.makedirs(folder, exist_ok=True)
        _profile[0].dump_stats(os.path.join(folder, f"{session.config.workerinput['workerid']}.prof"))
