"""The session's Prefect API for the tests that track flow runs: Prefect's test harness (a
temporary server on its own database), started once, shared by every module that asks."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def prefect_server():
    from prefect.settings import PREFECT_API_URL  # deferred: Prefect's import is slow, and most tests need none
    from prefect.testing.utilities import prefect_test_harness  # deferred: as above

    with prefect_test_harness(server_startup_timeout=90):
        yield PREFECT_API_URL.value()
