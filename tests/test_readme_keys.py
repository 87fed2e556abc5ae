"""The README's key table (for users) agrees with the app's bindings (what the keys do)."""

from __future__ import annotations

import re
from pathlib import Path

from backstep.tui.app import BackstepApp
from backstep.tui.panels.help import UNBOUND, help_rows, key_name
from backstep.tui.runtime.live_driver import LiveDriver
from backstep.tui.runtime.replay_driver import ReplayDriver

README = Path(__file__).resolve().parent.parent / "README.md"


def keys_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("\n## Keys\n")
    return text[start: text.index("\n## ", start + 1)]


def table_keys(section: str) -> set[str]:
    """The backticked keys of the table's first column."""
    keys: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if line.startswith("|") and len(cells) > 2 and not set(cells[1]) <= set("- "):
            keys.update(re.findall(r"`([^`]+)`", cells[1]))
    return keys


def test_every_key_of_the_app_is_in_the_readme() -> None:
    said = set(re.findall(r"`([^`]+)`", keys_section()))
    bound = {key_name(b.key) for b in BackstepApp.BINDINGS}
    missing = sorted(bound - said)
    assert not missing, f"keys bound in BackstepApp.BINDINGS that the README's Keys miss: {missing}"


def test_every_key_in_the_readme_table_is_bound() -> None:
    keys = table_keys(keys_section())
    assert {"n", "c", "q", "?"} <= keys  # the table was read
    bound = {key_name(b.key) for b in BackstepApp.BINDINGS} | {key for _, key, _, _ in UNBOUND}
    stray = sorted(keys - bound)
    assert not stray, f"keys in the README's table that nothing binds: {stray}"


def test_the_help_lists_every_documented_key_of_each_session() -> None:
    for driver in (LiveDriver(None), ReplayDriver.__new__(ReplayDriver)):
        rows = help_rows(BackstepApp.BINDINGS, driver.key_help, driver.offers)
        shown = set(" / ".join(key for key, _ in rows if key).split(" / "))
        for binding in BackstepApp.BINDINGS:
            words = driver.key_help.get(binding.action, binding.tooltip)
            if driver.offers(binding.action) and words:
                label = binding.key_display or key_name(binding.key)
                assert set(label.split(" / ")) <= shown, (type(driver).__name__, binding)
