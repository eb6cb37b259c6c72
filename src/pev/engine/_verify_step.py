"""The verifying step: verdict, diagnosis and decision for the round that ran, in one write.

The step checks the required evidence, calls the verifier under the engine's guard (its own
``verify_timeout_s`` and the task deadline; the task's cancel), classifies what it returned, has
the kernel diagnose and decide, and writes the verdict with the decision's events in one
transaction (see docs/engine.md, "Verification and dispatch").
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from pev import codec
from pev._json import ValueLimits, value_problem
from pev.chat import LLMError
from pev.engine._calls import BUGS, CancelledMeanwhile, GuardedCall
from pev.engine._deadline import earliest
from pev.engine._failures import noted
from pev.engine._host import TaskHost, current
from pev.engine._protocols import VerifyRequest
from pev.engine._recordable import safe_text
from pev.engine._typed import UNTYPED, AgentTypes
from pev.errors import UsageError
from pev.kernel import Budget, decide, diagnose
from pev.ledger import (
    Diagnosed,
    Event,
    TaskState,
    VerdictRecorded,
    dispatch,
    executed_ok,
    known_refs,
    lineage_records,
    lineage_results,
    missing_evidence,
)
from pev.model import Reliability, Verdict, VerificationMode, classify_verdict, passes
from pev.model._assess import VerdictCheck, raw_digest

__all__ = ["VerifyStep"]


class VerifyStep:
    """Verifies the current revision's round, for whatever drives it (a :class:`TaskHost`)."""

    __slots__ = ("_cancel", "_host", "_lessons", "_types", "_verify")

    def __init__(
        self,
        host: TaskHost,
        verify: Callable[..., Awaitable[Any]] | None,
        *,
        cancel: asyncio.Event,
        lessons: tuple[str, ...],
        types: AgentTypes = UNTYPED,
    ) -> None:
        self._host = host
        self._verify = verify
        self._cancel = cancel
        self._lessons = lessons
        self._types = types  # the agent's input type, to read the recorded input as

    async def run(self) -> None:
        """Verify, diagnose and decide; write it all at once (nothing if time ran out)."""
        host = self._host
        state = host.state
        revision = current(state)
        mode = state.contract.mode
        events: list[Event] = []
        verdict = None
        reliability: Reliability | None = None
        missing = (
            missing_evidence(state, revision.number) if mode is not VerificationMode.OFF else ()
        )
        # Enforce and recovery stop on missing evidence without asking the verifier. Audit asks
        # it anyway (its outcome follows execution) and records recovery's stop as the shadow.
        stop = bool(missing) and mode in (VerificationMode.ENFORCE, VerificationMode.RECOVERY)
        if stop:
            events.append(
                VerdictRecorded(
                    revision=revision.number,
                    verdict=None,
                    reliability=None,
                    problems=tuple(f"no fresh 'after' evidence of kind {k!r}" for k in missing),
                    evidence_missing=True,
                )
            )
        elif mode is not VerificationMode.OFF:
            recorded = await self._call_verifier(state)
            if recorded is None:
                return  # out of time: the loop ends the task
            events.append(recorded)
            verdict, reliability = recorded.verdict, recorded.reliability
        diagnosis = None
        if mode is not VerificationMode.OFF and not stop and not passes(verdict, reliability):
            diagnosis = diagnose(
                verdict, reliability or Reliability.MALFORMED, lineage_results(state)
            )
            events.append(Diagnosed(revision=revision.number, diagnosis=diagnosis))
        decision = decide(
            mode,
            executed_ok=executed_ok(state),
            verdict=verdict,
            reliability=reliability,
            diagnosis=diagnosis,
            budget=Budget(
                state.replans_used, state.policy.max_replans, state.created.task_deadline
            ),
            now=host.deadline.now(),
            evidence_missing=bool(missing),
            local_limit=state.policy.local_limit,
        )
        events.extend(dispatch(state, decision, now=host.deadline.now()))
        await host.write(events)

    async def _call_verifier(self, state: TaskState) -> VerdictRecorded | None:
        """Call the verifier under the engine's guard; ``None`` if the task ran out of time."""
        verify = self._verify
        if verify is None:
            raise UsageError("every verification mode but 'off' needs a verifier")
        revision = current(state)
        request = VerifyRequest(
            task_id=state.task_id,
            input=self._types.typed_input(state.created.input),
            contract=state.contract,
            plan=revision.plan,
            revision=revision.number,
            results=lineage_results(state),
            records=lineage_records(state),
            evidence=state.evidence,
            lessons=self._lessons,
            reconciled={
                record_id: event.result
                for record_id, event in state.reconciled.items()
                if state.records[record_id].revision >= revision.lineage
            },
        )
        own = state.policy.verify_timeout_s
        remaining = self._host.deadline.remaining_s()
        call = GuardedCall()
        limit = earliest(own, remaining)
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            raw = await call.run(verify(request), timeout=limit, cancel=self._cancel)
        except CancelledMeanwhile:
            return None  # the loop ends the task as cancelled
        except TimeoutError as exc:
            if limit is None or loop.time() - started < limit:
                # The verifier's own TimeoutError, raised before any deadline of the engine's.
                text = noted(exc, task_id=state.task_id, who="the verifier")
                return _thrown(revision.number, f"the verifier raised {text}")
            if remaining is not None and (own is None or remaining < own):
                return None
            return _thrown(revision.number, f"the verifier ran past verify_timeout_s={own:g}")
        except BUGS:
            raise
        except Exception as exc:  # noqa: BLE001 - a verifier that raises is `thrown`
            text = noted(exc, task_id=state.task_id, who="the verifier")
            if isinstance(exc, LLMError) and exc.unreachable:
                # An outage, not a verdict: the detail says so (the verdict is untrustworthy).
                return _thrown(
                    revision.number, f"the verifier's model could not be reached: {text}"
                )
            return _thrown(revision.number, f"the verifier raised {text}")
        check = _checked(raw, state, state.policy.value_limits)
        return VerdictRecorded(
            revision=revision.number,
            verdict=check.verdict,
            reliability=check.reliability,
            raw_digest=check.raw_digest,
            problems=tuple(safe_text(problem, _PROBLEM_CHARS) for problem in check.problems),
            usage=call.usage,
        )


_PROBLEM_CHARS = 2000  # characters of one problem kept in the ledger


def _checked(raw: object, state: TaskState, limits: ValueLimits) -> VerdictCheck:
    """The engine's reading of what the verifier returned, as the ledger can hold it.

    Whatever the verifier returned never escapes: a return that cannot even be read, or a
    verdict the ledger cannot record (text that is not valid Unicode, a value past the limits,
    a field of the wrong type), is ``malformed``, with the reason among its problems.
    """
    revision = current(state)
    try:
        check = classify_verdict(
            raw, contract=state.contract, plan=revision.plan, known_refs=known_refs(state)
        )
    except Exception as exc:  # noqa: BLE001 - the verifier's own objects may fail to be read
        return VerdictCheck(
            reliability=Reliability.MALFORMED,
            verdict=None,
            problems=(f"the verifier's return could not be read ({type(exc).__name__}: {exc})",),
            raw_digest=_digest_of(raw),
        )
    if check.verdict is None:
        return check
    problem = _unrecordable(check.verdict, limits)
    if problem is None:
        return check
    return VerdictCheck(
        reliability=Reliability.MALFORMED,
        verdict=None,
        problems=(*check.problems, f"the verdict cannot be recorded: {problem}"),
        raw_digest=check.raw_digest,
    )


def _unrecordable(verdict: Verdict, limits: ValueLimits) -> str | None:
    """Why the ledger cannot hold ``verdict`` and read it back the same, or ``None``."""
    try:
        fields: dict[str, object] = {
            "status": verdict.status,
            "feedback": verdict.feedback,
            "guidance": verdict.guidance,
            "failed_nodes": list(verdict.failed_nodes),
            "unmet_criteria": list(verdict.unmet_criteria),
            "preserved_constraints": list(verdict.preserved_constraints),
            "evidence_refs": list(verdict.evidence_refs),
        }
        for index, result in enumerate(verdict.criteria):
            fields[f"criteria[{index}]"] = [
                result.criterion,
                result.status,
                list(result.evidence_refs),
            ]
        for name, value in fields.items():
            problem = value_problem(value, limits, path=name)
            if problem is not None:
                return problem
        if codec.loads(codec.dumps(verdict), Verdict) != verdict:
            return "it does not read back from the ledger as it was returned"
    except Exception as exc:  # noqa: BLE001 - whatever fails here is the reason
        return f"{type(exc).__name__}: {exc}"
    return None


def _digest_of(raw: object) -> str:
    try:
        return raw_digest(raw)
    except Exception:  # noqa: BLE001 - a return that cannot even be hashed has no digest
        return ""


def _thrown(revision: int, problem: str) -> VerdictRecorded:
    return VerdictRecorded(
        revision=revision, verdict=None, reliability=Reliability.THROWN, problems=(problem,)
    )
