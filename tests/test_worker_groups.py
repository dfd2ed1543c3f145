"""make test's parallel part (pytest-xdist, --dist loadgroup) keeps a module's
tests that share its fixture on one worker (tests/conftest.py groups them):
each worker would otherwise build the fixture again. With pytest 9.2 and
pytest-xdist 3.8 no group held, silently; this module fails instead."""

import os

import pytest


@pytest.fixture(scope="module")
def built_by():
    return os.environ.get("PYTEST_XDIST_WORKER")


@pytest.mark.parametrize("index", range(4))
def test_a_modules_shared_fixture_is_built_on_the_worker_that_runs_all_its_tests(built_by, index, request):
    assert built_by == os.environ.get("PYTEST_XDIST_WORKER")
    if built_by is not None and request.config.getvalue("loadgroup"):
        assert request.node.nodeid.endswith(f"@{__name__.replace('.', '/')}.py"), request.node.nodeid
