"""Secrets: tool parameters filled at call time, never planned (docs/tools.md, "Secrets").

A plan is data the ledger keeps, shows and hands back to planners, so a credential must never be
one of its args. A tool parameter annotated ``Annotated[str, Secret("ENV_NAME")]`` is left out of
the tool's spec; the executor fills it when it calls the tool, from the environment or a
provider, and hands the tool a plain ``str``. Everything pev writes, logs or shows names the
secret's source (``PAYMENTS_TOKEN``), never its value: :mod:`pev.engine._redact` replaces the
values of a call in what the call returns or raises.
"""

from __future__ import annotations

import inspect
import itertools
import os
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pev.engine._protocols import as_async
from pev.engine._redact import Redactor
from pev.errors import UsageError

__all__ = [
    "FilledSecrets",
    "Secret",
    "SecretParameter",
    "SecretUnavailable",
    "fill_secrets",
    "looks_like_credential",
]

SecretProvider: TypeAlias = Callable[[], str | Awaitable[str | None] | None]
"""A function, sync or async, that returns a secret's value (``None``: there is none)."""

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Words that name a credential, as they appear among a parameter name's parts (split at "_" and
# at camelCase humps): a parameter so named, left a plain arg, puts a credential into the plan.
# "tokens" (max_tokens) and "pwd" (a working directory) are left out on purpose.
_CREDENTIAL_WORDS = frozenset(
    {
        "apikey",
        "authorization",
        "credential",
        "credentials",
        "passphrase",
        "passwd",
        "password",
        "secret",
        "token",
    }
)
_CREDENTIAL_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key")})
_NAME_PARTS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


@dataclass(frozen=True, slots=True)
class Secret:
    """Where a tool's secret parameter gets its value: ``Annotated[str, Secret("ENV_NAME")]``.

    Give exactly one source: the name of an environment variable, read when the tool is called
    (an unset or empty variable means no value), or ``provider=``, a function (sync or async,
    taking no arguments) that returns the value, or ``None`` when it has none. The parameter is
    left out of the tool's spec (a plan that passes it is rejected), and the tool receives the
    value as a plain ``str``. pev shows only the source's name: the repr is
    ``Secret('PAYMENTS_TOKEN')`` or ``Secret(provider=get_token)``.

    Raises:
        UsageError: Neither or both sources, a name that is no environment variable's, or a
            provider that is not callable.
    """

    env: str | None = None
    provider: SecretProvider | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if (self.env is None) == (self.provider is None):
            raise UsageError(
                "a Secret needs exactly one source: Secret('ENV_NAME') or Secret(provider=fn)"
            )
        if self.env is not None and not (
            isinstance(self.env, str) and _ENV_NAME.fullmatch(self.env)
        ):
            # Not repeated in the message: what was given may be the value itself, by mistake.
            raise UsageError(
                "Secret(env) takes the name of an environment variable (letters, digits and "
                f"'_', not starting with a digit), not a value; got a {type(self.env).__name__} "
                "that is no such name"
            )
        if self.provider is not None and not callable(self.provider):
            raise UsageError(
                f"Secret(provider=...) takes a function that returns the value, "
                f"got a {type(self.provider).__name__}"
            )

    @property
    def source(self) -> str:
        """Where the value comes from, by name: ``PAYMENTS_TOKEN`` or ``provider get_token``."""
        return self.env if self.env is not None else f"provider {_name_of(self.provider)}"

    def __repr__(self) -> str:
        if self.env is not None:
            return f"Secret({self.env!r})"
        return f"Secret(provider={_name_of(self.provider)})"

    async def read(self) -> str | None:
        """The value now: the variable's, or what the provider returns; ``None`` when there is none.

        Raises:
            TypeError: The provider returned something other than a ``str`` or ``None``.
            Exception: Whatever the provider raised.
        """
        if self.env is not None:
            return os.environ.get(self.env) or None
        assert self.provider is not None  # noqa: S101 - __post_init__ holds one of the two
        value = await as_async(self.provider)()
        if value is not None and not isinstance(value, str):
            raise TypeError(f"it returned a {type(value).__name__}, not a str")
        return value or None


class SecretUnavailable(UsageError):  # noqa: N818 - it reads as the failure it records
    """A secret parameter has no value when its tool is called; the tool was not called.

    The executor records it as the node's failure (``failed``, never ``unknown``: nothing was
    sent). The message names the tool, the parameter and the secret's source, never a value.

    Attributes:
        tool: The tool's name.
        parameter: The secret parameter.
        source: Where the value should have come from (``PAYMENTS_TOKEN``, ``provider f``).
    """

    def __init__(self, message: str, *, tool: str, parameter: str, source: str) -> None:
        super().__init__(message)
        self.tool = tool
        self.parameter = parameter
        self.source = source


@dataclass(frozen=True, slots=True)
class SecretParameter:
    """A tool parameter filled from a :class:`Secret`, and its default.

    The default (``inspect.Parameter.empty`` when there is none) is what the tool receives when
    the secret has no value; without one, that call fails before the tool runs.
    """

    name: str
    secret: Secret
    default: Any


@dataclass(frozen=True, slots=True)
class FilledSecrets:
    """The values of one call's secret parameters, and the redactor that hides them."""

    kwargs: Mapping[str, str | None]
    redactor: Redactor


async def fill_secrets(tool: str, parameters: tuple[SecretParameter, ...]) -> FilledSecrets:
    """Read each secret parameter's value; a missing one takes the parameter's default.

    Raises:
        SecretUnavailable: A secret has no value and its parameter no default, or its provider
            failed; the message names the source, never a value.
    """
    kwargs: dict[str, str | None] = {}
    sources: dict[str, str] = {}
    for parameter in parameters:
        secret = parameter.secret
        where = f"tool {tool!r}: secret parameter {parameter.name!r}"
        try:
            value = await secret.read()
        except Exception as exc:
            raise SecretUnavailable(
                f"{where} could not be filled: {secret.source} failed "
                f"({type(exc).__name__}: {exc}); the tool was not called",
                tool=tool,
                parameter=parameter.name,
                source=secret.source,
            ) from exc
        if value is None:
            if parameter.default is inspect.Parameter.empty:
                raise SecretUnavailable(
                    _missing(where, secret),
                    tool=tool,
                    parameter=parameter.name,
                    source=secret.source,
                )
            value = parameter.default
        kwargs[parameter.name] = value
        if isinstance(value, str):
            sources[value] = secret.source
    return FilledSecrets(kwargs=kwargs, redactor=Redactor.of(sources))


def _missing(where: str, secret: Secret) -> str:
    if secret.env is not None:
        return (
            f"{where} is filled from the environment variable {secret.env}, which is not set "
            "(or empty) where the tool runs; set it there. The tool was not called"
        )
    return f"{where} is filled by {secret.source}, which returned no value; the tool was not called"


def looks_like_credential(name: str) -> bool:
    """Whether a parameter's name says it holds a credential (``password``, ``api_key``...)."""
    parts = [part.lower() for part in _NAME_PARTS.findall(name)]
    if any(part in _CREDENTIAL_WORDS for part in parts):
        return True
    return any(pair in _CREDENTIAL_PAIRS for pair in itertools.pairwise(parts))


def _name_of(function: object) -> str:
    # Never repr(): an object's repr may hold the very value it provides.
    name = getattr(function, "__qualname__", None) or getattr(function, "__name__", None)
    return name if isinstance(name, str) else f"<a {type(function).__name__}>"
