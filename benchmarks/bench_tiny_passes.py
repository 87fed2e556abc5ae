"""Instructions per training step of the polynomial tutorial, under callgrind: a steady number
where wall-clock ratios drown in a shared machine's noise.

    python benchmarks/bench_tiny_passes.py                  # autograd and Function, every mode
    python benchmarks/bench_tiny_passes.py --script function --modes plain,trace --steps 50

Each mode runs in its own ``valgrind --tool=callgrind`` process that collects only inside the
measured steps (``--toggle-collect=functools_reduce``: the steps run under one
``functools.reduce``), after a few warm-up steps, so imports and start-up are left out.
Modes: ``plain`` (no backstep), ``trace`` (capture into a JSONL file with provenance, as
``backstep trace``), ``nosrc`` (``--no-source``), ``empty`` (an empty TorchFunctionMode: the
floor any torch-function-mode provenance pays), ``prov`` (provenance alone, no capture), ``floor``
(the least any in-process trace of these passes runs: the empty mode, a post-hook that keeps its
arguments on every node of every pass, and each pass's distinct gradients reduced to min, max, sum
and norm and read as Python floats; no naming, saved tensors, rounding, JSON, diagnostics or
writing).
Needs valgrind; about a minute per mode.
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = ("plain", "trace", "nosrc", "empty", "prov", "floor")


def _steps(script: str) -> tuple[list, object]:
    """The tutorial's parameters and one step of it (as benchmarks/corpus/poly_*.py)."""
    import torch

    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)

    class LegendrePolynomial3(torch.autograd.Function):
        @staticmethod
        def forward(ctx, input):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(input)
            return 0.5 * (5 * input**3 - 3 * input)

        @staticmethod
        def backward(ctx, grad_output):  # type: ignore[no-untyped-def]
            (input,) = ctx.saved_tensors
            return grad_output * 1.5 * (5 * input**2 - 1)

    params = [torch.full((), v, requires_grad=True) for v in (0.0, -1.0, 0.0, 0.3)]
    a, b, c, d = params

    def step(*_: object) -> None:
        if script == "function":
            y_pred = a + b * LegendrePolynomial3.apply(c + d * x)
        else:
            y_pred = a + b * x + c * x**2 + d * x**3
        loss = (y_pred - y).pow(2).sum()
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= 1e-6 * p.grad
                p.grad = None

    return params, step


class _Floor:
    """The ``floor`` mode: see the module docstring. A context manager around the steps."""

    def __enter__(self) -> _Floor:
        import torch
        from torch.overrides import TorchFunctionMode

        class Empty(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                return func(*args, **(kwargs or {}))

        self.mode = Empty()
        self.mode.__enter__()
        self.original = original = torch.autograd._engine_run_backward

        def run(t_outputs, *args, **kwargs):  # type: ignore[no-untyped-def]
            outputs = t_outputs if isinstance(t_outputs, (tuple, list)) else (t_outputs,)
            nodes, seen = [], set()
            stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
            while stack:
                node = stack.pop()
                if node not in seen:
                    seen.add(node)
                    nodes.append(node)
                    stack += [n for n, _ in node.next_functions if n is not None]
            records: list = []
            handles = [node.register_hook(functools.partial(_keep, records, i))
                       for i, node in enumerate(nodes)]
            try:
                return original(t_outputs, *args, **kwargs)
            finally:
                for handle in handles:
                    handle.remove()
                _reduce(records)

        torch.autograd._engine_run_backward = run
        return self

    def __exit__(self, *exc: object) -> None:
        import torch

        torch.autograd._engine_run_backward = self.original
        self.mode.__exit__(None, None, None)


def _keep(records: list, i: int, grad_inputs: tuple, grad_outputs: tuple) -> None:
    records.append((i, grad_inputs, grad_outputs))


def _reduce(records: list) -> list[float]:
    """min, max, sum and norm of each distinct gradient of a pass, as Python floats."""
    import torch

    distinct = {id(t): t for _, gi, go in records for t in (*gi, *go) if t is not None}
    many = [t for t in distinct.values() if t.numel() > 1]
    values = [t.item() for t in distinct.values() if t.numel() == 1]
    if many:
        pairs = [t.aminmax() for t in many]
        stats = [*(v for pair in pairs for v in pair), *(t.sum() for t in many),
                 *torch._foreach_norm(many)]
        values += torch.stack(stats).tolist()
    return values


def child(mode: str, script: str, steps: int) -> None:
    """Warm up, then run ``steps`` steps inside functools.reduce (what callgrind collects)."""
    sys.path.insert(0, str(ROOT))
    _, step = _steps(script)

    def measured() -> None:
        for _ in range(5):
            step()
        functools.reduce(step, range(steps), None)

    if mode == "plain":
        measured()
    elif mode == "empty":
        from torch.overrides import TorchFunctionMode

        class Empty(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                return func(*args, **(kwargs or {}))

        with Empty():
            measured()
    elif mode == "floor":
        with _Floor():
            measured()
    elif mode == "prov":
        from backstep.engine.provenance import Provenance

        with Provenance():
            measured()
    else:
        from backstep.engine.recorder import JsonlRecorder
        from backstep.engine.session import Session

        with tempfile.TemporaryFile() as out, Session(JsonlRecorder(out),
                                                      source=mode == "trace"):
            measured()


def measure(mode: str, script: str, steps: int) -> int:
    """Instructions per step of ``mode``, from a callgrind run of this file as the child."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no",
                        "--toggle-collect=functools_reduce", f"--callgrind-out-file={out}",
                        sys.executable, __file__, "--child", mode, script, str(steps)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       env={**os.environ, "OMP_NUM_THREADS": "1"})
        text = Path(out).read_text(errors="replace")
    found = re.search(r"^summary: (\d+)", text, re.M)
    return int(found.group(1)) // steps if found else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--script", choices=("autograd", "function"), action="append")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args(argv)
    if args.child:
        mode, script, steps = args.child
        child(mode, script, int(steps))
        return 0
    for script in args.script or ("autograd", "function"):
        counts = {mode: measure(mode, script, args.steps) for mode in args.modes.split(",")}
        plain = counts.get("plain")
        cells = [f"{mode} {n / 1e6:.3f}M" + (f" ({n / plain:.2f}x)" if plain else "")
                 for mode, n in counts.items()]
        print(f"poly_{script:<9} instructions/step: " + ", ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
