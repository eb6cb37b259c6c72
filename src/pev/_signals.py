"""SIGTERM and Ctrl-C set a stop event while a long-running loop serves (a worker, Ray drivers).

Both ``pev worker`` and :func:`pev.ray.drivers_on_ray` drain when told to stop: they claim
nothing more and let running nodes reach their terminal records. :func:`stop_on_signals` turns
the two signals into that stop for as long as the loop serves, and puts back what was there
after (asyncio's ``remove_signal_handler`` would leave Python's default instead, and a handler a
library installed meanwhile, as joining Ray does, would be lost either way).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncio is imported where the loop runs: the command's first moments need
    import asyncio  # only STOP_SIGNALS (pev.cli._early), and loading asyncio takes a while

__all__ = ["STOP_SIGNALS", "stop_on_signals"]

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
"""The signals that ask a serving loop to drain and stop."""


@contextlib.contextmanager
def stop_on_signals(
    stop: asyncio.Event, *, told: Callable[[signal.Signals], None] | None = None
) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT set ``stop`` (after ``told(signum)``, when given).

    Only the main thread receives signals: elsewhere nothing changes. Must be entered with the
    running loop's thread.
    """
    import asyncio  # noqa: PLC0415 - see the import above

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    loop = asyncio.get_running_loop()
    previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}

    def heard(signum: signal.Signals) -> None:
        if told is not None:
            told(signum)
        stop.set()

    for signum in STOP_SIGNALS:
        loop.add_signal_handler(signum, heard, signum)
    try:
        yield
    finally:
        for signum in STOP_SIGNALS:
            loop.remove_signal_handler(signum)  # which sets Python's default, not what was there
            if (earlier := previous[signum]) is not None:  # None: not set from Python
                signal.signal(signum, earlier)
