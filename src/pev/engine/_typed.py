"""Typed agents: an agent's input and output types, checked where values cross into the ledger.

``pev.Agent(planner, input_type=Order, output=summary)`` (docs/engine.md, "Typed agents"):

* the input given to ``run``, ``start``, ``submit`` or a task file is validated as ``Order``
  (pydantic, so a model instance, a dataclass or its JSON all do) and recorded as its JSON;
* the planner and the verifier get ``request.input`` as an ``Order``, validated again from the
  recorded JSON, so a resume or another process sees exactly what the first run saw;
* ``output=`` (a function of the succeeded nodes' outputs, or a node id) gives the task's
  output once it has succeeded: validated against the function's return annotation, recorded
  as JSON in ``task_finished``, and handed back typed as ``RunResult.output``.

An agent without either works as before: its input is any JSON value, and it has no output.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import PydanticSchemaGenerationError, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError
from typing_extensions import TypeVar

from pev import codec
from pev._json import JsonValue, freeze_json
from pev.errors import ComponentError, UsageError

__all__ = ["UNTYPED", "AgentTypes", "In", "InputMismatch", "Out", "OutputLike"]

In = TypeVar("In", default=JsonValue)
"""An agent's input type (``pev.Agent[In, Out]``); untyped agents take any JSON value."""

Out = TypeVar("Out", default=JsonValue)
"""An agent's output type; untyped agents have none (``RunResult.output`` is ``None``)."""

OutputLike = Callable[[Mapping[str, JsonValue]], Out] | str
"""What ``output=`` takes: a function of the succeeded nodes' outputs (node id → value), or
the id of the node whose output is the task's."""

# How many of pydantic's errors a message names before it says how many more there are.
_ERRORS_SHOWN = 3


class InputMismatch(UsageError):  # noqa: N818 - it reads as what is wrong with the input
    """A task's input that its agent's input type refuses, or that no ledger can record.

    Attributes:
        problem: What is wrong, without the way out (``does not fit the agent's input type
            Order: sku: Field required``), for a caller that words its own (a task file).
    """

    def __init__(self, message: str, *, problem: str) -> None:
        super().__init__(message)
        self.problem = problem


@dataclass(frozen=True, slots=True)
class AgentTypes:
    """An agent's input type and output, and the pydantic adapters that check them.

    Attributes:
        input_name: The input type as the user wrote it (for messages), ``None`` if untyped.
        output_node: The node whose output is the task's, when ``output=`` is a node id.
    """

    input_name: str | None
    output_node: str | None
    _input: TypeAdapter[Any] | None
    _make_output: Callable[[Mapping[str, JsonValue]], Any] | None
    _output: TypeAdapter[Any] | None

    @classmethod
    def of(cls, input_type: object | None, output: object | None) -> AgentTypes:
        """The adapters for ``input_type`` and ``output`` (either may be ``None``).

        Raises:
            ComponentError: A type pydantic cannot validate, or an ``output`` that is neither
                a function nor a node id.
        """
        adapter = None if input_type is None else _adapter(input_type, role="input_type")
        input_name = None if input_type is None else _type_name(input_type)
        if output is None:
            return cls(input_name, None, adapter, None, None)
        if isinstance(output, str):
            if not output:
                raise ComponentError(
                    "output= names no node: pass a node id or a function of the outputs",
                    role="output",
                )
            return cls(input_name, output, adapter, None, None)
        if not callable(output):
            raise ComponentError(
                f"output= must be a function of the succeeded nodes' outputs or a node id, "
                f"not {type(output).__name__}",
                role="output",
            )
        returns = _return_annotation(output)
        made = None if returns is None else _adapter(returns, role="output")
        return cls(input_name, None, adapter, output, made)

    @property
    def typed(self) -> bool:
        """Whether the agent has an input type or an output."""
        return self._input is not None or self.has_output

    @property
    def has_output(self) -> bool:
        """Whether the agent's succeeded tasks have an output."""
        return self.output_node is not None or self._make_output is not None

    def recorded_input(self, value: object) -> JsonValue:
        """``value`` checked against the input type, as the JSON the ledger records.

        Without an input type, ``value`` itself (the ledger checks that it is JSON).

        Raises:
            UsageError: ``value`` does not fit the input type; the message names each problem
                and where it is.
        """
        if self._input is None:
            return typing.cast("JsonValue", value)
        try:
            checked = self._input.validate_python(value)
            return freeze_json(self._input.dump_python(checked, mode="json"))
        except ValidationError as exc:
            problem = f"does not fit the agent's input type {self.input_name}: {_problems(exc)}"
            raise InputMismatch(
                f"the task's input {problem}; pass a value of that type, or its JSON",
                problem=problem,
            ) from None
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            # It fits, but its JSON is not what a ledger holds (a float that is NaN, say).
            problem = f"cannot be recorded as JSON: {exc}"
            raise InputMismatch(
                f"the task's input, a {self.input_name}, {problem}; give finite numbers and "
                "UTF-8 text",
                problem=problem,
            ) from None

    def typed_input(self, recorded: JsonValue) -> Any:
        """The recorded input as the agent's input type (the JSON itself when untyped).

        Raises:
            UsageError: The recorded input no longer fits the input type (the type changed
                since the task was written).
        """
        if self._input is None:
            return recorded
        return _read_back(
            self._input,
            recorded,
            f"the task's recorded input no longer fits the agent's input type {self.input_name}",
            "; drive it with an agent whose input type accepts it",
        )

    def recorded_output(self, outputs: Mapping[str, JsonValue]) -> tuple[JsonValue, str]:
        """The task's output as JSON, made from the succeeded nodes' ``outputs``.

        Returns:
            The output and ``""``; or ``None`` and why no output could be made (the function
            raised, the node has no output, the value does not fit the annotation or is not
            JSON): the task has still succeeded, and its detail says so.
        """
        if self.output_node is not None:
            if self.output_node not in outputs:
                return None, (
                    f"the agent's output node {self.output_node!r} has no output: it did not "
                    "succeed in the final plan"
                )
            return outputs[self.output_node], ""
        if self._make_output is None:
            return None, ""
        try:
            value = self._make_output(outputs)
        except Exception as exc:  # noqa: BLE001 - the user's function: its failure is recorded
            return None, f"the agent's output= raised {type(exc).__name__}: {exc}"
        adapter = self._output or _any()
        try:
            return freeze_json(adapter.dump_python(adapter.validate_python(value), mode="json")), ""
        except ValidationError as exc:
            return None, f"the agent's output does not fit its annotation: {_problems(exc)}"
        except (PydanticSerializationError, TypeError, ValueError) as exc:
            return None, f"the agent's output is not JSON the ledger can record: {exc}"

    def typed_output(self, recorded: JsonValue) -> Any:
        """The recorded output as the output function's return type (JSON when unannotated).

        Raises:
            UsageError: The recorded output no longer fits (the function's return type
                changed since the task ended).
        """
        if self._output is None or recorded is None:
            return recorded
        what = "the task's recorded output no longer fits the agent's output type"
        return _read_back(self._output, recorded, what)


@functools.cache
def _any() -> TypeAdapter[Any]:
    """Checks nothing, writes any value pydantic can as JSON: an unannotated output='s adapter.

    Built on first use: every process that imports the engine need not pay for it.
    """
    return TypeAdapter(Any)


UNTYPED = AgentTypes(None, None, None, None, None)
"""The types of an agent with neither an input type nor an output."""


def _read_back(adapter: TypeAdapter[Any], recorded: JsonValue, what: str, way_out: str = "") -> Any:
    """A recorded JSON value validated as ``adapter``'s type, from its JSON text.

    Raises:
        UsageError: It does not fit: ``what``, the problems, then ``way_out``.
    """
    try:
        return adapter.validate_json(codec.dumps(recorded))
    except ValidationError as exc:
        raise UsageError(f"{what}: {_problems(exc)}{way_out}") from None


def _adapter(annotation: object, *, role: str) -> TypeAdapter[Any]:
    try:
        return TypeAdapter(typing.cast("Any", annotation))
    except (PydanticSchemaGenerationError, TypeError, NameError) as exc:
        raise ComponentError(
            f"{role}= {_type_name(annotation)} is not a type pydantic can validate "
            f"({str(exc).splitlines()[0]}); "
            "use a pydantic model, a dataclass, a TypedDict or a JSON type",
            role=role,
        ) from None


def _return_annotation(function: Callable[..., Any]) -> object | None:
    """The function's return annotation, resolved where it was written; ``None`` if it has none.

    Only the return annotation is resolved: a parameter's may name what that module never
    imported (``JsonValue`` spelled as text, say) without making the output unchecked.
    """
    try:
        returns = inspect.signature(function).return_annotation
    except (TypeError, ValueError):
        return None
    if isinstance(returns, str):
        # Where the function was written: a callable object's is its class's __call__'s.
        target = inspect.unwrap(function)
        if not hasattr(target, "__globals__"):
            target = type(function).__call__
        where = getattr(target, "__globals__", {})
        holder = types.SimpleNamespace(__annotations__={"return": returns}, __globals__=where)
        try:
            returns = typing.get_type_hints(holder)["return"]
        except (NameError, TypeError, SyntaxError):
            return None  # a name the annotation uses is not found there: left unchecked
    if returns is inspect.Signature.empty or returns is Any:
        return None
    return typing.cast("object", returns)


def _type_name(annotation: object) -> str:
    name = getattr(annotation, "__name__", None)
    return (
        name
        if isinstance(name, str) and not getattr(annotation, "__args__", None)
        else (str(annotation).replace("typing.", ""))
    )


def _problems(exc: ValidationError) -> str:
    """Pydantic's errors in one line: where each is and what is wrong."""
    errors = exc.errors(include_url=False)
    said = [
        f"{'.'.join(str(part) for part in error['loc']) or 'the value'}: {error['msg']}"
        for error in errors[:_ERRORS_SHOWN]
    ]
    more = len(errors) - _ERRORS_SHOWN
    return "; ".join(said) + (f" (and {more} more)" if more > 0 else "")
