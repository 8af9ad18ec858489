"""pytest setup: import flashc from <repo>/python, seed each test's RNG,
and provide the `backend` fixture (every available backend; 'cuda' skips
cleanly, with the library's reason, where it is unavailable)."""

import os
import sys
import zlib

import numpy as np
import pytest

_TESTS = os.path.dirname(os.path.abspath(__file__))
_PYTHON = os.path.join(os.path.dirname(_TESTS), "python")
for p in (_PYTHON, _TESTS):
    if p not in sys.path:
        sys.path.insert(0, p)

import flashc  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs the CUDA backend (skips without a GPU)")
    config.addinivalue_line("markers", "slow: a larger case (stress sizes, subprocesses)")


def pytest_report_header(config):
    ok, why = flashc.backend_available("cuda")
    return ["flashc %s from %s; cpu isa %s; backends %s%s"
            % (flashc.__version__, flashc.library_path, flashc.cpu_isa(), flashc.backends(),
               "" if ok else " (cuda: %s)" % why)]


def cuda_available():
    return "cuda" in flashc.backends()


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    # The library's reason already reads "CUDA backend unavailable: <why>".
    why = flashc.backend_available("cuda")[1] or "CUDA backend unavailable"
    skip = pytest.mark.skip(reason=why)
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    """A NumPy Generator seeded from the test's id: reproducible per test,
    independent of test order."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def backend(request):
    return request.param
