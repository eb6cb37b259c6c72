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

from pev.engine._failures import Interrupted, carried, noted
from pev.engine._host import TaskHost, current
from pev.engine._protocols import Observation, ObserveContext
from pev.engine._recordable import evidence_problem, safe_text
from pev.ledger import CaptureFailed, Event, EvidenceCaptured, lineage_results
from pev.model import Evidence, EvidenceId, EvidencePhase

__all__ = ["ObserveStep"]

_ERROR_CHARS = 2000  # characters of a capture failure kept in the ledger


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
        events: list[Event]
        try:
            # Through `carried`: an interrupt must not leave wait_for's task as itself.
            returned = await asyncio.wait_for(
                carried(self._observe(phase, context)), host.deadline.remaining_s()
            )
        except Interrupted as interrupted:
            raise interrupted.raised from None
        except AssertionError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed capture is recorded, not fatal
            error = noted(exc, task_id=state.task_id, who=f"the observer ({phase})")
            events = [CaptureFailed(revision=revision.number, phase=phase, error=error)]
        else:
            events = self._captured(returned, phase)
        await host.write(events)

    def _captured(self, returned: object, phase: EvidencePhase) -> list[Event]:
        """The evidence events of what the observer returned, or one capture failure.

        An observation the ledger cannot hold (not an observation at all, a payload that is not
        JSON or is past the policy's limits) fails the whole capture, naming the problem.
        """
        state = self._host.state
        revision = current(state).number
        limits = state.policy.value_limits
        now = self._host.deadline.now()
        first = len(state.evidence) + 1
        captured: list[Event] = []
        observations = returned if isinstance(returned, list | tuple) else (returned,)
        for offset, item in enumerate(observations):
            try:
                evidence = _evidence(item, phase, revision, now, first + offset)
            except Exception as exc:  # noqa: BLE001 - a bad observation is a failed capture
                problem: str | None = f"{type(exc).__name__}: {exc}"
            else:
                problem = evidence_problem(evidence, limits)
                if problem is None:
                    captured.append(EvidenceCaptured(evidence=evidence))
                    continue
            error = safe_text(f"observation {offset + 1}: {problem}", _ERROR_CHARS)
            return [CaptureFailed(revision=revision, phase=phase, error=error)]
        return captured


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
