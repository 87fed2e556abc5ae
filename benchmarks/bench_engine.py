"""Engine overhead: backward-pass time ratios against plain PyTorch, measured in one run.

    python benchmarks/bench_engine.py                # CPU: worst case + realistic, the table
    python benchmarks/bench_engine.py --quick        # fewer repetitions
    python benchmarks/bench_engine.py --device cuda  # GPU: small (the worst case) + gpt2
    python benchmarks/bench_engine.py --rss-only     # CPU: only the peak-RSS rows

Modes, interleaved repetition by repetition so machine noise hits them alike (medians):
  plain       no backstep
  trace       recording every node (``backstep trace``), events encoded to /dev/null
  armed       the live controller attached after "continue" with no breakpoints
  nonfinite   armed with a break-on-non-finite breakpoint (never trips here)
  anomaly     ``torch.autograd.detect_anomaly(check_nan=True)``: the bar nonfinite must beat
  floor rows  what any recorder built on Python node hooks pays before it writes anything:
              a post-hook on every node that does nothing (empty hooks: the call alone), one
              that keeps the gradients it sees (hooks: keeping every gradient to the end also
              costs the allocator page faults a recorder that reduces per batch never pays), and
              the same plus one exact min/max/sum/norm of every distinct gradient (hooks +
              reductions)
  ablation    a trace's recording with no event built, diagnosed or written: what recording
              costs before its events (summaries reduced and read, hooks installed and run)
Host transfers per pass: on CUDA, the syncs counted by ``torch.cuda.set_sync_debug_mode``; on
CPU, the reads ``backstep.engine.transfers`` counts with the device path forced on
(``summary_device.FORCE``, ``device_checks.FORCE``): the reads a GPU would sync on. Bound: a
recorded pass makes at most ceil(nodes / 256) + 4.
Summary ops per node: the aten ops a recorded pass dispatches inside ``SummaryBatch`` (counted
by a ``TorchDispatchMode``; on CPU with the device path forced on) over the pass's graph nodes:
what a GPU pays in kernel launches (and views), counted where no GPU is. On CPU the second
workload is gpt2's shapes (``--ops-layers`` of its 12 blocks: each block dispatches alike);
``--ops-only`` prints just these rows. Target: a quarter of the count before grouped reductions.
Forward after trace: the thread CPU time of a forward that follows a recorded backward (as every
forward under ``backstep trace --no-source`` does) over one that follows a plain backward.
Peak RSS is measured in child processes running the same training steps (AdamW, the loss kept
in a variable until the next step, as a script does): plain, ``trace`` as ``backstep trace``
records (provenance on: every forward op tagged) and ``trace --no-source``; on CUDA, the peak GPU
memory of one backward over what the forward left allocated.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import gpt2, gpt_realistic, transformer_worst_case  # noqa: E402

from backstep.engine import device_checks, transfers
from backstep.engine.capture import Capture  # noqa: E402
from backstep.engine.controller import Controller  # noqa: E402
from backstep.engine.diagnostics import Diagnostician  # noqa: E402
from backstep.engine.recorder import JsonlRecorder  # noqa: E402
from backstep.engine.summary import device as summary_device  # noqa: E402

WORKLOADS: dict[str, Callable[..., tuple]] = {
    "worst": transformer_worst_case, "realistic": gpt_realistic, "small": transformer_worst_case,
    "gpt2": gpt2,
}
COLUMNS = {"cpu": ("worst", "realistic"), "cuda": ("small", "gpt2")}
TARGETS = {  # device -> mode -> (first, second workload) ratio targets from the GPU issue
    "cpu": {"trace": (4.0, 1.5), "armed": (1.05, 1.05), "nonfinite": (1.5, 1.2),
            "anomaly": (None, None)},
    "cuda": {"trace": (3.0, 1.5), "armed": (1.02, 1.02), "nonfinite": (1.5, 1.2),
             "anomaly": (None, None)},
}


class _NoEvents(Capture):
    """Recording with every event left out: hooks, summaries and their reductions as a trace
    makes them, then nothing built, diagnosed or written (the "no events" ablation row)."""

    def _flush(self, p: Any) -> dict[int, list[Any]]:
        if p.records:
            p.records = []
            p.batch.compute()
        return {}


def _capture(mode: str) -> Capture | None:
    if mode == "plain":
        return None
    if mode == "trace":  # as `backstep trace` records: diagnostics on, events encoded
        return Capture(Diagnostician(JsonlRecorder(open(os.devnull, "wb"))))  # noqa: SIM115
    if mode == NO_EVENTS:
        return _NoEvents(JsonlRecorder(open(os.devnull, "wb")))  # noqa: SIM115
    breakpoints = [{"kind": "nonfinite"}] if mode == "nonfinite" else []
    controller = Controller(lambda event: None, breakpoints, stop_at_pass_start=False)
    return Capture(None, controller)


def _walk(root: torch.autograd.graph.Node) -> list[torch.autograd.graph.Node]:
    nodes, seen, stack = [], {root}, [root]
    while stack:
        node = stack.pop()
        nodes.append(node)
        for child, _ in node.next_functions:
            if child is not None and child not in seen:
                seen.add(child)
                stack.append(child)
    return nodes


def _floor_backward(loss: torch.Tensor, floor: str) -> None:
    """The least a per-node recorder does: hook every node, keep what it sees ("keep"), unhook;
    with "reduce", also one exact min/max, sum and norm per distinct gradient (batched norms);
    with "empty", the hooks keep nothing."""
    seen: list[tuple] = []
    hook = (lambda gi, go: None) if floor == "empty" else (lambda gi, go: seen.append((gi, go)))
    handles = [node.register_hook(hook) for node in _walk(loss.grad_fn)]
    loss.backward()
    for handle in handles:
        handle.remove()
    if floor == "reduce":
        grads = list({id(g): g for pair in seen for group in pair for g in group
                      if g is not None}.values())
        extrema = [g.aminmax() for g in grads]
        sums = [g.sum() for g in grads]
        norms = torch._foreach_norm(grads)
        torch.stack([torch.stack([e.min for e in extrema]), torch.stack([e.max for e in extrema]),
                     torch.stack(sums), torch.stack(norms)]).tolist()


NO_EVENTS = "ablation: trace, no events"
# summary ops per node before grouped reductions (95191fe, CPU, device path forced on; gpt2 with
# 2 of its 12 blocks): the target is a quarter of these
OPS_BEFORE = {"worst": 3.089, "small": 3.089, "gpt2": 28.158}
FLOORS = {"floor: empty hooks": "empty", "floor: hooks": "keep",
          "floor: hooks + reductions": "reduce"}


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def time_modes(name: str, reps: int, device: str = "cpu") -> dict[str, float]:
    model, make_loss = WORKLOADS[name](device=device)
    modes = ["plain", "trace", "armed", "nonfinite", "anomaly", *FLOORS, NO_EVENTS]
    captures = {mode: _capture(mode) for mode in modes if mode not in FLOORS and mode != "anomaly"}
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    for rep in range(reps + 2):
        for mode in modes:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # detect_anomaly warns that it is slow
                anomaly = (torch.autograd.detect_anomaly(check_nan=True) if mode == "anomaly"
                           else contextlib.nullcontext())
                with anomaly:
                    loss = make_loss()
                    capture = captures.get(mode)
                    if capture is not None:
                        capture.install()
                    _sync(device)
                    start = time.perf_counter()
                    if mode in FLOORS:
                        _floor_backward(loss, FLOORS[mode])
                    else:
                        loss.backward()
                    _sync(device)
                    elapsed = time.perf_counter() - start
            if capture is not None:
                capture.uninstall()
            model.zero_grad(set_to_none=True)
            if rep >= 2:  # the first two repetitions warm caches and allocators
                samples[mode].append(elapsed)
    return {mode: statistics.median(values) for mode, values in samples.items()}


def forward_after(name: str, reps: int) -> float:
    """Forward cost under ``backstep trace --no-source``: the thread CPU time of a forward that
    follows a recorded backward (capture installed, as in a trace) over one that follows a plain
    backward (nothing installed); the two alternate, medians of ``reps``."""
    model, make_loss = WORKLOADS[name]()
    capture = _capture("trace")
    assert capture is not None
    samples: dict[bool, list[float]] = {False: [], True: []}
    for rep in range(reps + 2):
        for traced in ((False, True) if rep % 2 else (True, False)):
            if traced:
                capture.install()
            make_loss().backward()  # the backward the timed forward follows
            model.zero_grad(set_to_none=True)
            start = time.thread_time()
            loss = make_loss()
            elapsed = time.thread_time() - start
            loss.backward()
            model.zero_grad(set_to_none=True)
            if traced:
                capture.uninstall()
            if rep >= 2:
                samples[traced].append(elapsed)
    return statistics.median(samples[True]) / statistics.median(samples[False])


def host_transfers(name: str, mode: str, device: str) -> tuple[int, int]:
    """(host transfers, nodes) of one pass in ``mode``: CUDA syncs, or on CPU the reads the
    device path makes (forced on)."""
    model, make_loss = WORKLOADS[name](device=device)
    loss = make_loss()
    capture = _capture(mode)
    nodes = len(_walk(loss.grad_fn))
    forced = device == "cpu"
    summary_device.FORCE = device_checks.FORCE = forced
    assert capture is not None
    capture.install()
    try:
        if device == "cuda":
            torch.cuda.synchronize()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                torch.cuda.set_sync_debug_mode("warn")
                try:
                    loss.backward()
                finally:
                    torch.cuda.set_sync_debug_mode("default")
            count = sum("synchroniz" in str(w.message) for w in caught)
        else:
            before = transfers.count()
            loss.backward()
            count = transfers.count() - before
    finally:
        capture.uninstall()
        summary_device.FORCE = device_checks.FORCE = False
    return count, nodes


class _OpCounter(TorchDispatchMode):
    """Counts the aten ops dispatched while ``depth`` > 0 (inside a summary method), and the
    bytes of the largest tensor one of them allocates (an output whose storage no input has:
    the largest temporary the summaries make)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.ops = 0
        self.largest = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if self.depth:
            self.ops += 1
            inputs = {t.untyped_storage().data_ptr() for t in _tensors((args, kwargs))}
            for t in _tensors(out):
                storage = t.untyped_storage()
                if storage.data_ptr() not in inputs:
                    self.largest = max(self.largest, storage.nbytes())
        return out


def _tensors(tree: Any) -> list[torch.Tensor]:
    if isinstance(tree, torch.Tensor):
        return [tree]
    if isinstance(tree, (list, tuple)):
        return [t for item in tree for t in _tensors(item)]
    if isinstance(tree, dict):
        return [t for item in tree.values() for t in _tensors(item)]
    return []


def summary_ops(name: str, layers: int | None = None, device: str = "cpu") -> tuple[int, int]:
    """(aten ops dispatched for summaries, nodes) of one recorded pass: on CPU with the device
    path forced on, the summary kernels a GPU would launch, counted without one. The memory the
    summaries cost is in ``summary_memory`` after the call."""
    from backstep.engine.summary import batch as summary_batch

    builder = WORKLOADS[name]
    model, make_loss = (builder(device=device) if layers is None
                        else builder(layers=layers, device=device))
    make_loss().backward()  # warm: the first pass allocates what later ones reuse
    model.zero_grad(set_to_none=True)
    loss = make_loss()
    nodes = len(_walk(loss.grad_fn))
    capture = _capture("trace")
    assert capture is not None
    counter = _OpCounter()
    cls = summary_batch.SummaryBatch
    originals = {m: getattr(cls, m) for m in ("add", "settle", "compute")}

    held = [0]

    def counted(method: Callable[..., Any]) -> Callable[..., Any]:
        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            counter.depth += 1
            try:
                return method(self, *args, **kwargs)
            finally:
                counter.depth -= 1
                held[0] = max(held[0], self._device_held)
        return run

    for m, method in originals.items():
        setattr(cls, m, counted(method))
    summary_device.FORCE = device == "cpu"
    capture.install()
    try:
        with counter:
            loss.backward()
    finally:
        capture.uninstall()
        summary_device.FORCE = False
        for m, method in originals.items():
            setattr(cls, m, method)
    summary_memory.update(temporary=counter.largest, held=held[0])
    return counter.ops, nodes


# of the last ``summary_ops``: bytes of the largest temporary a summary op allocated, and the
# most device gradients a batch held referenced at once
summary_memory: dict[str, int] = {}


def peak_gpu(name: str, mode: str) -> int:
    """Peak GPU memory (bytes) of one backward over what its forward left allocated."""
    model, make_loss = WORKLOADS[name](device="cuda")
    capture = _capture(mode)
    peaks = []
    for _ in range(3):
        loss = make_loss()
        if capture is not None:
            capture.install()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss.backward()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated() - base)
        if capture is not None:
            capture.uninstall()
        del loss
        model.zero_grad(set_to_none=True)
    return peaks[-1]


RSS_MODES = ("plain", "trace", "no-source")  # as python, ``backstep trace``, and --no-source


def peak_rss(name: str, mode: str, iterations: int) -> int:
    """Peak RSS (KiB) of a fresh process running ``iterations`` training steps (``mode``: one
    of ``RSS_MODES``; ``trace`` installs provenance as ``backstep trace`` does)."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = "\n".join([
        f"import sys, resource; sys.path.insert(0, {here!r})",
        "import torch",
        "from bench_engine import _capture, WORKLOADS",
        f"model, make_loss = WORKLOADS[{name!r}]()",
        "optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)",
        f"cap = _capture({'plain' if mode == 'plain' else 'trace'!r})",
        "if cap: cap.install()",
        *(["from backstep.engine.provenance import Provenance, annotate",
           "Provenance().install(); cap.annotate = annotate"] if mode == "trace" else []),
        f"for _ in range({iterations}):",
        "    loss = make_loss(); optimizer.zero_grad(set_to_none=True)",
        "    loss.backward(); optimizer.step()",
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)",
    ])
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def rss_rows(name: str, iterations: int) -> list[tuple[str, str, float, float | None, bool | None]]:
    """The peak-RSS rows of one workload: plain, then each traced mode over plain."""
    base, *others = (peak_rss(name, mode, iterations) for mode in RSS_MODES)
    rows: list[tuple[str, str, float, float | None, bool | None]] = [
        (name, f"peak RSS plain {base // 1024} MiB", 1.0, None, None)]
    for mode, peak in zip(RSS_MODES[1:], others, strict=True):
        ratio = peak / base
        rows.append((name, f"peak RSS {mode} {peak // 1024} MiB", ratio, 1.05, ratio <= 1.05))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-rss", action="store_true", help="skip the peak-RSS children")
    parser.add_argument("--rss-only", action="store_true",
                        help="only the peak-RSS rows (CPU; no timing)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the workloads run (cuda: small + gpt2)")
    parser.add_argument("--ops-only", action="store_true",
                        help="only the summary-op counts (no timing)")
    parser.add_argument("--ops-layers", type=int, default=2,
                        help="gpt2 blocks for the CPU summary-op count (of 12; 0: all)")
    parser.add_argument("--workload", choices=sorted(WORKLOADS),
                        help="only this workload (default: both of the device's)")
    args = parser.parse_args(argv)
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device here")
    reps = 5 if args.quick else (10 if device == "cuda" else 15)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    rows: list[tuple[str, str, float, float | None, bool | None]] = []
    for column, name in enumerate(COLUMNS[device]):
        if args.workload and name != args.workload:
            continue
        if args.rss_only and device == "cpu":
            rows += rss_rows(name, 3 if args.quick else 6)
            continue
        ops_name = "gpt2" if device == "cpu" and name == "realistic" else name
        layers = args.ops_layers or None if ops_name == "gpt2" and device == "cpu" else None
        ops, nodes = summary_ops(ops_name, layers, device)
        label = "summary ops/node" if ops_name == name else f"summary ops/node ({ops_name})"
        ops_target = OPS_BEFORE[ops_name] / 4
        ops_row = (name, label, ops / nodes, ops_target, ops / nodes <= ops_target)
        memory_rows = [(name, f"summary {key} (MiB)", summary_memory[key] / 2**20, None, None)
                       for key in ("temporary", "held")]
        if args.ops_only:
            rows += [ops_row, *memory_rows]
            continue
        times = time_modes(name, reps, device)
        plain = times["plain"]
        rows.append((name, "plain backward (ms)", plain * 1e3, None, None))
        for mode, targets in TARGETS[device].items():
            ratio = times[mode] / plain
            target = targets[column]
            rows.append((name, f"{mode} ratio", ratio, target,
                         None if target is None else ratio <= target))
        for mode in (*FLOORS, NO_EVENTS):
            rows.append((name, f"{mode}", times[mode] / plain, None, None))
        if device == "cpu":
            ratio = forward_after(name, reps)
            rows.append((name, "forward after trace (CPU)", ratio, 1.03, ratio <= 1.03))
        for mode in ("trace", "nonfinite"):
            count, nodes = host_transfers(name, mode, device)
            bound = math.ceil(nodes / 256) + 4
            rows.append((name, f"{mode} host transfers", count, bound, count <= bound))
        rows += [ops_row, *memory_rows]
        if device == "cuda":
            base, traced = peak_gpu(name, "plain"), peak_gpu(name, "trace")
            ratio = traced / base if base else 1.0
            rows.append((name, f"peak GPU {base / 2**20:.1f}->{traced / 2**20:.1f} MiB", ratio,
                         1.10, ratio <= 1.10))
        elif not args.no_rss:
            rows += rss_rows(name, 3 if args.quick else 6)
    where = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    print(f"torch {torch.__version__}, {where}, {torch.get_num_threads()} threads, "
          f"medians of {reps}")
    print(f"{'workload':<10} {'measure':<28} {'value':>8} {'target':>8}  ok")
    for name, measure, value, target, ok in rows:
        target_text = f"<= {target:g}" if target is not None else ""
        ok_text = "" if ok is None else ("yes" if ok else "NO")
        print(f"{name:<10} {measure:<28} {value:>8.3f} {target_text:>8}  {ok_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
