"""Realistic event streams for UI tests and benchmarks (no torch).

``example_events()`` is what the engine sends for ``out = (x*y + x)**2`` with x=2, y=3, stepping
through every node: PowBackward0 -> AddBackward0 -> MulBackward0 -> AccumulateGrad x, y.
x.grad = 2*(x*y+x)*(y+1) = 64 and y.grad = 2*(x*y+x)*x = 32.
"""

from __future__ import annotations

import inspect
import math
from typing import Any

from backstep.tui.app import BackstepApp


def example_script() -> None:  # pragma: no cover - the source lines the fixture events point at
    import torch

    x = torch.tensor(2.0, requires_grad=True)
    y = torch.tensor(3.0, requires_grad=True)
    out = (x * y + x) ** 2
    out.backward()
    print(x.grad, y.grad)


_LINES, _FIRST = inspect.getsourcelines(example_script)
SOURCE_FILE = inspect.getsourcefile(example_script) or __file__
OUT_LINE = _FIRST + next(i for i, line in enumerate(_LINES) if "out = (x * y + x)" in line)
SOURCE = {"file": SOURCE_FILE, "line": OUT_LINE, "code": "out = (x * y + x) ** 2"}
BACKWARD_LINE = _FIRST + next(i for i, line in enumerate(_LINES) if "out.backward()" in line)
PRINT_LINE = _FIRST + next(i for i, line in enumerate(_LINES) if "print(x.grad" in line)

POW, ADD, MUL, ACC_X, ACC_Y = 1, 2, 3, 4, 5


def summary(values: list[float], shape: list[int] | None = None) -> dict[str, Any]:
    """A tensor summary as the engine writes it."""
    shape = [] if shape is None and len(values) == 1 else (shape or [len(values)])
    finite = [v for v in values if math.isfinite(v)]

    def clean(x: float) -> float | str:
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x

    out: dict[str, Any] = {
        "shape": shape,
        "dtype": "float32",
        "device": "cpu",
        "min": clean(min(values)) if finite == values else "nan",
        "max": clean(max(values)) if finite == values else "nan",
        "mean": clean(sum(values) / len(values)) if finite == values else "nan",
        "norm": clean(math.sqrt(sum(v * v for v in values))) if finite == values else "nan",
        "nonfinite": len(values) - len(finite),
    }
    if len(values) <= 16:
        out["values"] = [clean(v) for v in values]
    return out


def saved(name: str, shape: list[int] | None = None, status: str = "alive",
          size: int = 4, version: tuple[int, int] | None = (0, 0)) -> dict[str, Any]:
    scalar = shape is None
    return {"name": name, "status": status, "shape": None if scalar else shape,
            "dtype": None if scalar else "float32", "bytes": 0 if scalar else size,
            "version": None if version is None else {"saved": version[0], "now": version[1]}}


def pass_begin(number: int = 1) -> dict[str, Any]:
    def node(i: int, name: str, nxt: list[int | None], leaf: str | None = None) -> dict[str, Any]:
        return {"id": i, "name": name, "next": nxt, "leaf": leaf,
                "source": None if leaf else SOURCE, "module": None}

    return {
        "event": "pass_begin", "pass": number, "parent": None, "api": "backward",
        "retain_graph": False, "create_graph": False, "roots": [POW], "inputs": None,
        "nodes": [
            node(POW, "PowBackward0", [ADD]),
            node(ADD, "AddBackward0", [MUL, ACC_X]),
            node(MUL, "MulBackward0", [ACC_X, ACC_Y]),
            node(ACC_X, "AccumulateGrad", [], "x"),
            node(ACC_Y, "AccumulateGrad", [], "y"),
        ],
    }


# (id, name, grad_outputs, grad_inputs, saved) in execution order
STEPS: list[tuple[int, str, list[float], list[float] | None, list[dict[str, Any]]]] = [
    (POW, "PowBackward0", [1.0], [16.0], [saved("self", []), saved("exponent")]),
    (ADD, "AddBackward0", [16.0], [16.0, 16.0], [saved("alpha")]),
    (MUL, "MulBackward0", [16.0], [48.0, 32.0], [saved("other", []), saved("self", [])]),
    (ACC_X, "AccumulateGrad", [64.0], None, []),
    (ACC_Y, "AccumulateGrad", [32.0], None, []),
]


def example_events(reason_first: str = "pass_start") -> list[dict[str, Any]]:
    """session, pass_begin, then for each node a ``stopped`` and the ``node`` (plus accumulate
    events), pass_end, and exit."""
    events: list[dict[str, Any]] = [
        {"event": "session", "version": 1, "torch": "2.13.0+cpu", "argv": ["example.py"],
         "pid": 4242},
        pass_begin(),
    ]
    for step, (node_id, name, outs, ins, keep) in enumerate(STEPS, start=1):
        grads_out = [summary([g]) for g in outs]
        events.append({"event": "stopped", "pass": 1, "step": step, "id": node_id, "name": name,
                       "reason": reason_first if step == 1 else "step", "detail": None,
                       "grad_outputs": grads_out, "saved": keep})
        events.append({"event": "node", "pass": 1, "step": step, "id": node_id, "name": name,
                       "grad_outputs": grads_out,
                       "grad_inputs": [summary([g]) for g in ins] if ins is not None else [],
                       "saved": keep, "error": None})
        if name == "AccumulateGrad":
            leaf = "x" if node_id == ACC_X else "y"
            events.append({"event": "accumulate", "pass": 1, "leaf": leaf, "id": node_id,
                           "before": None, "after": summary(outs), "retained": False})
    events.append({"event": "pass_end", "pass": 1, "status": "ok", "error": None, "skipped": []})
    events.append({"event": "exit", "code": 0, "traceback": None})
    return events


def upto_stop(n: int, events: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The events up to and including the n-th ``stopped`` (1-based)."""
    events = example_events() if events is None else events
    seen = 0
    for i, ev in enumerate(events):
        if ev["event"] == "stopped":
            seen += 1
            if seen == n:
                return events[: i + 1]
    return events


def after_stop(n: int, events: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """The events between the n-th stop and the next one (what a ``step`` produces)."""
    events = example_events() if events is None else events
    head = len(upto_stop(n, events))
    nxt = upto_stop(n + 1, events)
    return events[head : len(nxt)] if len(nxt) > head else events[head:]


class RecordingLink:
    """A Link that records commands; optionally replies to ``step`` with the next events."""

    def __init__(self, events: list[dict[str, Any]] | None = None, stop: int = 1) -> None:
        self.sent: list[dict[str, Any]] = []
        self.events = events
        self.stop = stop
        self.closed = False
        self.app: Any = None  # the LinkedApp it was opened with (the live driver)

    def open(self, app: Any) -> None:
        self.app = app
        if self.events is not None:
            for event in upto_stop(self.stop, self.events):
                app.reader.feed(event)

    def send(self, message: dict[str, Any]) -> bool:
        self.sent.append(message)
        if self.events is not None and self.app is not None and \
                message.get("cmd") in ("step", "continue", "finish"):
            if message["cmd"] == "step":
                chunk = after_stop(self.stop, self.events)
                self.stop += 1
            else:
                chunk = self.events[len(upto_stop(self.stop, self.events)):]
                self.stop = 10**9
            for event in chunk:
                self.app.reader.feed(event)
        return True

    def close(self) -> None:
        self.closed = True

    def returncode(self) -> int | None:
        return 0


# -- synthetic big graphs for the layout tests and the benchmark ---------------------------------

def chain_pass(n: int, number: int = 1) -> dict[str, Any]:
    """A pass_begin for an n-node linear chain ending in one leaf."""
    nodes = [{"id": i, "name": f"Op{i % 7}Backward0", "next": [i + 1], "leaf": None,
              "source": None, "module": None} for i in range(1, n)]
    nodes.append({"id": n, "name": "AccumulateGrad", "next": [], "leaf": "w", "source": None,
                  "module": None})
    return {"event": "pass_begin", "pass": number, "parent": None, "api": "backward",
            "retain_graph": False, "create_graph": False, "roots": [1], "inputs": None,
            "nodes": nodes}


def transformer_pass(n: int = 10_000, number: int = 1) -> dict[str, Any]:
    """A pass_begin shaped like a deep residual network: blocks of a few ops with a skip
    connection, a weight leaf per block, about ``n`` nodes in all."""
    nodes: list[dict[str, Any]] = []
    next_id = 1
    block = 0
    trunk: int | None = None  # the node that continues towards the input

    def add(name: str, nxt: list[int | None], leaf: str | None = None,
            module: str | None = None) -> int:
        nonlocal next_id
        node_id = next_id
        next_id += 1
        nodes.append({"id": node_id, "name": name, "next": nxt, "leaf": leaf,
                      "source": None, "module": module})
        return node_id

    # build from the input side up: each block = add(skip, mm(relu(trunk), w))
    x = add("AccumulateGrad", [], leaf="input")
    trunk = x
    while next_id < n - 6:
        module = f"model.layers.{block}"
        weight = add("AccumulateGrad", [], leaf=f"{module}.weight", module=module)
        t = add("TBackward0", [weight], module=module)
        relu = add("ReluBackward0", [trunk], module=module)
        mm = add("MmBackward0", [relu, t], module=module)
        trunk = add("AddBackward0", [trunk, mm], module=module)
        block += 1
    root = add("SumBackward0", [trunk])
    nodes.reverse()  # roots first, as the engine's walk lists them
    return {"event": "pass_begin", "pass": number, "parent": None, "api": "backward",
            "retain_graph": False, "create_graph": False, "roots": [root], "inputs": None,
            "nodes": nodes}


def stop_at(pass_begin_event: dict[str, Any], node_id: int, step: int = 1,
            reason: str = "pass_start") -> dict[str, Any]:
    name = next(n["name"] for n in pass_begin_event["nodes"] if n["id"] == node_id)
    return {"event": "stopped", "pass": pass_begin_event["pass"], "step": step, "id": node_id,
            "name": name, "reason": reason, "detail": None,
            "grad_outputs": [summary([0.5, -1.0, 2.0, 0.25], [2, 2])], "saved": []}


# -- diagnoses (what backstep.engine.diagnostics sends) -----------------------------------------

def diagnosis(kind: str = "graph_freed", node: int | None = MUL, pass_: int | None = 1, *,
              line: int | None = OUT_LINE, severity: str = "error",
              title: str = "Backward through a graph that was already freed",
              message: str | None = None,
              related: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A ``diagnosis`` event; by default a graph_freed on MulBackward0 whose saved tensors an
    earlier pass freed (the related lines point into ``example_script``)."""
    if message is None:
        message = (
            f"MulBackward0 (made at line {line}) needs the tensors it saved in the forward "
            "(self, other), but pass 1 (line {b}) already went through this graph and freed "
            "them. After a backward pass PyTorch frees the values each node saved, to save "
            "memory, unless the pass is called with retain_graph=True. Fix: pass "
            "retain_graph=True on the first backward, or run the forward again."
        ).replace("{b}", str(BACKWARD_LINE))
    if related is None:
        related = [
            {"role": "freed_by", "file": SOURCE_FILE, "line": BACKWARD_LINE,
             "code": "out.backward()"},
            {"role": "backward", "file": SOURCE_FILE, "line": PRINT_LINE,
             "code": "print(x.grad, y.grad)"},
        ]
    source = None if line is None else dict(SOURCE, line=line)
    return {"event": "diagnosis", "pass": pass_, "kind": kind, "title": title,
            "severity": severity, "message": message, "node": node, "source": source,
            "related": related}


def accumulating_diagnosis() -> dict[str, Any]:
    """A warning on leaf x's AccumulateGrad whose line is the backward call (no forward line)."""
    return diagnosis(
        "grad_accumulating", ACC_X, severity="warning", line=BACKWARD_LINE,
        title=".grad keeps accumulating across steps", related=[],
        message="The .grad of x was not reset: pass 1 added its gradient to the one left by "
                "pass 0. Fix: call optimizer.zero_grad() once per step.")


LONG_LEAVES = {"x": "model.transformer.h.0.ln_2.weight", "y": "model.transformer.h.11.mlp.c_proj.bias"}
LONG_MODULE = "model.transformer.h.11.mlp.c_proj"


def long_name_events() -> list[dict[str, Any]]:
    """``example_events()`` with the dotted names of a real model: long leaf names and a module
    path on every non-leaf node (what cuts badly in narrow panels)."""
    events = example_events()
    for ev in events:
        if ev["event"] == "pass_begin":
            ev["nodes"] = [dict(n, leaf=LONG_LEAVES.get(n["leaf"]),
                                module=None if n["leaf"] else LONG_MODULE) for n in ev["nodes"]]
        elif ev["event"] == "accumulate":
            ev["leaf"] = LONG_LEAVES[ev["leaf"]]
    return events


# -- the app over a session, as the commands make it (below the example: its line numbers
# are in the snapshots) ------------------------------------------------------------------------

def live_app(link: Any = None, **options: Any) -> BackstepApp:
    """The app over a live session behind ``link`` (a ``RecordingLink`` in most tests)."""
    from backstep.tui.runtime.live_driver import LiveDriver

    return BackstepApp(LiveDriver(link), **options)


def replay_app(index: Any, *, note: str | None = None, against: Any = None,
               settle_memory: bool = False, **options: Any) -> BackstepApp:
    """The app over a trace, as ``backstep show`` makes it."""
    from backstep.tui.runtime.replay_driver import ReplayDriver

    return BackstepApp(ReplayDriver(index, note=note, against=against,
                                    settle_memory=settle_memory), **options)


def gpt_named_events(nodes: int = 120) -> list[dict[str, Any]]:
    """A deep residual pass (``transformer_pass``) with GPT-2's dotted names, stopped at its root:
    AccumulateGrad rows two levels deep and long op names with source lines, where a narrow
    graph panel has little room."""
    event = transformer_pass(nodes)
    for node in event["nodes"]:
        if node["name"] == "AddBackward0":  # a long op name with a source line, at the top level
            node["name"] = "NativeLayerNormBackward0"
            node["source"] = {"file": "gpt.py", "line": 24, "code": "x = self.ln_1(x)"}
        if node["module"]:
            block = node["module"].split(".")[2]
            node["module"] = f"model.transformer.h.{block}.mlp.c_fc"
            if node["leaf"]:
                node["leaf"] = f"{node['module']}.weight"
    session = {"event": "session", "version": 1, "torch": "t", "argv": ["x"], "pid": 1}
    return [session, event, stop_at(event, event["nodes"][0]["id"])]


def no_wider(widget: Any) -> bool:
    """Every row of a scrolling panel fits its width: nothing is cut at the right edge."""
    return widget.virtual_size.width <= widget.scrollable_content_region.width


def make_app(stop: int = 3) -> BackstepApp:
    return live_app(RecordingLink(long_name_events(), stop=stop))


def long_name_app(stop: int = 3) -> BackstepApp:
    """The app at a stop of ``long_name_events``."""
    return live_app(RecordingLink(long_name_events(), stop=stop))


def renumbered(events: list[dict], number: int, shift: int) -> list[dict]:
    """``events``'s pass as pass ``number`` with every node id moved by ``shift``: a later pass
    has nodes of its own, as a real one does."""
    def moved(i: int | None) -> int | None:
        return None if i is None else i + shift

    out = []
    for ev in events:
        if ev["event"] in ("session", "exit"):
            continue
        ev = {**ev, "pass": number}
        if ev["event"] == "pass_begin":
            ev["roots"] = [moved(r) for r in ev["roots"]]
            ev["nodes"] = [{**n, "id": moved(n["id"]), "next": [moved(x) for x in n["next"]]}
                           for n in ev["nodes"]]
        elif "id" in ev:
            ev["id"] = moved(ev["id"])
        out.append(ev)
    return out


def two_passes_own_ids() -> list[dict]:
    """The example twice; pass 2's nodes have ids of their own."""
    first = [e for e in example_events() if e["event"] != "exit"]
    return first + renumbered(example_events(), 2, 100)


def panels(snap: Any) -> dict[str, Any]:
    """What the panels show: graph states, records, leaves, the stop (not its serial number)."""
    view = snap.pass_
    assert view is not None
    stop = snap.stop
    current = snap.current
    return {
        "pass": view.number,
        "states": {i: view.state(i, current) for i in view.graph.nodes},
        "records": [view.record(i) for i in view.executed()],
        "leaves": [(a.leaf, a.before, a.after, a.passes_since_zeroed)
                   for a in view.accumulations()],
        "leaf_norms": {k: repr(v) for k, v in snap.leaf_norms.items()},  # nan != nan
        "stop": None if stop is None else (stop.pass_, stop.step, stop.id, stop.name, stop.reason,
                                           stop.grad_outputs, stop.saved),
        "ended": (view.ended, view.status, view.skipped),
    }


def graph_basics_at_step_3() -> BackstepApp:
    """The UI stopped before MulBackward0 (step 3) with graph_basics' narration."""
    from pathlib import Path

    from backstep.demo import catalog as demos
    from backstep.demo import narration

    demo = demos.find("graph_basics", Path(__file__).resolve().parent.parent / "demos")
    assert demo is not None
    return live_app(RecordingLink(example_events(), stop=3),
                    narration=narration.load(demo.narration))


def unrolled_events(steps: int = 20) -> list[dict]:
    """An LSTM cell unrolled over ``steps`` time steps, as time_sequence_prediction's: a chain
    of AddBackward0 with, at every step, the same three-node branch (AddmmBackward0, TBackward0,
    ViewBackward0, all in ``net.cell`` from one forward line) into the shared weight."""
    def node(i: int, name: str, nxt: list[int], leaf: str | None = None) -> dict:
        return {"id": i, "name": name, "next": nxt, "leaf": leaf, "module": "net.cell",
                "source": None if leaf else {"file": "train.py", "line": 22,
                                             "code": "h, c = self.cell(x, (h, c))"}}

    weight = 4 * steps + 10
    nodes = [node(1, "MeanBackward0", [2 + 4 * (steps - 1)])]
    for t in range(steps):
        a = 2 + 4 * t
        nodes += [node(a, "AddBackward0", [a - 4 if t else weight + 1, a + 1]),
                  node(a + 1, "AddmmBackward0", [a + 2]), node(a + 2, "TBackward0", [a + 3]),
                  node(a + 3, "ViewBackward0", [weight])]
    nodes += [node(weight, "AccumulateGrad", [], leaf="net.cell.weight"),
              node(weight + 1, "AccumulateGrad", [], leaf="h0")]
    begin = {"event": "pass_begin", "pass": 1, "parent": None, "api": "backward",
             "retain_graph": False, "create_graph": False, "roots": [1], "inputs": None,
             "nodes": nodes}
    session = {"event": "session", "version": 1, "torch": "t", "argv": ["train.py"], "pid": 1}
    return [session, begin, stop_at(begin, 1)]
