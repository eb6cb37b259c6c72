"""The command's first moments: SIGTERM and Ctrl-C noted until a command takes them over.

Loading pev's engine takes a fraction of a second. A SIGTERM in that time used to end the process
with the default action (exit 143, no drain) before `pev worker` could install its own handling.
So the entry point (:func:`pev.cli.main`) installs :class:`EarlySignals` first, before it loads
anything else (``import pev`` itself loads none of the engine), and the group's callback, which
knows the subcommand, then either hands the signals back (every command but ``worker``: a signal
noted meanwhile is delivered as it would have been) or leaves them to the worker, which goes on
noting them until its loop takes them over (:func:`pev._signals.stop_on_signals`) and then stops
at once (exit 0) if one came. Nothing is kept in a module: the handler installed in the signal
table is the one place the noted signal lives (:meth:`EarlySignals.installed`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from pev._signals import STOP_SIGNALS

__all__ = ["EarlySignals", "Handler"]

Handler = Callable[[int, FrameType | None], Any] | int | signal.Handlers | None
"""What ``signal.getsignal`` answers: a handler to put back with ``signal.signal``."""


class EarlySignals:
    """SIGTERM and SIGINT noted (not acted on) from the moment it is installed.

    Attributes:
        received: The first signal noted, or ``None``.
        previous: The handlers there were before, by signal.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.previous: dict[int, Handler] = {}

    @classmethod
    def install(cls) -> EarlySignals:
        """Note SIGTERM and SIGINT from now on (only the main thread may set handlers)."""
        early = cls()
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                early.previous[signum] = signal.getsignal(signum)
                signal.signal(signum, early._note)
        return early

    @classmethod
    def installed(cls) -> EarlySignals | None:
        """The early handlers in place now, if SIGTERM's handler is still theirs."""
        owner = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
        return owner if isinstance(owner, cls) else None

    def take_back(self) -> None:
        """Note the signals again after a library set its own handlers (joining Ray does)."""
        if threading.current_thread() is threading.main_thread():
            for signum in self.previous:
                signal.signal(signum, self._note)

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def restore(self) -> None:
        """Put back the handlers there were before, where these are still in place."""
        for signum, earlier in self.previous.items():
            current = signal.getsignal(signum)
            if getattr(current, "__self__", None) is self and earlier is not None:
                signal.signal(signum, earlier)

    def hand_back(self) -> None:
        """Restore the earlier handlers; deliver a signal noted meanwhile as it would have been."""
        self.restore()
        if self.received is not None:
            signal.raise_signal(self.received)
