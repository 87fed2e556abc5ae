"""A trace whose every string is hostile: terminal escapes (OSC 52 clipboard, OSC 0 title, CSI
clear, a C1 CSI), Textual markup (``[/]``, ``[@click=...]``, ``[link=...]``), a bidirectional
override and a lone surrogate, in node, module, leaf, saved-tensor and dtype names, file names,
code, output, errors, the traceback and argv. Written without torch, from ``example_events``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from tests.tui_fixtures import diagnosis, example_events

ESCAPES = ["\x1b]52;c;ZXZpbA==\x1b\\", "\x1b]0;pwned\x07", "\x1b[2J", "\x9b31m", "\x07",
           "\u202e", "\ud800"]
MARKUP = ["[/]", "[bold]x[/bold]", "[@click=app.quit]q[/]", "[link=http://x]y[/link]"]
EVIL = "".join(ESCAPES + MARKUP)  # every payload in one string
SCRIPT = "/tmp/hostile/train[v2].py"  # a name markup would shorten to train.py
# what no output may hold: C0 but newline and tab, DEL, C1, a lone surrogate
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _evil(name: str) -> str:
    return f"{name}{EVIL}"


def hostile_events(grad_scale: float = 1.0, stops: bool = False) -> list[dict[str, Any]]:
    """``example_events()`` as a trace (``stops``: as a live session sends them, ``stopped``
    events and all) with every string made hostile; ``grad_scale`` changes MulBackward0's
    outgoing gradient (a second trace for ``diff``)."""
    events: list[dict[str, Any]] = []
    for event in example_events():
        kind = event["event"]
        if kind == "stopped" and not stops:
            continue
        event = json.loads(json.dumps(event))
        if kind == "session":
            event.update(argv=[SCRIPT, EVIL], torch=EVIL)
        elif kind == "pass_begin":
            for node in event["nodes"]:
                if node["leaf"]:
                    node["leaf"] = _evil(f"enc.{MARKUP[0]}.{node['leaf']}")
                else:
                    node["name"] = _evil(node["name"])
                    node["module"] = _evil("enc.[/].lin")
                    node["source"] = {"file": SCRIPT, "line": 3, "code": EVIL}
            event["caller"] = {"file": _evil(SCRIPT), "line": 9, "code": EVIL}
        elif kind in ("node", "stopped"):
            if event["name"] != "AccumulateGrad":
                event["name"] = _evil(event["name"])
            for item in event["saved"]:
                item["name"] = _evil(item["name"])
                if item["dtype"]:
                    item["dtype"] = _evil(item["dtype"])
            for summary in event.get("grad_inputs", []) + event["grad_outputs"]:
                summary["device"] = _evil("cpu")
            if event["name"].startswith("MulBackward0") and grad_scale != 1.0:
                for summary in event.get("grad_inputs", []):
                    summary["norm"] *= grad_scale
                    summary["values"] = [v * grad_scale for v in summary["values"]]
        elif kind == "accumulate":
            event["leaf"] = _evil(f"enc.{MARKUP[0]}.{event['leaf']}")
        elif kind == "exit":
            event.update(code=1, traceback=f"Traceback (most recent call last):\n  {EVIL}\n"
                                           f"ValueError: {EVIL}\n")
        events.append(event)
        if kind == "session":
            events.append({"event": "output", "stream": "stdout", "text": f"out {EVIL}\n"})
            events.append({"event": "output", "stream": "stderr",
                           "text": "\x1b[31mred\x1b[0m \x1b[1A\x1b[2Kline train[v2].py\n"})
    at = next(i for i, e in enumerate(events) if e["event"] == "pass_end")
    events.insert(at, diagnosis(title=_evil("title"), message=_evil("message"),
                                related=[{"role": EVIL, "file": _evil(SCRIPT), "line": 2,
                                          "code": EVIL}]))
    return events


def write_hostile_trace(path: Path, grad_scale: float = 1.0) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in hostile_events(grad_scale)))
    return path


def hostile_name(directory: Path, stem: str) -> Path:
    """A trace's own file name is hostile too (someone sent it; tab completion typed it)."""
    return directory / f"{stem}[a=b=c]\x1b]0;t\x07[b].jsonl"
