"""A failure pev goes on from is logged in one line when the store did not answer (pev._logs)."""

from __future__ import annotations

import logging

import pytest

from pev._logs import log_failure
from pev.errors import StoreError, StoreUnavailable


def _logged(error: Exception, caplog: pytest.LogCaptureFixture) -> logging.LogRecord:
    """The one record ``log_failure`` writes while ``error`` is being handled."""

    def fail() -> None:
        raise error

    log = logging.getLogger("pev.test")
    with caplog.at_level(logging.WARNING, logger="pev.test"):
        try:
            fail()
        except StoreError:
            log_failure(log, "worker %s: claiming tasks failed", "w1")
    (record,) = caplog.records
    return record


def test_a_store_that_did_not_answer_is_one_line(caplog: pytest.LogCaptureFixture) -> None:
    record = _logged(StoreUnavailable("the server closed the connection"), caplog)
    assert record.levelno == logging.WARNING
    assert record.exc_info is None
    assert record.getMessage() == (
        "worker w1: claiming tasks failed (the server closed the connection); it is tried again"
    )


def test_any_other_failure_keeps_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    record = _logged(StoreError("a stored row is not what pev wrote"), caplog)
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.getMessage() == "worker w1: claiming tasks failed"


def test_a_call_made_once_says_what_comes_of_it(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("pev.test")
    with caplog.at_level(logging.WARNING, logger="pev.test"):
        try:
            raise StoreUnavailable("the server closed the connection")
        except StoreError:
            log_failure(log, "task %s: releasing the lease failed", "t1", then="it expires")
    (record,) = caplog.records
    assert record.getMessage() == (
        "task t1: releasing the lease failed (the server closed the connection); it expires"
    )
