"""The benchmarks' shapes as LangGraph graphs: one async no-op node per node of the shape.

Needs the `bench` extra (`pip install -e '.[bench]'`): LangGraph 1.x and its SQLite saver.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypedDict

from _common import Shape

try:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, StateGraph
except ImportError as exc:  # pragma: no cover - the message is the point
    raise SystemExit("this bench needs the bench extra: pip install -e '.[bench]'") from exc

__all__ = ["AsyncSqliteSaver", "GraphState", "config_for", "graph_of"]


class GraphState(TypedDict, total=False):
    n: int


async def _graph_node(state: GraphState) -> None:
    return None


GraphNode = Callable[[GraphState], Awaitable[None]]


def graph_of(shape: Shape, node: GraphNode | Mapping[str, GraphNode] = _graph_node) -> Any:
    """The shape as a LangGraph `StateGraph`, not yet compiled.

    Every node runs ``node``, or with a mapping, its own function. START leads to the sources, a
    waiting edge from all of a node's predecessors leads to it, and the sinks lead to END.
    """
    graph = StateGraph(GraphState)
    for name in shape:
        graph.add_node(name, node[name] if isinstance(node, Mapping) else node)
    successors = {p for after in shape.values() for p in after}
    for name, after in shape.items():
        if not after:
            graph.add_edge(START, name)
        elif len(after) == 1:
            graph.add_edge(after[0], name)
        else:
            graph.add_edge(list(after), name)  # waits for all of them
        if name not in successors:
            graph.add_edge(name, END)
    return graph


def config_for(shape: Shape, thread_id: str | None = None) -> dict[str, Any]:
    """An `ainvoke` config with room for the shape's supersteps (and a checkpointer's thread).

    LangGraph runs one superstep per level at the most (the chain's), and stops at 25 by default.
    """
    config: dict[str, Any] = {"recursion_limit": len(shape) + 10}
    if thread_id is not None:
        config["configurable"] = {"thread_id": thread_id}
    return config
