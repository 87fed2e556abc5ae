"""torch.compile under ``backstep trace`` vs plain python, measured in one run, interleaved.

    python benchmarks/bench_compile.py [--backend inductor] [--rounds 3] [--threads 1]

Each round runs ``compiled_gpt_run.py`` (a 2-layer GPT, d128, batch 4, seq 64) once plainly and
once under ``backstep trace``, in alternating order, each with a fresh inductor cache (the
compile is timed, not a cache hit). Targets: compile time (first forward+backward) <= 1.2x,
steady-state forward <= 1.10x, and the same graph breaks, graphs and recompiles. "forward" is
the median of each run's median step, "forward_min" the median of each run's fastest step (on a
loaded machine the fastest step is the one that shows the code, not the neighbours).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUN = str(HERE / "compiled_gpt_run.py")


def one(under: bool, backend: str, threads: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-compile-") as cache:
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "TORCHINDUCTOR_CACHE_DIR": cache,
               "PYTHONPATH": str(HERE.parent)}
        prefix = ([sys.executable, "-m", "backstep", "trace", "-o", os.path.join(cache, "t.jsonl")]
                  if under else [sys.executable])
        result = subprocess.run([*prefix, RUN, backend, str(steps)], capture_output=True,
                                text=True, env=env, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"run failed ({'trace' if under else 'plain'}):\n{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for r in range(args.rounds):
        for under in ((False, True) if r % 2 == 0 else (True, False)):
            runs[under].append(one(under, args.backend, args.threads, args.steps))
    plain, traced = runs[False], runs[True]

    def median(rows: list[dict], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    print(f"backend {args.backend}, {args.rounds} rounds, {args.threads} thread(s), "
          f"torch {__import__('torch').__version__}")
    for key, target in (("compile", 1.2), ("forward", 1.10), ("forward_min", 1.10)):
        p, t = median(plain, key), median(traced, key)
        unit, scale = ("s", 1.0) if key == "compile" else ("ms", 1e3)
        print(f"{key:8} plain {p * scale:8.2f} {unit}  trace {t * scale:8.2f} {unit}  "
              f"ratio {t / p:5.2f}x  (target <= {target}x)")
    for key in ("graph_breaks", "graphs", "recompiles"):
        print(f"{key:12} plain {[row[key] for row in plain]}  trace {[row[key] for row in traced]}")


if __name__ == "__main__":
    main()
