"""The documentation's code runs: the ```python blocks of docs/tutorial.md, of the other
pages that have any (index, method, closures) and of README.md (skipped when it is
missing or has none) are executed in order, one fresh namespace per file.

A block that raises fails the test with the file and the line of the block, and the
traceback points into the Markdown file itself.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ["docs/tutorial.md", "docs/theory.md", "docs/index.md", "docs/method.md", "docs/closures.md",
        "docs/ocp-tutorial.md", "docs/results-and-status.md", "README.md"]

FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```python[^\n]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """``(first line of the code, 1-based; code)`` of every ```python block."""
    blocks = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start("code")) + 1
        blocks.append((line, textwrap.dedent(m.group("code"))))
    return blocks


def test_fence_parser():
    text = "intro\n```python\nx = 1\n```\n\n```bash\nls\n```\n    ```python\n    y = x\n    ```\n"
    assert python_blocks(text) == [(3, "x = 1\n"), (10, "y = x\n")]


@pytest.mark.parametrize("name", DOCS)
def test_python_blocks_run(name, monkeypatch):
    path = ROOT / name
    if not path.exists():
        pytest.skip(f"{name} does not exist")
    blocks = python_blocks(path.read_text(encoding="utf-8"))
    if not blocks:
        pytest.skip(f"{name} has no ```python blocks")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__docs__"}
    for line, code in blocks:
        # pad so that tracebacks give the line number in the Markdown file
        compiled = compile("\n" * (line - 1) + code, str(path), "exec")
        try:
            exec(compiled, namespace)
        except Exception as exc:  # noqa: BLE001 - report which block failed
            pytest.fail(f"{name}: the ```python block at line {line} raised "
                        f"{type(exc).__name__}: {exc}")


def test_api_page_lists_every_public_name():
    """docs/api.md has a ``::: invimbed.NAME`` entry for every name in ``__all__``."""
    import invimbed

    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^::: invimbed\.(\w+)\s*$", text, flags=re.MULTILINE))
    public = set(invimbed.__all__) - {"__version__"}
    assert not public - listed, f"add to docs/api.md: {sorted(public - listed)}"
    assert not listed - public, f"not public, remove from docs/api.md: {sorted(listed - public)}"
