"""Every ```python block of README.md and docs/*.md runs, in one namespace per page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
BLOCK = re.compile(r"^```python\n(.*?)^```", re.DOTALL | re.MULTILINE)


def _blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text(encoding="utf-8"))


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.name)
def test_examples_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The page's python examples run in order without error (asserts included)."""
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for index, block in enumerate(_blocks(page)):
        # dont_inherit: the page's code runs as a reader's would, without this module's
        # `from __future__ import annotations` (pydantic resolves a model's hints as written).
        code = compile(block, f"{page.name}[block {index}]", "exec", dont_inherit=True)
        exec(code, namespace)  # noqa: S102 - running the documentation's own examples
