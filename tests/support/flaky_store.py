"""A store that loses answers: the faults of a dropped connection, in process and reproducible.

:class:`FlakyStore` is the in-memory store with faults injected where a connection can break:

* an append that fails *before* it reaches the store (nothing written), or *after* it committed
  (written, the answer lost), both raising :class:`~pev.errors.StoreUnavailable`;
* reads (``read``, ``read_raw``, ``summary``) that fail the same way;
* an outage: every call fails until it is over.

Faults come from a script (``fail_appends``, ``fail_reads``) or at random (``chance``, seeded).
The counters say what happened, so a test can check that faults were really hit.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Sequence
from datetime import datetime
from typing import Literal

from pev.errors import StoreUnavailable
from pev.ledger import Lease, LedgerEntry, RawEntry, TaskSummary
from pev.stores import MemoryStore

Fault = Literal["before", "after", None]


class FlakyStore(MemoryStore):
    """The in-memory store, losing the answers of some of its calls.

    Args:
        chance: The probability that an append or a read fails at random.
        seed: The seed of the random faults.
    """

    def __init__(self, *, chance: float = 0.0, seed: int = 0) -> None:
        super().__init__()
        self.chance = chance
        self._random = random.Random(seed)  # noqa: S311 - faults drawn, not secrets
        self.fail_appends: deque[Fault] = deque()
        self.fail_reads = 0
        self.down_until = 0.0
        self.lost_before = 0
        self.lost_after = 0
        self.lost_reads = 0

    def outage(self, seconds: float) -> None:
        """Fail every call for the next ``seconds``."""
        self.down_until = time.monotonic() + seconds

    def _down(self) -> bool:
        return time.monotonic() < self.down_until

    def _broken(self, what: str) -> StoreUnavailable:
        return StoreUnavailable(f"the connection to the store was lost during a {what}")

    async def append(
        self, entries: Sequence[LedgerEntry], summary: TaskSummary, *, fence: Lease | None = None
    ) -> None:
        """Append, unless this append is to fail before or after it commits."""
        fault: Fault = self.fail_appends.popleft() if self.fail_appends else None
        if fault is None and self._random.random() < self.chance:
            fault = self._random.choice(("before", "after"))
        if self._down() or fault == "before":
            self.lost_before += 1
            raise self._broken("write")
        await super().append(entries, summary, fence=fence)
        if fault == "after":
            self.lost_after += 1
            raise self._broken("write")

    def _read_fault(self) -> None:
        if self._down() or self.fail_reads > 0 or self._random.random() < self.chance:
            self.fail_reads = max(self.fail_reads - 1, 0)
            self.lost_reads += 1
            raise self._broken("read")

    async def read(self, task_id: str, *, after: int = 0) -> tuple[LedgerEntry, ...]:
        """Read, unless this read is to fail."""
        self._read_fault()
        return await super().read(task_id, after=after)

    async def read_raw(self, task_id: str) -> tuple[RawEntry, ...]:
        """Read raw entries, unless this read is to fail."""
        self._read_fault()
        return await super().read_raw(task_id)

    async def summary(self, task_id: str) -> TaskSummary | None:
        """The index row, unless this read is to fail."""
        self._read_fault()
        return await super().summary(task_id)

    async def renew_lease(self, lease: Lease, *, now: datetime, lease_s: float) -> Lease:
        """Renew, unless the store is down."""
        if self._down():
            raise self._broken("lease renewal")
        return await super().renew_lease(lease, now=now, lease_s=lease_s)
