"""CriteriaVerificationRail: a deterministic keyword check of the final output."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from tests.support.watering import LOOK, POUR

from pev.model import Success
from pev.rails import CriteriaReport, CriteriaVerificationRail, RailBus

if TYPE_CHECKING:  # fixtures' types, for readers and editors; conftest is not importable
    from conftest import Tasks

OUTPUTS = {"look": {"soil": "Damp and DARK", "litres": 2}}


@pytest.mark.parametrize(
    ("criteria", "verified", "unmet"),
    [
        pytest.param({"damp": "damp"}, ("damp",), (), id="one-keyword"),
        pytest.param({"damp": "DAMP"}, ("damp",), (), id="case-insensitive"),
        pytest.param({"dry": "dry"}, (), ("dry",), id="missing-keyword"),
        pytest.param({"both": ["damp", "dark"]}, ("both",), (), id="all-keywords-present"),
        pytest.param({"both": ["damp", "dry"]}, (), ("both",), id="one-keyword-missing"),
        pytest.param({"key": "litres"}, ("key",), (), id="keys-count"),
        pytest.param({"number": '"litres":2'}, ("number",), (), id="canonical-json-text"),
        pytest.param(
            {"wet": "damp", "dry": "dry", "dark": ("dark",)},
            ("wet", "dark"),
            ("dry",),
            id="order-kept",
        ),
    ],
)
def test_check(
    criteria: dict[str, str | list[str]], verified: tuple[str, ...], unmet: tuple[str, ...]
) -> None:
    """A criterion is met when all its keywords appear, ignoring case, in the outputs' JSON."""
    report = CriteriaVerificationRail(criteria).check(OUTPUTS, task_id="t")
    assert report == CriteriaReport(task_id="t", verified=verified, unmet=unmet)
    assert report.ok is (not unmet)


async def test_records_report_when_task_finishes(tasks: Tasks) -> None:
    """On task_finished the rail records a report per task, and the last one."""
    rail = CriteriaVerificationRail({"damp": "damp", "photo": ["jpeg", "soil"]})
    tasks.bus = RailBus([rail])
    await tasks.simple("t1", {POUR: Success(1), LOOK: Success({"soil": "DAMP"})})
    first = CriteriaReport(task_id="t1", verified=("damp",), unmet=("photo",))
    assert (rail.reports, rail.last) == ({"t1": first}, first)
    await tasks.simple("t2", {LOOK: Success({"soil": "damp", "image": "soil.jpeg"})})
    second = CriteriaReport(task_id="t2", verified=("damp", "photo"), unmet=())
    assert (rail.reports, rail.last) == ({"t1": first, "t2": second}, second)


async def test_nothing_before_the_task_finishes(tasks: Tasks) -> None:
    """Until a task finishes there is no report."""
    rail = CriteriaVerificationRail({"damp": "damp"})
    tasks.bus = RailBus([rail])
    await tasks.create("t")
    await tasks.drain()
    assert (rail.reports, rail.last) == ({}, None)


def test_criteria_as_given() -> None:
    """The rail exposes its criteria, one keyword becoming a one-keyword tuple."""
    rail = CriteriaVerificationRail({"damp": "Damp", "both": ["a", "b"]})
    assert dict(rail.criteria) == {"damp": ("Damp",), "both": ("a", "b")}


@pytest.mark.parametrize(
    ("keywords", "error"),
    [
        pytest.param([], ValueError, id="no-keywords"),
        pytest.param("", ValueError, id="empty-keyword"),
        pytest.param(["damp", ""], ValueError, id="one-empty-keyword"),
        pytest.param(["damp", 3], TypeError, id="not-text"),
    ],
)
def test_bad_criteria_are_refused(keywords: object, error: type[Exception]) -> None:
    """A criterion needs at least one keyword, all non-empty text."""
    with pytest.raises(error, match="criterion 'c'"):
        CriteriaVerificationRail({"c": keywords})  # type: ignore[dict-item]
