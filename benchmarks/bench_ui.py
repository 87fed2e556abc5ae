"""UI speed on a 10,000-node graph: first frame after the first stop, and key-to-updated-panels.

Runs the real app headless (Textual's ``run_test``) at 140x42, fed by a synthetic residual-network
pass (``tests/tui_fixtures.transformer_pass``) through the same reader the live UI uses; a step
command is answered at once with the next ``node`` + ``stopped`` events, so the time measured is
the UI's own: events in, snapshot, panels updated, a full frame rendered.

    python benchmarks/bench_ui.py [--nodes 10000] [--keys 30]

Targets (issue 3): first frame <= 1 s; key-to-updated-panels median <= 50 ms; the same for the
module view (issue 16: m's first frame <= 1 s, a key in it <= 50 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from textual import events  # noqa: E402
from ui_wait import until  # noqa: E402

from backstep.tui.app import BackstepApp  # noqa: E402
from backstep.tui.panels.graph import GraphPanel  # noqa: E402
from backstep.tui.panels.modules import ModulePanel  # noqa: E402
from backstep.tui.runtime.link import LinkedApp  # noqa: E402
from tests.tui_fixtures import live_app, summary, transformer_pass  # noqa: E402


def stepping_events(event: dict[str, Any], steps: int) -> list[dict[str, Any]]:
    """session, pass_begin, then ``steps`` stops each followed by its node event."""
    out: list[dict[str, Any]] = [
        {"event": "session", "version": 1, "torch": "bench", "argv": ["bench"], "pid": 1},
        event,
    ]
    grads = [summary([0.5, -1.0, 2.0, 0.25, 1.5, -0.75], [2, 3])]
    saved = [{"name": "self", "status": "alive", "shape": [64, 64], "dtype": "float32",
              "bytes": 16384, "version": {"saved": 0, "now": 0}}]
    for step, node in enumerate(event["nodes"][: steps + 1], start=1):
        out.append({"event": "stopped", "pass": 1, "step": step, "id": node["id"],
                    "name": node["name"], "reason": "pass_start" if step == 1 else "step",
                    "detail": None, "grad_outputs": grads, "saved": saved})
        out.append({"event": "node", "pass": 1, "step": step, "id": node["id"],
                    "name": node["name"], "grad_outputs": grads,
                    "grad_inputs": [grads[0] for _ in node["next"]], "saved": saved,
                    "error": None})
    return out


class InstantLink:
    """Answers each step at once with the next events, as a fast debuggee would."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events
        self.position = 0
        self.app: LinkedApp | None = None

    def open(self, app: LinkedApp) -> None:
        self.app = app

    def feed_until_stop(self) -> None:
        assert self.app is not None
        while self.position < len(self.events):
            event = self.events[self.position]
            self.position += 1
            self.app.reader.feed(event)
            if event["event"] == "stopped":
                return

    def send(self, message: dict[str, Any]) -> bool:
        if message.get("cmd") == "step":
            self.feed_until_stop()
        return True

    def close(self) -> None:
        pass

    def returncode(self) -> int | None:
        return 0


def press(app: BackstepApp, key: str) -> None:
    """Deliver a key the way the driver does: a Key event posted to the app."""
    app.post_message(events.Key(key, None))


def full_frame(app: BackstepApp) -> None:
    """Render every line of the screen, as the terminal will show it."""
    app.screen._compositor.render_strips()


async def measure(nodes: int, keys: int) -> dict[str, Any]:
    event = transformer_pass(nodes)
    link = InstantLink(stepping_events(event, 2 * keys + 1))
    app = live_app(link)
    result: dict[str, Any] = {"nodes": len(event["nodes"])}
    async with app.run_test(size=(140, 42)) as pilot:
        await pilot.pause()
        started = time.perf_counter()
        link.feed_until_stop()  # session, pass_begin, first stopped
        await until(lambda: app.snapshot.stop is not None and app.selected is not None)
        full_frame(app)
        result["first_frame"] = time.perf_counter() - started

        samples = []
        for k in range(keys):
            target = k + 2
            t0 = time.perf_counter()
            press(app, "n")
            await until(lambda target=target: app.snapshot.stop is not None
                        and app.snapshot.stop.step == target and not app.waiting)
            full_frame(app)
            samples.append(time.perf_counter() - t0)
        result["step"] = samples

        graph = app.query_one(GraphPanel)
        graph.focus()
        samples = []
        for _ in range(keys):
            before = app.selected
            t0 = time.perf_counter()
            press(app, "down")
            await until(lambda before=before: app.selected != before, timeout=2.0)
            full_frame(app)
            samples.append(time.perf_counter() - t0)
        result["select"] = samples

        # the module view (m): its first frame, then keys that move in it
        t0 = time.perf_counter()
        press(app, "m")
        modules = app.query_one(ModulePanel)
        await until(lambda: modules.display and modules.cursor_node is not None
                    and app.focused is modules)
        full_frame(app)
        result["modules_first"] = time.perf_counter() - t0
        samples = []
        for k in range(keys):
            before = modules.cursor_line
            t0 = time.perf_counter()
            press(app, "up" if k % 2 else "down")
            await until(lambda before=before: modules.cursor_line != before, timeout=2.0)
            full_frame(app)
            samples.append(time.perf_counter() - t0)
        result["modules_key"] = samples
        samples = []
        for _ in range(keys):  # n in the module view: counts and labels follow the step
            target = app.snapshot.stop.step + 1 if app.snapshot.stop else 0
            t0 = time.perf_counter()
            press(app, "n")
            await until(lambda target=target: app.snapshot.stop is not None
                        and app.snapshot.stop.step == target and not app.waiting, timeout=5.0)
            full_frame(app)
            samples.append(time.perf_counter() - t0)
        result["modules_step"] = samples
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--keys", type=int, default=30)
    args = parser.parse_args()
    r = asyncio.run(measure(args.nodes, args.keys))
    ms = 1000.0
    rows = [
        ("first frame after first stop", r["first_frame"] * ms, None, 1000.0),
        ("n (step) -> panels updated", statistics.median(r["step"]) * ms, max(r["step"]) * ms,
         50.0),
        ("down (select) -> panels updated", statistics.median(r["select"]) * ms,
         max(r["select"]) * ms, 50.0),
        ("m -> module view first frame", r["modules_first"] * ms, None, 1000.0),
        ("up/down in module view", statistics.median(r["modules_key"]) * ms,
         max(r["modules_key"]) * ms, 50.0),
        ("n in module view -> updated", statistics.median(r["modules_step"]) * ms,
         max(r["modules_step"]) * ms, 50.0),
    ]
    print(f"backstep UI benchmark: {r['nodes']} nodes, 140x42, {args.keys} keys each")
    print(f"{'measure':34} {'median ms':>10} {'max ms':>8} {'target ms':>10}  ok")
    ok_all = True
    for name, median, worst, target in rows:
        ok = median <= target
        ok_all &= ok
        worst_s = f"{worst:8.1f}" if worst is not None else f"{'':8}"
        print(f"{name:34} {median:10.1f} {worst_s} {target:10.0f}  {'yes' if ok else 'NO'}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
