"""Failures that speak (docs/engine.md): every component's exception is recorded and logged.

Each exception is written down with its type, message and the innermost frame of the
component's own code, and logged as a warning with its traceback through the ``pev`` logger;
``RunResult.detail`` names each failed node with its error.
"""

from __future__ import annotations

import inspect
import logging
import subprocess
import sys
import textwrap
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from tests.support.watering import CRITERION, GOAL, RECOVERY

import pev
from pev.engine import ObserveContext, PlanRequest, VerifyRequest
from pev.ledger import CaptureFailed, PlanRejected, VerdictRecorded
from pev.model import EvidencePhase, Plan, PlanNode, Reliability, Verdict
from pev.rails import RailEvent
from pev.testing import ScriptedPlanner, ScriptedVerifier

if TYPE_CHECKING:  # the fixture's type, for readers and editors; conftest is not importable
    from conftest import Engine

HERE = "test_failures_speak.py"
OFF = pev.VerificationContract("off")


def _line(fn: Callable[..., object], text: str) -> int:
    """The line of ``fn``'s source that holds ``text``."""
    lines, first = inspect.getsourcelines(fn)
    return first + next(index for index, line in enumerate(lines) if text in line)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("pev") and r.levelno >= logging.WARNING]


@pev.tool(effect="query")
def find_room(guests: int) -> str:
    """Find a room for the guests."""
    return "r1" if guests else "none"


@pev.tool
def book_room(room: str) -> str:
    """Book the room (an action)."""
    booked: dict[str, str] = {}
    return booked["room"]  # a KeyError, as in the issue


@pev.tool
def send_confirmation(room: str) -> str:
    """Send the guest a confirmation."""
    return f"sent for {room}"


BOOKING = Plan(
    "book a room",
    (
        PlanNode("n1", "find a room", tool="find_room", args={"guests": 2}),
        PlanNode("n2", "book it", tool="book_room", args={"room": {"$ref": "n1"}}, after=("n1",)),
        PlanNode("n3", "confirm", tool="send_confirmation", args={"room": "r1"}, after=("n2",)),
    ),
)
TOOLS = [find_room, book_room, send_confirmation]


async def test_a_tool_key_error_is_named_in_the_detail_with_its_frame(engine: Engine) -> None:
    """The issue's tool KeyError: the detail names the node, the tool, 'room' and the line."""
    result = await engine.run(planner=ScriptedPlanner(BOOKING), tools=TOOLS, contract=OFF)

    line = _line(book_room.fn, 'booked["room"]')
    assert (result.status, result.reason) == ("failed", "execution_failed")
    assert f"n2 (book_room): KeyError: 'room' at {HERE}:{line} in book_room" in result.detail


async def test_a_tool_exception_is_logged_as_a_warning_with_its_traceback(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A tool's exception is a WARNING on a pev logger, with the exception itself attached."""
    with caplog.at_level(logging.WARNING, logger="pev"):
        result = await engine.run(planner=ScriptedPlanner(BOOKING), tools=TOOLS, contract=OFF)

    [warning] = _warnings(caplog)
    assert warning.levelno == logging.WARNING
    assert warning.exc_info is not None
    assert isinstance(warning.exc_info[1], KeyError)
    assert result.task_id in warning.getMessage()
    assert "tool 'book_room' of node 'n2'" in warning.getMessage()


async def test_the_detail_names_dependents_that_did_not_run(engine: Engine) -> None:
    """A node skipped because its dependency failed is named with the dependency."""
    result = await engine.run(planner=ScriptedPlanner(BOOKING), tools=TOOLS, contract=OFF)

    assert result.detail.endswith("n3 (send_confirmation): not run, as n2 did not succeed")
    assert result.failed_nodes == {"n2", "n3"}


async def test_a_custom_executor_exception_is_named_and_logged(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """An executor (not tools) that raises is recorded and logged the same way."""

    class Arm:
        async def execute(self, node: PlanNode, context: object) -> object:
            raise RuntimeError(f"arm stuck at {node.id}")

    plan = Plan(GOAL, (PlanNode("grab", "grab the can"),))
    with caplog.at_level(logging.WARNING, logger="pev"):
        result = await engine.run(planner=ScriptedPlanner(plan), executor=Arm(), contract=OFF)

    line = _line(Arm.execute, "raise RuntimeError")
    assert f"grab: RuntimeError: arm stuck at grab at {HERE}:{line} in execute" in result.detail
    assert any(isinstance(r.exc_info and r.exc_info[1], RuntimeError) for r in _warnings(caplog))


def typo_planner(request: PlanRequest) -> Plan:
    """A planner with a programming error: a TypeError in its own code."""
    node = PlanNode("n1", "water", bogus=1)  # type: ignore[call-arg]
    return Plan(request.contract.goal, (node,))


async def test_a_planner_type_error_is_rejected_naming_type_message_and_frame(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """The issue's planner TypeError: the rejection names its type, message and line."""
    with caplog.at_level(logging.WARNING, logger="pev"):
        result = await engine.run(
            planner=typo_planner,
            tools=TOOLS,
            verifier=ScriptedVerifier.passing(),
            contract=RECOVERY,
        )

    rejected = [e for e in await engine.events(result.task_id) if isinstance(e, PlanRejected)]
    line = _line(typo_planner, "bogus=1")
    problem = rejected[0].problems[0]
    assert problem.startswith("the planner raised TypeError: ")
    assert "bogus" in problem
    assert problem.endswith(f" at {HERE}:{line} in typo_planner")
    assert (result.status, result.reason) == ("failed", "invalid_plan")
    warnings = _warnings(caplog)
    assert len(warnings) == len(rejected) == 3  # the first plan and both replans
    assert all(isinstance(r.exc_info and r.exc_info[1], TypeError) for r in warnings)


def crashing_verifier(request: VerifyRequest) -> Verdict:
    """A verifier whose vision model is down."""
    raise ConnectionError("vision model down")


async def test_a_verifier_exception_is_recorded_in_its_verdict_event(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A verifier's exception is the verdict event's problem, in the detail, and a warning."""
    plan = Plan(GOAL, (PlanNode("look", "look", tool="find_room", args={"guests": 1}),))
    with caplog.at_level(logging.WARNING, logger="pev"):
        result = await engine.run(
            planner=ScriptedPlanner(plan),
            tools=TOOLS,
            verifier=crashing_verifier,
            contract=RECOVERY,
        )

    [recorded] = [e for e in await engine.events(result.task_id) if isinstance(e, VerdictRecorded)]
    line = _line(crashing_verifier, "raise ConnectionError")
    expected = (
        f"the verifier raised ConnectionError: vision model down at {HERE}:{line} "
        "in crashing_verifier"
    )
    assert recorded.reliability is Reliability.THROWN
    assert recorded.problems == (expected,)
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")
    assert f"verifier: {expected}" in result.detail
    assert any(isinstance(r.exc_info and r.exc_info[1], ConnectionError) for r in _warnings(caplog))


def verifier_raising_timeout(request: VerifyRequest) -> Verdict:
    """A verifier whose camera times out on its own, with no verify_timeout_s set."""
    raise TimeoutError("slow camera")


async def test_a_verifiers_own_timeout_error_is_recorded_as_raised(engine: Engine) -> None:
    """A TimeoutError the verifier raises itself is its exception, not a deadline of pev's."""
    plan = Plan(GOAL, (PlanNode("look", "look", tool="find_room", args={"guests": 1}),))
    result = await engine.run(
        planner=ScriptedPlanner(plan),
        tools=TOOLS,
        verifier=verifier_raising_timeout,
        contract=RECOVERY,
    )

    [recorded] = [e for e in await engine.events(result.task_id) if isinstance(e, VerdictRecorded)]
    assert recorded.reliability is Reliability.THROWN
    assert recorded.problems[0].startswith("the verifier raised TimeoutError: slow camera at ")
    assert (result.status, result.reason) == ("partial", "verifier_unreliable")


def checking_verifier(request: VerifyRequest) -> Verdict:
    """A verifier that quotes its criterion with a trailing full stop."""
    return Verdict.from_checks(request.contract, {"the soil is damp.": True})


async def test_a_criterion_typo_in_a_verifier_names_the_closest_criterion(engine: Engine) -> None:
    """The issue's from_checks case ends verifier_unreliable with the typo named in the detail."""
    plan = Plan(GOAL, (PlanNode("look", "look", tool="find_room", args={"guests": 1}),))
    result = await engine.run(
        planner=ScriptedPlanner(plan), tools=TOOLS, verifier=checking_verifier, contract=RECOVERY
    )

    assert (result.status, result.reason) == ("partial", "verifier_unreliable")
    assert "'the soil is damp.'" in result.detail
    assert f"did you mean {CRITERION!r}?" in result.detail
    assert "ContractError" in result.detail


def broken_camera(phase: EvidencePhase, context: ObserveContext) -> object:
    """An observer whose camera is unplugged."""
    raise OSError("camera unplugged")


async def test_an_observer_exception_is_a_capture_failure_naming_its_frame(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """An observer's exception is a capture_failed event with its frame, and a warning."""
    plan = Plan(GOAL, (PlanNode("look", "look", tool="find_room", args={"guests": 1}),))
    with caplog.at_level(logging.WARNING, logger="pev"):
        result = await engine.run(
            planner=ScriptedPlanner(plan), tools=TOOLS, observer=broken_camera, contract=OFF
        )

    failures = [e for e in await engine.events(result.task_id) if isinstance(e, CaptureFailed)]
    line = _line(broken_camera, "raise OSError")
    assert [f.error for f in failures] == [
        f"OSError: camera unplugged at {HERE}:{line} in broken_camera"
    ] * 2  # before and after the round
    assert result.ok
    assert (
        len([r for r in _warnings(caplog) if isinstance(r.exc_info and r.exc_info[1], OSError)])
        == 2
    )


def grumpy_rail(event: RailEvent) -> None:
    """A rail with a bug."""
    raise ValueError(f"cannot handle {event.phase}")


async def test_a_rail_exception_is_logged_with_its_frame_and_changes_nothing(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    """A rail's exception is logged (with its frame and traceback); the run is unchanged."""
    plan = Plan(GOAL, (PlanNode("look", "look", tool="find_room", args={"guests": 1}),))
    with caplog.at_level(logging.WARNING, logger="pev"):
        result = await engine.run(
            planner=ScriptedPlanner(plan), tools=TOOLS, rails=[grumpy_rail], contract=OFF
        )

    assert result.ok
    logged = [r for r in _warnings(caplog) if r.name == "pev.rails"]
    line = _line(grumpy_rail, "raise ValueError")
    assert logged
    assert all(f"at {HERE}:{line} in grumpy_rail" in r.getMessage() for r in logged)
    assert all(isinstance(r.exc_info and r.exc_info[1], ValueError) for r in logged)


def test_pev_logs_through_a_null_handler_only() -> None:
    """Importing pev adds one NullHandler to the "pev" logger and configures nothing else;
    a failing tool prints nothing without the application's own logging setup."""
    script = textwrap.dedent(
        """
        import logging
        import pev, pev.engine, pev.rails, pev.stores, pev.testing, pev.experience
        from pev.model import Plan, PlanNode

        @pev.tool(effect="query")
        def boom() -> None:
            raise KeyError("room")

        result = pev.run_sync(
            "x", planner=lambda request: Plan("x", (PlanNode("n", "boom", tool="boom"),)),
            tools=[boom],
        )
        assert result.reason == "execution_failed", result
        handlers = logging.getLogger("pev").handlers
        assert [type(h) for h in handlers] == [logging.NullHandler], handlers
        assert logging.getLogger().handlers == [], logging.getLogger().handlers
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, "ok\n", "")


def exhausted_planner(request: PlanRequest) -> Plan:
    """A sync planner that lets a StopIteration out (an iterator it ran dry)."""
    return next(iter(()))


@pev.tool(effect="query")
def exhausted_tool() -> str:
    """A sync tool that lets a StopIteration out."""
    return next(iter(()))


async def test_a_stop_iteration_from_sync_code_is_recorded_not_a_hang(engine: Engine) -> None:
    """A future cannot carry StopIteration: it becomes a RuntimeError at the component's line."""
    rejected = await engine.run(planner=exhausted_planner, tools=[exhausted_tool], contract=OFF)
    line = _line(exhausted_planner, "next(iter(()))")
    assert rejected.detail.endswith(
        f"the planner raised RuntimeError: raised StopIteration at {HERE}:{line} "
        "in exhausted_planner"
    )

    plan = Plan(GOAL, (PlanNode("n", "look", tool="exhausted_tool"),))
    failed = await engine.run(planner=ScriptedPlanner(plan), tools=[exhausted_tool], contract=OFF)
    assert "n (exhausted_tool): RuntimeError: raised StopIteration at " in failed.detail
