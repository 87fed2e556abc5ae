"""Issue 29: a trace someone sent you is hostile. Every string of ``hostile_traces`` (escape
sequences, markup, a bidirectional override, a lone surrogate) goes through ``diff`` (text and
JSON), ``export`` and ``show`` (keys pressed through every view): no control character reaches
the output, no markup is applied (``train[v2].py`` reads so), nothing crashes."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import pytest

from backstep.cli import main
from backstep.events.form import expand
from backstep.process.launcher import debuggee_command
from backstep.traces.index import TraceIndex
from backstep.tui.app import BackstepApp
from backstep.tui.runtime.live_link import LiveLink
from tests.hostile_traces import CONTROL, hostile_name, write_hostile_trace
from tests.replay_traces import record
from tests.tui_fixtures import live_app, replay_app
from tests.tui_pilot import pilot, screen_text, settle

# a quoted DOT string, a node statement and an edge statement: nothing else may appear
QUOTED = r'"(?:[^"\\\n]|\\.)*"'
NODE = re.compile(rf"  n\d+ \[label={QUOTED}, fillcolor=\"#[0-9a-f]{{6}}\"\];")
EDGE = re.compile(rf"  n\d+ -> n\d+ \[(?:label={QUOTED}|style=\"dashed\")\];")


@pytest.fixture
def traces(tmp_path: Path) -> tuple[Path, Path]:
    return (write_hostile_trace(hostile_name(tmp_path, "a")),
            write_hostile_trace(tmp_path / "b.jsonl", grad_scale=2.0))


def test_diff_text_shows_every_string_and_obeys_none(traces, capsys) -> None:
    a, b = traces
    code = main(["diff", str(a), str(b)])
    out, err = capsys.readouterr()
    assert code == 1, out + err
    assert not CONTROL.search(out + err), repr(out + err)
    node = next(line for line in out.splitlines() if line.startswith("  node"))
    assert "MulBackward0\\x1b]52;c;ZXZpbA==\\x1b\\" in node  # shown as it is, not obeyed
    assert "[/][bold]x[/bold][@click=app.quit]q[/]" in node
    assert "enc.[/].lin" in node
    assert "train[v2].py:3" in out
    assert "a[a=b=c]\\x1b]0;t\\x07[b].jsonl" in out  # the trace's own name
    assert "\\ud800" in out and "\\u202e" in out


def test_diff_json_holds_no_raw_control_character(traces, capsys) -> None:
    a, b = traces
    assert main(["diff", str(a), str(b), "--json"]) == 1
    out, _ = capsys.readouterr()
    assert not CONTROL.search(out)
    report = json.loads(out)
    assert report["difference"]["node"].startswith("MulBackward0\\x1b]52")


def test_export_writes_only_quoted_labels_and_integer_ids(traces, capsysbinary) -> None:
    code = main(["export", str(traces[0])])
    out, err = (part.decode("utf-8") for part in capsysbinary.readouterr())
    assert code == 0, err
    assert not CONTROL.search(out + err), repr(out + err)
    body = out.splitlines()
    assert body[0] == "digraph pass_1 {" and body[-1] == "}"
    for line in body[3:-1]:
        assert NODE.fullmatch(line) or EDGE.fullmatch(line), line
    assert "train[v2].py:3" in out and '\\"' not in out.replace('\\\\"', "")


@pytest.mark.parametrize("field", ["id", "next"])
def test_export_refuses_an_id_that_is_not_an_integer(tmp_path, capsysbinary, field) -> None:
    trace = write_hostile_trace(tmp_path / "t.jsonl")
    events = [expand(json.loads(line)) for line in trace.read_text().splitlines()]
    begin = next(e for e in events if e["event"] == "pass_begin")
    injected = '1 [URL="javascript:alert(1)"]; n9'
    if field == "id":
        begin["nodes"][0]["id"] = injected
    else:
        begin["nodes"][0]["next"] = [injected]
    trace.write_text("".join(json.dumps(e) + "\n" for e in events))
    code = main(["export", str(trace)])
    out, err = (part.decode() for part in capsysbinary.readouterr())
    assert code == 2 and out == ""
    # the schema check refuses it first (dot_id would too: test_safe_text)
    assert err.count("\n") == 1 and "expected int" in err and not CONTROL.search(err)


KEYS = ["n", "n", "n", "m", "n", "m", "right_square_bracket", "left_square_bracket", "n", "n",
        "d", "F", "escape", "question_mark", "escape", "slash", "[", "/", "]", "enter",
        "escape", "g", "[", "/", "]", "enter", "c", "C", "p"]


@pilot
async def test_show_steps_through_every_view_and_shows_strings_as_they_read(traces) -> None:
    trace = traces[0]
    with trace.open("a") as out:  # a cut line: the note names the file, markup and all
        out.write('{"event": "node", "pass": 1, "cut[a=b=c]\n')
    with TraceIndex(trace, partial=True) as index:
        index.scan()
        app = replay_app(index, note=index.note())
        seen = []
        async with app.run_test(size=(200, 50)) as pilot:
            await settle(pilot)
            seen.append(screen_text(app))
            for key in KEYS:
                await pilot.press(key)
                await settle(pilot)
                seen.append(screen_text(app))
        assert app.return_code in (None, 0)
    assert app.control_guard.caught == 0  # every string was made printable before drawing
    text = "\n".join(seen)
    assert not CONTROL.search(text)
    assert "a[a=b=c]\\x1b]0;t\\x07[b].jsonl" in text  # the notification, literally
    assert "train[v2].py" in text  # the Source title, not train.py
    assert "enc.[/].lin" in text  # the module view
    assert "[bold]x[/bold][@click=app.quit]q[/][link=http://x]y[/link]" in text  # console
    assert "red \\x1b" not in text and "red line train[v2].py" in text  # CSI dropped
    assert "\\x1b]52;c;ZXZpbA==" in text  # OSC shown, not obeyed


REAL = """\
import torch

torch.manual_seed(0)
model = torch.nn.ModuleDict({"[/]": torch.nn.Linear(2, 2), "x[b]": torch.nn.Linear(2, 1)})
print("\\x1b]0;pwned\\x07 \\x1b[31mred\\x1b[0m [bold]x[/bold]")
model["x[b]"](torch.tanh(model["[/]"](torch.randn(3, 2)))).sum().backward()
"""


@pilot
async def test_a_real_module_dict_keyed_with_markup_opens_in_the_module_view(tmp_path) -> None:
    trace = record(tmp_path, "train[v2]", REAL)
    with TraceIndex(trace) as index:
        app = replay_app(index)
        seen = {}
        async with app.run_test(size=(160, 44)) as pilot:
            for key in ["n", "n", "n", "n", "m", "n", "n"]:
                await pilot.press(key)
                await settle(pilot)
                seen[key] = screen_text(app)
    assert app.control_guard.caught == 0 and not CONTROL.search("".join(seen.values()))
    assert "─ Modules · pass 1 ─" in seen["m"]
    assert "├ ▼ x[b]  3✓ 1·" in seen["m"] and "└ ▶ [/]  0✓ 4·" in seen["m"]  # not bold, not lost
    assert "Source · train[v2].py:6" in seen["n"]
    assert "\\x1b]0;pwned\\x07 red [bold]x[/bold]" in seen["n"]  # console: colours dropped


def test_show_that_crashes_does_not_exit_0(traces, monkeypatch, capsys) -> None:
    """Before issue 29 a crash (MarkupError) printed a traceback and exited 0."""
    from textual.app import App

    from backstep.tui.panels.source import SourcePanel

    def boom(*args, **kwargs) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(SourcePanel, "show_source", boom)
    monkeypatch.setattr(BackstepApp, "run", lambda self: App.run(self, headless=True))
    monkeypatch.setattr("backstep.commands.no_terminal", lambda *args: False)  # headless
    assert main(["show", str(traces[1])]) == 1
    assert "RuntimeError: boom" in capsys.readouterr().err


SECOND = """\
model["e\\x1b]0;t\\x07"] = torch.nn.Linear(2, 2)
model["e\\x1b]0;t\\x07"](torch.randn(1, 2)).sum().backward()
raise ValueError("\\x1b]0;title\\x07 [/] [bold]b[/bold]")
"""


def test_backstep_run_of_that_program_shows_its_names_output_and_error_as_they_read(
        tmp_path) -> None:
    """The live path (``backstep run``): events over the UI's channel, output over a pipe."""
    script = tmp_path / "train[v2].py"
    script.write_text(REAL + SECOND)
    link = LiveLink(debuggee_command(str(script), [], source=True))
    app = live_app(link)
    seen: list[str] = []

    async def run() -> None:
        async with app.run_test(size=(160, 44)) as pilot:
            deadline = time.monotonic() + 90
            while app.snapshot.stop is None:
                assert time.monotonic() < deadline, "the debuggee never stopped"
                await pilot.pause(0.05)
            for key in ["n", "n", "n", "n", "m", "n", "m", "c", "n", "m", "n", "m", "c"]:
                await pilot.press(key)
                await pilot.pause(0.1)
                seen.append(screen_text(app))
            while app.snapshot.exit is None:
                assert time.monotonic() < deadline, "the debuggee never exited"
                await pilot.pause(0.05)
            await pilot.pause(0.2)
            seen.append(screen_text(app))

    try:
        asyncio.run(run())
    finally:
        link.close()
    text = "\n".join(seen)
    assert app.control_guard.caught == 0 and not CONTROL.search(text)
    assert "└ ▶ [/]  " in text  # the module view, the name as it reads
    assert "▼ e\\x1b]0;t\\x07  " in text  # a name with escapes, sent over the channel
    assert "\\x1b]0;pwned\\x07 red [bold]x[/bold]" in text  # printed: colours dropped, OSC shown
    assert "ValueError: \\x1b]0;title\\x07 [/] [bold]b[/bold]" in text  # the traceback
