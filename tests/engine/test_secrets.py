"""Secret tool parameters: defined by annotation, never planned, filled at call time.

See docs/tools.md ("Secrets"). Redaction of what a call returns or raises is in
test_secret_redaction.py; the end-to-end search for a planted secret in tests/test_secret_grep.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import pytest
from tests.support.modules import log_lines, user_module
from tests.support.tools import context, node

import pev
from pev.engine import Secret, ToolExecutor, ToolRegistry, tool
from pev.errors import PlanError, UsageError
from pev.ledger import Ledger
from pev.model import DeviceFailure, Plan, PlanNode, RecordStatus, Success, validate_plan
from pev.stores import SQLiteStore
from pev.testing import ScriptedPlanner

ENV = "PEV_TEST_PAYMENTS_TOKEN"
VALUE = f"sk-live-{secrets.token_hex(12)}"
PEV = Path(sys.executable).with_name("pev")


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    """The secret, set in the environment under ENV."""
    monkeypatch.setenv(ENV, VALUE)
    return VALUE


@pytest.fixture
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """ENV is not set."""
    monkeypatch.delenv(ENV, raising=False)


def get_token() -> str:
    """A provider: the value, from wherever the application keeps it."""
    return VALUE


async def fetch_token() -> str:
    """An async provider."""
    await asyncio.sleep(0)
    return VALUE


def charge_tool(received: list[str], secret: Secret | None = None) -> pev.engine.Tool[..., Any]:
    """An action tool whose secret parameter ``token`` it appends to ``received``."""

    def charge(amount: int, token: str) -> str:
        """Charge the card."""
        received.append(token)
        return f"charged {amount}"

    # Set here: a string annotation (this module's future import) cannot see a closure's names.
    charge.__annotations__["token"] = Annotated[str, secret or Secret(ENV)]
    return tool(charge)


async def call(item: pev.engine.Tool[..., Any], **args: Any) -> object:
    """Run ``item`` through the executor, as the engine does."""
    return await ToolExecutor([item]).execute(node(item.name, **args), context())


# -- the annotation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret", "shown"),
    [
        pytest.param(Secret("PAYMENTS_TOKEN"), "Secret('PAYMENTS_TOKEN')", id="env"),
        pytest.param(Secret(provider=get_token), "Secret(provider=get_token)", id="provider"),
    ],
)
def test_a_secret_shows_only_where_its_value_comes_from(secret: Secret, shown: str) -> None:
    """The repr names the variable or the provider function, and nothing else."""
    assert repr(secret) == shown


@pytest.mark.parametrize(
    "options",
    [pytest.param({}, id="neither"), pytest.param({"provider": get_token}, id="both")],
)
def test_a_secret_needs_exactly_one_source(options: dict[str, Any]) -> None:
    """Secret() and Secret(ENV, provider=...) are UsageErrors that show both right forms."""
    env = ENV if options else None
    with pytest.raises(UsageError, match=r"exactly one source: Secret\('ENV_NAME'\)"):
        Secret(env, **options)


@pytest.mark.parametrize("name", ["", "1ST_KEY", "MY-KEY", "A B", 7, "sk-live-0f3a9c"])
def test_a_secret_names_an_environment_variable_and_does_not_repeat_a_bad_one(
    name: object,
) -> None:
    """A name no variable could have (perhaps the value itself) is refused, not echoed."""
    with pytest.raises(UsageError, match="takes the name of an environment variable") as caught:
        Secret(name)  # type: ignore[arg-type]
    shown = str(caught.value)
    assert not isinstance(name, str) or not name or name not in shown


def test_a_secret_provider_must_be_callable() -> None:
    """provider= takes a function."""
    with pytest.raises(UsageError, match="takes a function"):
        Secret(provider="sk-in-the-code")  # type: ignore[arg-type]


def test_a_secret_parameter_is_left_out_of_the_spec() -> None:
    """The spec lists only planned parameters; the secret and its source are kept apart."""
    charge = charge_tool([])
    assert [param.name for param in charge.spec.parameters] == ["amount"]
    assert charge.spec.secrets == (("token", ENV),)
    assert dict(charge.secrets) == {"token": Secret(ENV)}


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(Annotated[int, Secret(ENV)], id="int"),
        pytest.param(Annotated[list[str], Secret(ENV)], id="list"),
        pytest.param(Annotated[Literal["a", "b"], Secret(ENV)], id="literal"),
        pytest.param(Annotated[str | int, Secret(ENV)], id="str-or-int"),
    ],
)
def test_only_a_str_parameter_may_be_a_secret(hint: object) -> None:
    """A Secret on anything but str (or str | None) is refused when the tool is defined."""

    def pay(token: str) -> None:
        """Pay."""

    pay.__annotations__["token"] = hint
    with pytest.raises(UsageError, match="handed to the tool as a plain str"):
        tool(pay)


def test_a_secret_annotates_the_parameter_itself_not_part_of_it() -> None:
    """list[Annotated[str, Secret(...)]] is refused: a secret fills a whole parameter."""
    with pytest.raises(UsageError, match="not a part of it"):

        @tool
        def pay(tokens: list[Annotated[str, Secret(ENV)]]) -> None:
            """Pay."""


def test_a_parameter_with_two_secrets_is_refused() -> None:
    """Two Secret annotations on one parameter: which one? A UsageError."""
    with pytest.raises(UsageError, match="2 Secret annotations"):

        @tool
        def pay(token: Annotated[str, Secret(ENV), Secret(provider=get_token)]) -> None:
            """Pay."""


@pytest.mark.parametrize(
    "hint",
    [
        pytest.param(Annotated[str | None, Secret(ENV)], id="annotated-optional"),
        pytest.param(Annotated[str, Secret(ENV)] | None, id="optional-annotated"),
    ],
)
def test_an_optional_str_secret_is_accepted(hint: object) -> None:
    """str | None, either way round the Annotated, may be a secret."""

    def pay(token: str | None = None) -> None:
        """Pay."""

    pay.__annotations__["token"] = hint
    assert dict(tool(pay).secrets) == {"token": Secret(ENV)}


def test_a_plan_that_passes_a_secret_is_rejected_naming_its_source() -> None:
    """The secret's parameter in a node's args: an invalid plan, saying where it comes from."""
    specs = ToolRegistry.of([charge_tool([])]).specs
    plan = Plan("pay", (PlanNode("n1", "pay", tool="charge", args={"amount": 3, "token": "x"}),))
    with pytest.raises(PlanError) as caught:
        validate_plan(plan, tools=specs)
    assert caught.value.problems == (
        (
            f"node 'n1': 'token' is a secret of tool 'charge'; it is filled from {ENV} at call "
            "time, never planned: leave it out of args"
        ),
    )


# -- filling at call time ----------------------------------------------------------------------


async def test_the_tool_receives_the_environment_value_as_a_plain_str(token: str) -> None:
    """The executor reads ENV when it calls the tool and passes the value as a str."""
    received: list[str] = []
    assert await call(charge_tool(received), amount=3) == Success("charged 3")
    assert received == [token]
    assert type(received[0]) is str


async def test_the_variable_is_read_when_the_tool_is_called(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A change of the variable after the tool was defined reaches the next call."""
    received: list[str] = []
    charge = charge_tool(received)
    monkeypatch.setenv(ENV, "first-value")
    await call(charge, amount=1)
    monkeypatch.setenv(ENV, "second-value")
    await call(charge, amount=1)
    assert received == ["first-value", "second-value"]


@pytest.mark.parametrize("value", [None, ""], ids=["unset", "empty"])
async def test_a_missing_variable_fails_the_call_before_the_tool_runs(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset or empty: a failure naming the variable, the tool never called, outcome known."""
    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    received: list[str] = []
    result = await call(charge_tool(received), amount=3)
    assert isinstance(result, DeviceFailure)
    assert f"filled from the environment variable {ENV}, which is not set" in result.error
    assert "SecretUnavailable" in result.error
    assert not result.outcome_unknown
    assert received == []


@pytest.mark.usefixtures("no_token")
async def test_a_missing_secret_takes_the_parameter_default() -> None:
    """With a default, a secret that has no value is the default (None, say)."""
    received: list[str | None] = []

    @tool
    def charge(token: Annotated[str | None, Secret(ENV)] = None) -> str:
        """Charge, anonymously when there is no token."""
        received.append(token)
        return "charged"

    assert await call(charge) == Success("charged")
    assert received == [None]


@pytest.mark.parametrize("provider", [get_token, fetch_token], ids=["sync", "async"])
@pytest.mark.usefixtures("no_token")
async def test_a_provider_fills_the_secret(provider: Any) -> None:
    """A provider, sync or async, is asked at call time; the tool gets its str."""
    received: list[str] = []
    await call(charge_tool(received, Secret(provider=provider)), amount=3)
    assert received == [VALUE]


def provide_nothing() -> None:
    """A provider with no value."""


def provide_a_number() -> int:
    """A provider that returns the wrong type."""
    return 1234


def provide_by_failing() -> str:
    """A provider that cannot reach its vault."""
    raise ConnectionError("vault unreachable")


@pytest.mark.parametrize(
    ("provider", "said"),
    [
        pytest.param(
            provide_nothing, "provider provide_nothing, which returned no value", id="none"
        ),
        pytest.param(provide_a_number, "returned a int, not a str", id="not-str"),
        pytest.param(provide_by_failing, "ConnectionError: vault unreachable", id="raises"),
    ],
)
async def test_a_provider_without_a_value_fails_the_call_before_the_tool_runs(
    provider: Any, said: str
) -> None:
    """No value, a wrong type or an exception: a failure naming the provider; no call."""
    received: list[str] = []
    result = await call(charge_tool(received, Secret(provider=provider)), amount=3)
    assert isinstance(result, DeviceFailure)
    assert said in result.error
    assert received == []


async def test_a_provider_past_the_timeout_means_the_action_never_started() -> None:
    """Reading a secret counts against the tool's timeout; a tool not yet called is not unknown."""
    received: list[str] = []

    async def hang() -> str:
        await asyncio.sleep(5)
        return VALUE

    def charge(token: str) -> None:
        """Charge the card."""
        received.append(token)

    charge.__annotations__["token"] = Annotated[str, Secret(provider=hang)]
    result = await call(tool(charge, timeout_s=0.05))
    assert isinstance(result, DeviceFailure)
    assert result.is_timeout
    assert not result.outcome_unknown
    assert "it never started" in result.error
    assert received == []


@pytest.mark.usefixtures("no_token")
def test_a_missing_secret_of_an_action_leaves_its_record_failed_not_unknown() -> None:
    """Nothing was sent, so the action's record is failed (never unknown) and says why."""
    received: list[str] = []
    plan = Plan("pay", (PlanNode("pay", "charge 3", tool="charge", args={"amount": 3}),))
    store = pev.MemoryStore()
    result = pev.run_sync(
        "pay", planner=ScriptedPlanner(plan), tools=[charge_tool(received)], store=store
    )
    state = asyncio.run(Ledger(store).state(result.task_id))
    [record] = state.records.values()
    assert not result.ok
    assert record.status is RecordStatus.FAILED
    assert ENV in (record.error or "")
    assert received == []


def test_a_tool_called_directly_is_the_function_and_takes_the_secret_as_given() -> None:
    """Calling the Tool is calling the function: nothing is filled in, for tests of the tool."""
    received: list[str] = []
    assert charge_tool(received)(amount=2, token="given") == "charged 2"  # noqa: S106
    assert received == ["given"]


# -- parameters that look like credentials -----------------------------------------------------


@pytest.mark.parametrize("name", ["password", "api_key", "authToken", "client_secret", "apikey"])
def test_a_plain_parameter_named_like_a_credential_is_warned_about(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A warning on the pev logger tells the author to make it a pev.Secret."""

    namespace: dict[str, Any] = {}
    # A function whose one parameter has the name under test.
    exec(f"def login({name}: str) -> None:\n    'Log in.'\n", namespace)  # noqa: S102
    with caplog.at_level(logging.WARNING, logger="pev"):
        tool(namespace["login"])
    [warning] = [r for r in caplog.records if r.name.startswith("pev")]
    assert warning.levelno == logging.WARNING
    assert f"parameter {name!r} looks like a credential" in warning.getMessage()
    assert "pev.Secret" in warning.getMessage()


def test_names_that_only_resemble_credentials_are_not_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """max_tokens, a token count that is an int, a working directory, an author: no warning."""
    with caplog.at_level(logging.WARNING, logger="pev"):

        @tool
        def summarise(max_tokens: int, token_count: int, pwd: str, author: str) -> None:
            """Summarise."""

        @tool
        def pay(token: Annotated[str, Secret(ENV)]) -> None:
            """Pay; the token is a secret already."""

    assert [r for r in caplog.records if r.name.startswith("pev")] == []


# -- rebuilt from an import path ---------------------------------------------------------------

PAYMENTS = f'''
"""A payment tool whose token is a secret; it logs a hash of the token it was handed."""

import hashlib
import os
from pathlib import Path
from typing import Annotated

import pev
from pev.model import Plan, PlanNode

LOG = Path(os.environ["PEV_TEST_CHARGES"])


@pev.tool(effect="action")
def pay(amount: int, token: Annotated[str, pev.Secret("{ENV}")]) -> dict:
    """Charge the card."""
    with LOG.open("a", encoding="utf-8") as log:
        log.write(hashlib.sha256(token.encode()).hexdigest() + "\\n")
    return {{"charged": amount}}


def planner(request):
    return Plan("pay the bill", (PlanNode("pay", "charge 30", tool="pay", args={{"amount": 30}}),))
'''


def test_pev_resume_in_another_process_fills_the_secret_of_the_rebuilt_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_token: None
) -> None:
    """A submitted task run by `pev resume` elsewhere: the tool comes back with its Secret."""
    monkeypatch.setenv("PEV_TEST_CHARGES", str(tmp_path / "charges.log"))
    db = tmp_path / "ledger.db"
    with user_module(tmp_path, monkeypatch, PAYMENTS, prefix="pev_secret_pay") as module:

        async def submit() -> str:
            store = SQLiteStore(db)
            try:
                return await pev.submit(
                    "pay", store=store, planner=module.planner, tools=[module.pay]
                )
            finally:
                await store.close()

        task_id = asyncio.run(submit())
        done = subprocess.run(
            [str(PEV), "--db", str(db), "resume", task_id],
            cwd=tmp_path,
            env={**os.environ, ENV: VALUE},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        charges = log_lines(module.LOG)
    assert done.returncode == 0, done.stdout + done.stderr
    assert charges == [hashlib.sha256(VALUE.encode()).hexdigest()]
    assert VALUE.encode() not in db.read_bytes()
