"""Write docs/CHANGELOG.md from git history, grouped by issue.

Each branch merged into main (first-parent history) brings the commits of one issue: the issue
is the ``#N`` in the merge's message, or the number in a ``wN...`` branch name. Commits made on
main itself are listed by day. Run from the repository root: ``python scripts/changelog.py
[REF]`` (default ``main``: a branch's own history would list main's commits under its merges
of main).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

TITLES = {  # the issues' own titles, where a merge message does not say
    28: "Truthful on real code: warnings in place, no false diagnoses, consistent names, "
        "nested passes fast",
    29: "Untrusted input: a trace a colleague sends you, and a peer on the other end of "
        "`connect`",
    30: "The live UI on real models: fast `f` and `c` on big passes, every panel right about "
        "the pass in view",
    31: "torch.compile: see inside compiled regions, step them eagerly, and diff compiled "
        "against eager",
    32: "Where users' models run: FSDP2/DTensor gradients, and every torch from 2.4 to 2.15",
    33: "At a stop, ask anything and try a fix: an expression console and gradient edits",
    34: "Notebooks: `backstep.attach()` in Jupyter opens the UI in the notebook, tested in a "
        "real browser",
    35: "Layout, second sweep: a UI package you can find your way in, and a README for users",
}
WIDTH = 160


def git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def issue_of(subject: str) -> int | None:
    found = re.search(r"#(\d+)", subject) or re.search(r"branch '\w?(\d+)", subject)
    return int(found.group(1)) if found else None


def short(subject: str) -> str:
    return subject if len(subject) <= WIDTH else subject[: WIDTH - 1].rstrip() + "…"


def main(ref: str = "main") -> None:
    by_issue: dict[int, list[str]] = defaultdict(list)
    merges: dict[int, list[str]] = defaultdict(list)
    by_day: dict[str, list[str]] = defaultdict(list)
    other: list[str] = []
    seen: set[str] = set()
    for line in git("log", "--first-parent", "--reverse", "--format=%H %P%x09%ad%x09%s",
                    "--date=short", ref).splitlines():
        shas, day, subject = line.split("\t", 2)
        sha, *parents = shas.split()
        if len(parents) < 2:
            by_day[day].append(short(subject))
            continue
        issue = issue_of(subject)
        brought = git("log", "--no-merges", "--reverse", "--format=%H%x09%s",
                      f"{parents[0]}..{parents[1]}").splitlines()
        rows = []
        for row in brought:
            commit, text = row.split("\t", 1)
            if commit not in seen:
                seen.add(commit)
                rows.append(short(text))
        if issue is None:
            other.extend(rows)
        else:
            merges[issue].append(short(subject))
            by_issue[issue].extend(rows)
    out = ["# Changelog", "",
           "How backstep's performance came to be what docs/performance.md states (written by",
           "hand, kept as is), then, from `git log`, grouped by issue: the commits each issue's",
           "branches brought to main, newest issue first, then what was committed on main",
           "itself, by day. Regenerate with `python scripts/changelog.py`.", ""]
    out += [_written_by_hand()]
    for issue in sorted(by_issue, reverse=True):
        title = TITLES.get(issue)
        out += [f"## Issue {issue}" + (f": {title}" if title else ""), ""]
        out += [f"- merged: {m}" for m in merges[issue]]
        out += [f"- {r}" for r in by_issue[issue]] + [""]
    if other:
        out += ["## Branches merged without an issue number", ""]
        out += [f"- {r}" for r in other] + [""]
    out += ["## On main", ""]
    for day in sorted(by_day, reverse=True):
        out += [f"### {day}", ""] + [f"- {r}" for r in reversed(by_day[day])] + [""]
    Path("docs/CHANGELOG.md").write_text("\n".join(out).rstrip() + "\n")


def _written_by_hand() -> str:
    """The hand-written part of the current changelog (its performance history), kept."""
    path = Path("docs/CHANGELOG.md")
    text = path.read_text() if path.exists() else ""
    start, end = text.find(HAND_WRITTEN), text.find("\n## Issue ")
    return text[start:end].rstrip() + "\n" if start >= 0 and end > start else ""


HAND_WRITTEN = "## Performance over time"


if __name__ == "__main__":
    main(*sys.argv[1:2])
