"""What running one node produced: the execution facts the kernel decides on.

See docs/design.md §2.2.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import ClassVar, Literal, TypeAlias

from pev._canonical import ADDED
from pev._json import JsonValue, freeze_json
from pev.model._attempts import Attempt

__all__ = ["DeviceFailure", "NodeResult", "Success", "VerifierFailure", "as_node_result"]


# The three result types keep the documented positional signatures, which are public API.
# `attempts` came later: keyword-only, left out of the JSON while empty (so results written
# before it existed keep their text and hashes), and out of equality (how many tries a call
# took is its history, not what it produced).
@dataclass(frozen=True, slots=True)
class Success:
    """The node ran and produced ``value`` (a JSON value, frozen).

    Attributes:
        value: What the node produced.
        attempts: Each attempt of a tool call that its retry policy made more than once (the
            last one succeeded); empty for a call made once.
    """

    kind: ClassVar[Literal["success"]] = "success"
    value: JsonValue = None
    attempts: tuple[Attempt, ...] = field(
        default=(), kw_only=True, compare=False, repr=False, metadata=ADDED
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "value", freeze_json(self.value, path="value"))


@dataclass(frozen=True, slots=True)
class DeviceFailure:
    """The tool, device or infrastructure failed.

    Attributes:
        node_id: The node that failed.
        error: What went wrong, in words.
        is_timeout: The call ran past its deadline.
        outcome_unknown: The action may or may not have taken effect (a timeout or crash of an
            ``action`` node); such an action is never sent again blindly.
        attempts: Each attempt of a tool call that its retry policy made more than once (the
            last one is this failure); empty for a call made once.
    """

    kind: ClassVar[Literal["device_failure"]] = "device_failure"
    node_id: str
    error: str
    is_timeout: bool = False
    outcome_unknown: bool = False
    attempts: tuple[Attempt, ...] = field(
        default=(), kw_only=True, compare=False, repr=False, metadata=ADDED
    )


@dataclass(frozen=True, slots=True)
class VerifierFailure:
    """The node ran, but a node-level check of its output failed; never a device fault.

    Attributes:
        node_id: The node.
        reason: What the check found.
        attempts: Each attempt of a tool call that its retry policy made more than once;
            empty for a call made once.
    """

    kind: ClassVar[Literal["verifier_failure"]] = "verifier_failure"
    node_id: str
    reason: str
    attempts: tuple[Attempt, ...] = field(
        default=(), kw_only=True, compare=False, repr=False, metadata=ADDED
    )


NodeResult: TypeAlias = Success | DeviceFailure | VerifierFailure
"""The result of one node: a success, a device failure or a node-level check failure."""


def as_node_result(node_id: str, value: object, *, source: str, action: bool = False) -> NodeResult:
    """A tool's or function's return value as the result of node ``node_id``.

    A node result passes through, stamped with the node's id (a tool does not know it); any
    other value is a :class:`Success`, or a :class:`DeviceFailure` when JSON cannot hold it:
    its outcome is unknown for an action (it ran; what it did is not recorded).

    Args:
        node_id: The node that ran.
        value: What the tool or function returned.
        source: Who returned it, for the failure message (``"tool 'pick'"``).
        action: Whether the node is an action.
    """
    if isinstance(value, Success):
        return value
    if isinstance(value, DeviceFailure | VerifierFailure):
        return value if value.node_id == node_id else replace(value, node_id=node_id)
    try:
        return Success(value)  # type: ignore[arg-type]  # freeze_json checks it at run time
    except Exception as exc:  # noqa: BLE001 - a value that cannot be read is not JSON either
        # freeze_json's own errors name the place; anything else is named by its type.
        why = (
            str(exc) if isinstance(exc, TypeError | ValueError) else f"{type(exc).__name__}: {exc}"
        )
        note = "; the action ran, but what it returned is not recorded" if action else ""
        return DeviceFailure(
            node_id, f"{source} returned a non-JSON value ({why}){note}", outcome_unknown=action
        )
