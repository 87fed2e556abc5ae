"""docs/ARCHITECTURE.md names every backstep module in its room: a module added without a line
there fails here. Checked by name (a file's stem, a package's folder), as a whole word."""

from __future__ import annotations

import re
from pathlib import Path

from tests.package_modules import MODULES

DOC = Path(__file__).resolve().parent.parent / "docs" / "ARCHITECTURE.md"


def unnamed(doc: str) -> list[str]:
    """The backstep modules whose name ``doc`` never says."""
    return sorted(m for m in MODULES
                  if not re.search(rf"(?<![\w.]){re.escape(m.rsplit('.', 1)[-1])}\b", doc))


def test_the_check_finds_an_unnamed_module() -> None:
    doc = DOC.read_text()
    assert "backstep.tui.runtime.hangup" in unnamed(doc.replace("hangup", "h-u"))
    assert "backstep.tui.runtime.hangup" not in unnamed("SIGHUP (hangup)")


def test_every_module_is_named_in_the_architecture_doc() -> None:
    missing = unnamed(DOC.read_text())
    assert not missing, "docs/ARCHITECTURE.md does not name: " + ", ".join(missing)
