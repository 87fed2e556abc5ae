"""One timed run of a small compiled GPT (run plainly and under ``backstep trace`` by
bench_compile.py): prints one JSON line with the compile time, the steady-state forward time
and Dynamo's counters.

    python benchmarks/compiled_gpt_run.py [BACKEND] [STEPS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch._dynamo.utils import counters

sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import GPT  # noqa: E402


def main() -> None:
    backend = sys.argv[1] if len(sys.argv) > 1 else "inductor"
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    torch.manual_seed(0)
    vocab, context = 256, 64
    model = GPT(vocab, 128, 4, 2, context)
    compiled = torch.compile(model, backend=backend)
    idx = torch.randint(0, vocab, (4, context))
    targets = torch.randint(0, vocab, (4, context))
    start = time.perf_counter()
    compiled(idx, targets).backward()  # compiles the forward and the backward
    compile_s = time.perf_counter() - start
    for _ in range(3):
        compiled(idx, targets).backward()
    forwards = []
    for _ in range(steps):
        start = time.perf_counter()
        loss = compiled(idx, targets)
        forwards.append(time.perf_counter() - start)
        loss.backward()
    print(json.dumps({"compile": compile_s, "forward": statistics.median(forwards),
                      "forward_min": min(forwards),
                      "graph_breaks": sum(counters["graph_break"].values()),
                      "graphs": counters["stats"]["unique_graphs"],
                      "recompiles": sum(counters["recompiles"].values())}))


if __name__ == "__main__":
    main()
