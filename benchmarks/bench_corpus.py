"""Whole-script trace overhead on training patterns people copy, measured in one run.

    python benchmarks/bench_corpus.py            # every script, 3 pairs each
    python benchmarks/bench_corpus.py --quick    # fewer steps per script, 3 pairs
    python benchmarks/bench_corpus.py --script poly_autograd --pairs 5
    python benchmarks/bench_corpus.py --clock cpu # the children's CPU time, not wall time

Each script in benchmarks/corpus/ runs as a user would run it: ``python SCRIPT`` (plain),
``backstep trace -o FILE SCRIPT`` (trace) and ``backstep trace --no-source`` (no source). A
repetition runs the three back to back, rotating their order, so machine noise hits them alike;
a ratio is the median over repetitions of each repetition's mode / plain wall time (process start
and imports included, as a user waits for them). Each run's stdout must equal plain python's, and
each must exit 0: a script that prints or fails differently under backstep is a FAIL whatever its
speed.

Scripts and targets (issue 28, trace / plain):
  poly_autograd           2,000 tiny passes (the polynomial tutorial, autograd)     <= 1.5
  poly_function           the same through a custom autograd.Function               <= 1.5
  checkpoint_transformer  reentrant checkpoint: a nested pass per block per step    <= 1.3
  lbfgs_lstm              LBFGS closure, unrolled LSTMCells: passes of ~10,000 nodes (reported)
Exits 1 when a target is missed or a run differs from plain python.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
ROOT = HERE.parent

# script -> (target for trace, target for --no-source, steps under --quick)
SCRIPTS: dict[str, tuple[float | None, float | None, int]] = {
    "poly_autograd": (1.5, 1.5, 500),
    "poly_function": (1.5, 1.5, 500),
    "checkpoint_transformer": (1.3, 1.3, 4),
    "lbfgs_lstm": (None, None, 1),
}
MODES = ("plain", "trace", "no source")


def _command(mode: str, script: Path, args: list[str], out: str) -> list[str]:
    if mode == "plain":
        return [sys.executable, str(script), *args]
    flags = ["--no-source"] if mode == "no source" else []
    return [sys.executable, "-m", "backstep", "trace", "-o", out, *flags, str(script), *args]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(command: list[str], clock: str, threads: int | None = None) -> tuple[float, int, str]:
    """(seconds on ``clock``, exit code, stdout) of one run; stderr is left out (torch's own
    warnings). ``cpu``: the child's user + system time, steadier than wall time on a shared
    machine, but idle OpenMP threads spinning while Python works count too: pair it with
    ``threads=1``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                                     os.environ.get("PYTHONPATH")]))}
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    wall, cpu = time.perf_counter(), _cpu()
    done = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                          cwd=CORPUS, check=False)
    seconds = _cpu() - cpu if clock == "cpu" else time.perf_counter() - wall
    return seconds, done.returncode, done.stdout.decode(errors="replace")


def measure(name: str, pairs: int, args: list[str],
            clock: str = "wall",
            threads: int | None = None) -> tuple[dict[str, float], float, list[str]]:
    """Median ratio to plain per mode, the median plain seconds, and what went wrong."""
    script = CORPUS / f"{name}.py"
    ratios: dict[str, list[float]] = {mode: [] for mode in MODES[1:]}
    plains: list[float] = []
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "trace.jsonl")
        for rep in range(pairs):
            order = MODES[rep % len(MODES):] + MODES[:rep % len(MODES)]
            runs = {mode: _run(_command(mode, script, args, out), clock, threads) for mode in order}
            seconds, code, stdout = runs["plain"]
            plains.append(seconds)
            for mode in MODES[1:]:
                traced, traced_code, traced_out = runs[mode]
                if traced_code != code or code != 0:
                    problems.append(f"{mode}: exit {traced_code}, plain {code}")
                elif traced_out != stdout:
                    problems.append(f"{mode}: stdout differs from plain python's")
                ratios[mode].append(traced / seconds)
    return ({mode: statistics.median(values) for mode, values in ratios.items()},
            statistics.median(plains), sorted(set(problems)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps in every script")
    parser.add_argument("--pairs", type=int, default=3, help="repetitions of each mode")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="wall time (what a user waits), or the child's CPU time (steadier "
                             "where other work shares the machine)")
    parser.add_argument("--threads", type=int,
                        help="torch's intra-op threads in every run (OMP_NUM_THREADS)")
    parser.add_argument("--script", choices=sorted(SCRIPTS), action="append",
                        help="only this script (repeatable)")
    args = parser.parse_args(argv)
    failed = False
    threads = f"{args.threads} thread(s)" if args.threads else "default threads"
    print(f"python {sys.version.split()[0]}, {args.clock} time, medians of {args.pairs} "
          f"repetitions{', --quick' if args.quick else ''}, {os.cpu_count()} CPUs, {threads}")
    print(f"{'script':<24} {'plain s':>8} {'trace':>7} {'target':>7} {'no-src':>7} {'target':>7}"
          "  ok")
    for name, (target, target_bare, quick_steps) in SCRIPTS.items():
        if args.script and name not in args.script:
            continue
        ratios, plain, problems = measure(name, args.pairs,
                                          [str(quick_steps)] if args.quick else [], args.clock,
                                          args.threads)
        ok = not problems and all(
            limit is None or ratios[mode] <= limit
            for mode, limit in (("trace", target), ("no source", target_bare)))
        failed |= not ok
        cells = [f"{ratios['trace']:>6.2f}x", f"{'<= ' + format(target, 'g') if target else '':>7}",
                 f"{ratios['no source']:>6.2f}x",
                 f"{'<= ' + format(target_bare, 'g') if target_bare else '':>7}"]
        print(f"{name:<24} {plain:>8.2f} {' '.join(cells)}  {'yes' if ok else 'FAIL'}")
        for problem in problems:
            print(f"    {problem}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
