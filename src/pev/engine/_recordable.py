"""Values from components, as the ledger can hold them (docs/engine.md, "Failures that speak").

Whatever a tool, an executor, a ``reconcile`` or an observer hands back is checked before it is
written: a value the codec cannot encode, or one past the policy's ``max_value_depth`` /
``max_value_bytes``, must become a failure that names the problem, never an exception from the
write (which would leave a record ``pending`` after its action ran).
"""

from __future__ import annotations

from pev import codec
from pev._json import ValueLimits, value_problem
from pev.model import DeviceFailure, Evidence, NodeResult, Success, VerifierFailure

__all__ = ["evidence_problem", "recordable_result", "safe_text"]


def recordable_result(
    result: NodeResult, *, node_id: str, action: bool, limits: ValueLimits, source: str
) -> NodeResult:
    """``result``, or a failure naming why the ledger cannot hold it.

    A success whose value cannot be recorded ends ``failed`` for a query and ``unknown`` for an
    action (it ran; what it did is not recorded). A failure keeps its meaning with its text made
    storable (valid Unicode, at most ``limits.max_bytes`` characters) and its node id set.

    Args:
        result: What the executor returned, as a node result.
        node_id: The node that ran.
        action: Whether the node is an action.
        limits: The task policy's value limits.
        source: Who returned it, for the message (``"tool 'pick'"``, ``"the executor"``).
    """
    if isinstance(result, Success):
        problem = value_problem(result.value, limits, path="value")
        if problem is None:
            return result
        note = "; the action ran, but what it returned is not recorded" if action else ""
        return DeviceFailure(
            node_id,
            f"{source} returned a non-JSON value ({problem}){note}",
            outcome_unknown=action,
        )
    if isinstance(result, DeviceFailure):
        fixed: NodeResult = DeviceFailure(
            _node_id(result.node_id, node_id),
            safe_text(result.error, limits.max_bytes),
            is_timeout=result.is_timeout is True,
            outcome_unknown=result.outcome_unknown is True,
        )
    else:
        fixed = VerifierFailure(
            _node_id(result.node_id, node_id), safe_text(result.reason, limits.max_bytes)
        )
    return result if fixed == result else fixed


def evidence_problem(evidence: Evidence, limits: ValueLimits) -> str | None:
    """Why the ledger cannot hold an observation, or ``None`` when it can.

    Its text and payload are checked first (the codec must not meet a value it cannot walk);
    then it must read back from the ledger as the very same observation (an observer that
    builds its own :class:`~pev.model.Evidence` may give it a time without a zone, say).
    """
    for name in ("id", "kind", "source", "media_type"):
        problem = value_problem(getattr(evidence, name), limits, path=name)
        if problem is not None:
            return problem
    problem = value_problem(evidence.payload, limits, path="payload")
    if problem is not None:
        return problem
    try:
        copy: Evidence = codec.loads(codec.dumps(evidence), Evidence)
        same = copy == evidence
    except Exception as exc:  # noqa: BLE001 - whatever fails to round-trip is the problem
        return safe_text(f"it cannot be recorded as it is ({type(exc).__name__}: {exc})", 2000)
    return None if same else "it does not read back from the ledger as it was given"


def safe_text(value: object, limit: int) -> str:
    """``value`` as text the ledger can hold: a string, valid Unicode, at most ``limit`` long."""
    text = value if isinstance(value, str) else _shown(value)
    if len(text) > limit:
        text = text[:limit] + "…"
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _node_id(given: object, node_id: str) -> str:
    return given if isinstance(given, str) and value_problem(given) is None else node_id


def _shown(value: object) -> str:
    """``repr(value)``, for a component's value that may refuse to be shown."""
    try:
        return repr(value)
    except Exception:  # noqa: BLE001 - a huge int, an object whose __repr__ raises
        return f"<a {type(value).__name__} that cannot be shown>"
