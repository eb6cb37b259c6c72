"""Identifier types. pev never mints ids inside pure code: the engine stamps them."""

from __future__ import annotations

from typing import NewType

__all__ = ["EvidenceId", "RecordId", "TaskId"]

TaskId = NewType("TaskId", str)
"""The one stable id of a task, shared by all of its revisions."""

RecordId = NewType("RecordId", str)
"""The id of one execution record (one dispatch of one node)."""

EvidenceId = NewType("EvidenceId", str)
"""The id of one captured observation."""
