"""Find the demo walkthroughs, installed or in a source checkout.

A wheel ships the repository's top-level ``demos/`` folder as ``backstep/_demos``; an editable
install or a plain checkout has it next to the package. Each demo is ``NAME.py`` (a plain script)
with ``NAME.toml`` (its narration) beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backstep.demo import narration

# The order the demos teach in; any other demo found is listed after these, by name.
CURRICULUM = (
    "graph_basics",
    "backward_twice",
    "retain_graph",
    "retain_graph_loop",
    "higher_order",
    "retain_grad",
    "detach_no_grad",
    "accumulation",
    "inplace_error",
    "nan_where",
)


@dataclass(frozen=True)
class Demo:
    """One demo: its name, script and narration file."""

    name: str
    script: Path
    narration: Path

    @property
    def title(self) -> str:
        """The narration's title (raises ValueError if the narration file is broken)."""
        return narration.load(self.narration).title


def demos_dir() -> Path | None:
    """The folder holding the demos: installed package data first, then the source checkout."""
    package = Path(__file__).resolve().parent.parent  # backstep/, where a wheel puts _demos
    for candidate in (package / "_demos", package.parent / "demos"):
        if candidate.is_dir():
            return candidate
    return None


def all_demos(folder: Path | None = None) -> list[Demo]:
    """Every demo that has both a script and a narration, in teaching order."""
    folder = demos_dir() if folder is None else folder
    if folder is None:
        return []
    found = {
        script.stem: Demo(script.stem, script, script.with_suffix(".toml"))
        for script in folder.glob("*.py")
        if not script.name.startswith("_") and script.with_suffix(".toml").is_file()
    }
    rank = {name: i for i, name in enumerate(CURRICULUM)}
    return [found[n] for n in sorted(found, key=lambda n: (rank.get(n, len(rank)), n))]


def find(name: str, folder: Path | None = None) -> Demo | None:
    """The demo called ``name``, or None."""
    return next((d for d in all_demos(folder) if d.name == name), None)
