"""Narration for demo walkthroughs: a small TOML file next to each demo script.

The format (stdlib only, so the torch-free UI can read it)::

    title = "Graph basics"
    intro = "Shown before the first stop."
    outro = "Shown once the script has exited."      # optional

    [[stop]]                 # at least one of pass / step / node, plus text
    pass = 1                 # backward pass number, 1-based
    step = 1                 # the step the node is about to get (1 = first node of the pass)
    node = "PowBackward0"    # node name; shell-style globs like "Accumulate*" allowed
    text = "PowBackward0 receives 1.0: the seed gradient d(out)/d(out)."

Numbers the run measures are never typed in: texts are templates whose ``{fields}`` are filled from
the run (``str.format`` syntax; write ``{{`` for a literal brace). ``{max_diff:.1e}`` is a value the
script printed as ``  measured: max_diff = <JSON>`` (see ``measure`` in the demos), and
``{id[2][4]}`` is the id of the node that ran at pass 2, step 4, and ``{saved[self]}`` the bytes of
the current stop's saved tensor ``self``. A field the run has not produced
yet shows as ``…``.

At a stop, the text of the most specific matching ``[[stop]]`` is shown: the one that names the
most keys (an exact node name beats a glob); ties go to the one written first. Narration is keyed to
what is really stopped at, so a test can check every entry against a recorded trace.
"""

from __future__ import annotations

import fnmatch
import json
import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as its own package
    import tomli as tomllib  # type: ignore[no-redef]

TOP_KEYS = frozenset({"title", "intro", "outro", "stop"})
STOP_KEYS = frozenset({"pass", "step", "node", "text"})
MISSING = "…"  # shown for a field the run has not produced (yet)
MEASURED = re.compile(r"^\s*measured: ([A-Za-z_][A-Za-z0-9_]*) = (.+?)\s*$", re.MULTILINE)
_FORMATTER = string.Formatter()


@dataclass(frozen=True)
class Stop:
    """One keyed narration entry; a key left as None matches anything."""

    text: str
    pass_: int | None = None
    step: int | None = None
    node: str | None = None

    def matches(self, pass_: int, step: int, node: str) -> bool:
        """Whether this entry applies at the given stop."""
        if self.pass_ is not None and self.pass_ != pass_:
            return False
        if self.step is not None and self.step != step:
            return False
        if self.node is not None and not fnmatch.fnmatchcase(node, self.node):
            return False
        return True

    @property
    def specificity(self) -> tuple[int, int]:
        """How narrowly this entry is keyed: keys named, then exact node over a glob."""
        keys = sum(k is not None for k in (self.pass_, self.step, self.node))
        exact = int(self.node is not None and not _is_glob(self.node))
        return keys, exact


@dataclass(frozen=True)
class Narration:
    """A demo's narration: title, intro, per-stop texts and an optional outro."""

    title: str
    intro: str
    outro: str | None = None
    stops: tuple[Stop, ...] = field(default_factory=tuple)

    def text_for(self, pass_: int, step: int, node: str) -> str | None:
        """The text for the stop before ``node`` at (pass, step), or None when nothing is keyed."""
        best: Stop | None = None
        for stop in self.stops:
            if stop.matches(pass_, step, node) and (
                best is None or stop.specificity > best.specificity
            ):
                best = stop
        return None if best is None else best.text


def fields(text: str) -> list[str]:
    """The field names a template uses, in order (``id[2][4]`` gives ``id``)."""
    names = []
    for _, field_name, _, _ in _FORMATTER.parse(text):
        if field_name is not None:
            names.append(re.split(r"[.\[]", field_name, maxsplit=1)[0])
    return names


def render(text: str, values: Mapping[str, Any]) -> str:
    """Fill a template's fields from the run's values; a field with no value shows ``MISSING``."""
    out = []
    for literal, field_name, spec, conversion in _FORMATTER.parse(text):
        out.append(literal)
        if field_name is None:
            continue
        try:
            value, _ = _FORMATTER.get_field(field_name, (), values)
            out.append(_FORMATTER.format_field(_FORMATTER.convert_field(value, conversion),
                                               spec or ""))
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            out.append(MISSING)
    return "".join(out)


def measured(output: str) -> dict[str, Any]:
    """The values a script printed as ``  measured: NAME = <JSON>`` lines (the last one wins)."""
    values: dict[str, Any] = {}
    for name, raw in MEASURED.findall(output):
        try:
            values[name] = json.loads(raw)
        except ValueError:
            continue
    return values


def node_ids(stops: Iterable[tuple[int, int, int]]) -> dict[int, dict[int, int]]:
    """``{pass: {step: node id}}`` from (pass, step, id) triples: the ``id`` field's value."""
    ids: dict[int, dict[int, int]] = {}
    for pass_, step, node_id in stops:
        ids.setdefault(pass_, {})[step] = node_id
    return ids


def load(path: str | Path) -> Narration:
    """Read a narration file; raise ValueError naming the file and the problem."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read narration: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: narration is not UTF-8: {exc}") from None
    return parse(text, str(path))


def parse(text: str, origin: str = "<narration>") -> Narration:
    """Build a Narration from TOML text; ``origin`` names it in error messages."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{origin}: not valid TOML: {exc}") from None
    unknown = sorted(set(data) - TOP_KEYS)
    if unknown:
        raise ValueError(
            f"{origin}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(TOP_KEYS))}"
        )
    title = _required_text(data, "title", origin)
    intro = _required_text(data, "intro", origin)
    outro = _text(data, "outro", origin, required=False)
    entries = data.get("stop", [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{origin}: 'stop' must be an array of tables, written [[stop]]")
    stops = tuple(_stop(entry, f"{origin}: [[stop]] #{i}") for i, entry in enumerate(entries, 1))
    _template(intro, f"{origin}: 'intro'")
    if outro is not None:
        _template(outro, f"{origin}: 'outro'")
    return Narration(title=title, intro=intro, outro=outro, stops=stops)


def _stop(entry: dict[str, Any], where: str) -> Stop:
    unknown = sorted(set(entry) - STOP_KEYS)
    if unknown:
        raise ValueError(
            f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(STOP_KEYS))}"
        )
    text = _required_text(entry, "text", where)
    pass_ = _positive(entry, "pass", where)
    step = _positive(entry, "step", where)
    node = entry.get("node")
    if node is not None and (not isinstance(node, str) or not node.strip()):
        raise ValueError(f"{where}: 'node' must be a non-empty string (a node name or glob)")
    if pass_ is None and step is None and node is None:
        raise ValueError(f"{where}: key it with at least one of pass, step, node")
    _template(text, f"{where}: 'text'")
    return Stop(text=text, pass_=pass_, step=step, node=node)


def _template(text: str, where: str) -> None:
    """Reject a text whose braces do not form a template (write ``{{`` for a literal brace)."""
    try:
        for _, field_name, _, _ in _FORMATTER.parse(text):
            if field_name is not None and not re.match(r"[A-Za-z_]", field_name):
                raise ValueError(f"field {{{field_name}}} must start with a name")
    except ValueError as exc:
        hint = "write {{ and }} for literal braces"
        raise ValueError(f"{where}: bad template ({exc}); {hint}") from None


def _text(data: dict[str, Any], key: str, where: str, *, required: bool) -> str | None:
    value = data.get(key)
    if value is None:
        if required:
            raise ValueError(f"{where}: missing '{key}' (a non-empty string)")
        return None
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: '{key}' must be a non-empty string")
    return value.strip()


def _required_text(data: dict[str, Any], key: str, where: str) -> str:
    value = _text(data, key, where, required=True)
    if value is None:  # _text raised already; this only narrows the type
        raise ValueError(f"{where}: missing '{key}'")
    return value


def _positive(data: dict[str, Any], key: str, where: str) -> int | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{where}: '{key}' must be an integer >= 1, not {value!r}")
    return value


def _is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")
