"""pytest fixtures: a real tallyd per test (tests/support.py) and a client
of it. The package is imported from this tree (clients/python)."""
from __future__ import annotations

import sys
from typing import Iterator

import pytest

from support import PACKAGE_DIR, Tallyd

sys.path.insert(0, str(PACKAGE_DIR))

import tally  # noqa: E402


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """Each phase's report on the test item, for the fixtures' teardown."""
    outcome = yield
    report = outcome.get_result()
    setattr(item, "report_" + report.when, report)


@pytest.fixture
def tallyd(request: pytest.FixtureRequest) -> Iterator[Tallyd]:
    """A tallyd on an empty store, stopped (and its directory removed)
    after the test; the tail of its log is printed when the test failed."""
    server = Tallyd()
    server.start()
    try:
        yield server
    finally:
        report = getattr(request.node, "report_call", None)
        if report is not None and report.failed:
            print(f"---- tallyd's log ({server.dir}):\n{server.log_tail()}")
        server.cleanup()


@pytest.fixture
def client(tallyd: Tallyd) -> tally.Client:
    """A client of the test's tallyd, consumer ``shop``, a 30 s deadline."""
    return tally.Client(tallyd.url, consumer="shop",
                        retry=tally.RetryPolicy(deadline_s=30.0))
