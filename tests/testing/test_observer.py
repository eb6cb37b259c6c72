"""ScriptedObserver and StaticObserver: observations for evidence-driven tests."""

from __future__ import annotations

import pytest

from pev.engine import Observation, ObserveContext, Observer
from pev.model import EvidencePhase
from pev.testing import ScriptedObserver, StaticObserver

BEFORE, AFTER = EvidencePhase.BEFORE, EvidencePhase.AFTER
STATE = Observation(kind="state", payload={"red": "table"})
IMAGE = Observation(kind="image", artifact=b"\x89PNG", media_type="image/png")


async def test_scripted_returns_steps_in_order(observe_context: ObserveContext) -> None:
    """Each call returns the next scripted observation, or list of them."""
    observer = ScriptedObserver(STATE, [STATE, IMAGE])
    assert await observer.observe(BEFORE, observe_context) is STATE
    assert await observer.observe(AFTER, observe_context) == [STATE, IMAGE]


async def test_scripted_exception_is_raised(observe_context: ObserveContext) -> None:
    """An exception step is raised from observe()."""
    with pytest.raises(OSError, match="camera unplugged"):
        await ScriptedObserver(OSError("camera unplugged")).observe(BEFORE, observe_context)


async def test_scripted_function_gets_phase_and_context(observe_context: ObserveContext) -> None:
    """A function step is called with (phase, context) and its return value is the answer."""
    observer = ScriptedObserver(
        lambda phase, context: Observation(kind="state", payload={"phase": phase.value})
    )
    observation = await observer.observe(AFTER, observe_context)
    assert observation == Observation(kind="state", payload={"phase": "after"})


async def test_scripted_async_function_is_awaited(observe_context: ObserveContext) -> None:
    """An async function step is awaited."""

    async def snapshot(phase: EvidencePhase, context: ObserveContext) -> Observation:
        return STATE

    assert await ScriptedObserver(snapshot).observe(BEFORE, observe_context) is STATE


async def test_scripted_records_phase_and_context(observe_context: ObserveContext) -> None:
    """requests keeps (phase, context) per call; calls and phases summarise them."""
    observer = ScriptedObserver(STATE, repeat_last=True)
    await observer.observe(BEFORE, observe_context)
    await observer.observe(AFTER, observe_context)
    assert observer.requests == ((BEFORE, observe_context), (AFTER, observe_context))
    assert observer.calls == 2
    assert observer.phases == (BEFORE, AFTER)


async def test_scripted_running_out_raises_lookup_error(observe_context: ObserveContext) -> None:
    """A call past the last step raises LookupError naming the observer."""
    with pytest.raises(LookupError, match="ScriptedObserver ran out of steps after 0 calls"):
        await ScriptedObserver().observe(BEFORE, observe_context)


def test_scripted_refuses_a_step_of_the_wrong_type() -> None:
    """A step that is not an observation, a list of them, an exception or a function fails."""
    with pytest.raises(TypeError, match="step 0 is a dict"):
        ScriptedObserver({"kind": "state"})  # type: ignore[arg-type]


async def test_static_returns_the_same_observation_every_call(
    observe_context: ObserveContext,
) -> None:
    """StaticObserver returns its one observation on every call, whatever the phase."""
    observer = StaticObserver(payload={"red": "tray"})
    first = await observer.observe(BEFORE, observe_context)
    assert first == Observation(kind="state", payload={"red": "tray"})
    assert await observer.observe(AFTER, observe_context) is first


async def test_static_records_calls(observe_context: ObserveContext) -> None:
    """StaticObserver records (phase, context) per call too."""
    observer = StaticObserver("image", artifact=b"png", media_type="image/png")
    await observer.observe(AFTER, observe_context)
    assert observer.requests == ((AFTER, observe_context),)
    assert observer.observation.kind == "image"


@pytest.mark.parametrize(
    "observer",
    [pytest.param(ScriptedObserver(), id="scripted"), pytest.param(StaticObserver(), id="static")],
)
def test_is_an_observer(observer: object) -> None:
    """Both satisfy the engine's Observer protocol."""
    assert isinstance(observer, Observer)
