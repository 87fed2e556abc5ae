"""Whole runs: ``backstep trace --when nonfinite`` with nothing tripping, and the history alone
(``--every`` larger than the run), as backward-time ratios against plain PyTorch measured in
one run (interleaved repetitions, medians), and the history's bytes per leaf per pass.

    python benchmarks/bench_history.py            # CPU: worst case + realistic
    python benchmarks/bench_history.py --quick

Targets (issue 47): ``when nonfinite`` <= 1.05x on the realistic workload and <= 1.5x on the
worst case on CPU; history <= 16 bytes per leaf per pass.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads import gpt_realistic, transformer_worst_case  # noqa: E402

from backstep.engine.diagnostics import Diagnostician  # noqa: E402
from backstep.engine.plan import TracePlan  # noqa: E402
from backstep.engine.planned import PlannedCapture  # noqa: E402
from backstep.engine.recorder import JsonlRecorder  # noqa: E402

WORKLOADS = {"worst": transformer_worst_case, "realistic": gpt_realistic}
TARGETS = {"when nonfinite": {"worst": 1.5, "realistic": 1.05}}


def _capture(mode: str, stream: io.BytesIO | None = None) -> PlannedCapture | None:
    if mode == "plain":
        return None
    sink = Diagnostician(JsonlRecorder(stream or open(os.devnull, "wb")))  # noqa: SIM115
    if mode == "when nonfinite":
        return PlannedCapture(sink, TracePlan(when=["nonfinite"]))
    return PlannedCapture(sink, TracePlan(every=10**9))  # "history only": pass 1 in full


def time_modes(name: str, reps: int) -> dict[str, float]:
    model, make_loss = WORKLOADS[name]()
    modes = ["plain", "when nonfinite", "history only"]
    captures = {mode: _capture(mode) for mode in modes}
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    for capture in captures.values():  # pass 1 (history only: written in full) is warm-up
        if capture is not None:
            capture.install()
            make_loss().backward()
            capture.uninstall()
            model.zero_grad(set_to_none=True)
    for rep in range(reps + 2):
        for mode in modes:
            loss = make_loss()
            capture = captures[mode]
            if capture is not None:
                capture.install()
            start = time.thread_time()  # this thread's CPU: the machine's load does not count
            loss.backward()
            elapsed = time.thread_time() - start
            if capture is not None:
                capture.uninstall()
            model.zero_grad(set_to_none=True)
            if rep >= 2:
                samples[mode].append(elapsed)
    return {mode: statistics.median(values) for mode, values in samples.items()}


def history_bytes(name: str, passes: int = 20) -> tuple[float, int]:
    """Bytes per leaf per pass of the history lines of ``passes`` passes, and the leaves."""
    model, make_loss = WORKLOADS[name]()
    stream = io.BytesIO()
    capture = _capture("when nonfinite", stream)
    assert capture is not None
    capture.install()
    for _ in range(passes):
        make_loss().backward()
    capture.uninstall()
    lines = [line for line in stream.getvalue().splitlines() if line.startswith(
        b'{"event":"history"')]
    leaves = capture.history.count
    return sum(len(line) + 1 for line in lines) / len(lines) / leaves, leaves


def read_speed(passes: int = 100_000, leaves: int = 150) -> tuple[float, float, int]:
    """CPU seconds ``backstep history`` takes over a ``passes``-pass, ``leaves``-leaf history
    (synthetic, written as the engine writes it), wall seconds, and the file's bytes."""
    import json
    import random
    import resource
    import subprocess
    import tempfile

    from backstep.engine.history import encode_floats

    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "run.jsonl")
        with open(path, "w") as f:
            f.write('{"event":"session","version":2}\n')
            names = [f"model.layer{i // 2}.{'weight' if i % 2 == 0 else 'bias'}"
                     for i in range(leaves)]
            f.write(json.dumps({"event": "leaves", "first": 0, "names": names,
                                "modules": [n.rsplit(".", 1)[0] for n in names]},
                               separators=(",", ":")) + "\n")
            for n in range(1, passes + 1):
                values = [rng.random() for _ in range(leaves)]
                f.write(json.dumps({"event": "history", "n": n, "loss": 1.0 / n,
                                    "ids": f"0-{leaves - 1}", "norm": encode_floats(values),
                                    "max": encode_floats(values)},
                                   separators=(",", ":")) + "\n")
        size = os.path.getsize(path)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "backstep", "history", path],
                       stdout=subprocess.DEVNULL, check=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall, size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    reps = 5 if args.quick else 15
    print(f"backward thread CPU time over plain, median of {reps} (torch {torch.__version__}, "
          "CPU, one intra-op thread)")
    for name in WORKLOADS:
        times = time_modes(name, reps)
        for mode in ("when nonfinite", "history only"):
            ratio = times[mode] / times["plain"]
            target = TARGETS.get(mode, {}).get(name)
            bar = f" (target <= {target})" if target else ""
            print(f"  {name:10s} {mode:15s} {ratio:5.2f}x{bar}   plain {times['plain']*1e3:.1f} ms")
        per_leaf, leaves = history_bytes(name)
        print(f"  {name:10s} history        {per_leaf:5.1f} bytes per leaf per pass "
              f"({leaves} leaves; target <= 16)")
    cpu, wall, size = read_speed()
    print(f"  backstep history over 100,000 passes x 150 leaves ({size / 1e6:.0f} MB): "
          f"{cpu:.1f} s CPU, {wall:.1f} s wall")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
