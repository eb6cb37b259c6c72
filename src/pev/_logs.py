"""Logging a failure pev goes on from: one line for a store that did not answer, else the trace.

A worker, a heartbeat or a watch that meets a failure logs it and tries again later. A store
that did not answer (:class:`~pev.errors.StoreUnavailable`: a server restarting, a connection
cut) is expected to come back; its traceback, repeated at every try, would bury the lines that
matter, so it is one warning naming what failed and why. Anything else is logged with its
traceback, as a fault to look into.
"""

from __future__ import annotations

import logging
import sys

from pev.errors import StoreUnavailable

__all__ = ["log_failure"]


def log_failure(
    log: logging.Logger,
    message: str,
    *args: object,
    level: int = logging.ERROR,
    then: str = "it is tried again",
) -> None:
    """Log the exception being handled (call it in an ``except`` block) after ``message``.

    Args:
        log: The logger.
        message: What failed, a ``%``-format of ``args``; the exception follows it.
        args: The format's values.
        level: The level of a failure other than a store that did not answer (which is always
            a warning).
        then: What happens next, told after a store that did not answer (a call made once
            says what comes of it instead).
    """
    exc = sys.exc_info()[1]
    if isinstance(exc, StoreUnavailable):
        log.warning(message + " (%s); %s", *args, exc, then)
    else:
        log.log(level, message, *args, exc_info=True)
