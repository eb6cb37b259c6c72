"""The observing step: evidence captured before a revision's first action and after its round.

The step calls the observer (within the task deadline), stamps id, time, phase and revision on
each observation, and writes the evidence, or a ``capture_failed`` event when the observer
raised or timed out: a failed capture is recorded, not fatal (see docs/engine.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from pev.engine._host import TaskHost, current
from pev.engine._protocols import Observation, ObserveContext
from pev.ledger import CaptureFailed, Event, EvidenceCaptured, lineage_results
from pev.model import Evidence, EvidenceId, EvidencePhase

__all__ = ["ObserveStep"]


class ObserveStep:
    """Captures evidence of the current revision, for whatever drives it (a :class:`TaskHost`)."""

    __slots__ = ("_host", "_observe")

    def __init__(self, host: TaskHost, observe: Callable[..., Awaitable[Any]]) -> None:
        self._host = host
        self._observe = observe

    async def run(self, phase: EvidencePhase) -> None:
        """Ask the observer and write what it captured (or that the capture failed)."""
        host = self._host
        state = host.state
        revision = current(state)
        context = ObserveContext(
            task_id=state.task_id,
            revision=revision.number,
            plan=revision.plan,
            results=lineage_results(state),
        )
        try:
            returned = await asyncio.wait_for(
                self._observe(phase, context), host.deadline.remaining_s()
            )
            observations = list(returned) if isinstance(returned, list | tuple) else [returned]
            now = host.deadline.now()
            first = len(state.evidence) + 1
            events: list[Event] = [
                EvidenceCaptured(
                    evidence=_evidence(item, phase, revision.number, now, first + offset)
                )
                for offset, item in enumerate(observations)
            ]
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed capture is recorded, not fatal
            events = [
                CaptureFailed(
                    revision=revision.number, phase=phase, error=f"{type(exc).__name__}: {exc}"
                )
            ]
        await host.write(events)


def _evidence(
    item: object, phase: EvidencePhase, revision: int, now: datetime, number: int
) -> Evidence:
    if isinstance(item, Evidence):
        return item
    if not isinstance(item, Observation):
        raise TypeError(f"the observer returned a {type(item).__name__}, not an Observation")
    # Numbered in capture order, so a seeded run writes the same ids every time.
    return Evidence(
        id=EvidenceId(f"{revision}-{phase}-{number}"),
        phase=phase,
        kind=item.kind,
        source=item.source,
        captured_at=now,
        revision=revision,
        payload=item.payload,
        artifact=item.artifact,
        media_type=item.media_type,
    )
