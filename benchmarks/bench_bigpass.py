"""Speed on a big pass (issue 30): ``backstep run`` on a 6,380-node LBFGS/LSTMCell pass.

Runs ``bigpass_workload.py`` three ways in one run: plain python, ``backstep trace``, and
``backstep run`` in a 140x42 pseudo-terminal driven by keys (as ``tests/test_run_e2e.py`` does).
It measures, from the script's own ``BENCH`` lines and the screen:

- first stop: launch to the first stop on screen, against plain launch to the first backward;
- ``f`` at pass 1's start to pass 2's stop, ``c`` at pass 2's start to pass 3's stop, against
  the same closure-to-closure time plain and under ``trace`` (which records every node too);
- ``q`` at a stop to the UI's exit;
- the UI process's CPU seconds during ``f`` and ``c`` (on a shared machine, what it spends while
  the script runs delays the script).

    python benchmarks/bench_bigpass.py [--passes 4] [--n 97] [--l 199]

Targets: first stop <= plain time-to-backward + 1 s; f and c <= 1.5x trace's closure time;
q <= 0.5 s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.test_run_e2e import Pty  # noqa: E402

WORKLOAD = Path(__file__).resolve().parent / "bigpass_workload.py"
START = re.compile(r"BENCH start (\d+) ([0-9.]+)")


def starts(output: str) -> dict[int, float]:
    """Pass number -> seconds after launch that its backward started."""
    return {int(m.group(1)): float(m.group(2)) for m in START.finditer(output)}


def scripted(prefix: list[str], env: dict[str, str], cwd: str) -> dict[int, float]:
    env = {**env, "BENCH_T0": repr(time.time())}
    out = subprocess.run([sys.executable, *prefix, str(WORKLOAD)], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=600, check=True).stdout
    return starts(out)


def until_screen(ui: Pty, pattern: str, timeout: float = 300.0) -> float:
    """Pump the pty until ``pattern`` is on screen; the time it appeared (time.time())."""
    rx = re.compile(pattern)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ui.pump(0.01)
        if rx.search(ui.screen.text()):
            return time.time()
    raise TimeoutError(f"{pattern!r} never appeared:\n{ui.screen.text()}")


def drain(fd: int, seconds: float) -> None:
    """Read and drop what the pty has, waiting at most ``seconds`` for it."""
    if select.select([fd], [], [], seconds)[0]:
        with contextlib.suppress(OSError):
            os.read(fd, 65536)


def cpu_of(pid: int) -> float:
    """CPU seconds (user + system) the process ``pid`` has used so far, its children apart: on
    a shared machine every second the UI spends while the script runs delays the script."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def stop_of(number: int) -> str:
    return rf" pass {number} .*stopped:"


def live(env: dict[str, str], cwd: str) -> dict[str, float]:
    os.environ.update(env)
    t0 = time.time()
    os.environ["BENCH_T0"] = repr(t0)
    ui = Pty([*os.environ.get("BENCH_UIPROF", "").split(), "-m", "backstep", "run", str(WORKLOAD)], Path(cwd))
    try:
        first = until_screen(ui, stop_of(1)) - t0
        t, cpu = time.time(), cpu_of(ui.pid)
        ui.press("f")
        f = until_screen(ui, stop_of(2)) - t
        f_cpu = cpu_of(ui.pid) - cpu
        t, cpu = time.time(), cpu_of(ui.pid)
        ui.press("c")
        c = until_screen(ui, stop_of(3)) - t
        c_cpu = cpu_of(ui.pid) - cpu
        t = time.time()
        ui.press("q")
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if os.waitpid(ui.pid, os.WNOHANG)[0]:
                ui.status = 0
                break
            # read what it writes on the way out (its last frame, the console's lines): a
            # full pty blocks the UI's exit, and q measured 60 s, the wait's limit
            drain(ui.fd, 0.002)
        q = time.time() - t
    finally:
        ui.kill()
    return {"first": first, "f": f, "c": c, "q": q, "f_cpu": f_cpu, "c_cpu": c_cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=4)
    parser.add_argument("--n", type=int, default=97)
    parser.add_argument("--l", type=int, default=199)
    args = parser.parse_args()
    env = {**os.environ, "BENCH_PASSES": str(args.passes), "BENCH_N": str(args.n),
           "BENCH_L": str(args.l)}
    with tempfile.TemporaryDirectory() as cwd:
        plain = scripted([], env, cwd)
        trace = scripted(["-m", "backstep", "trace", "-o", str(Path(cwd) / "t.jsonl")], env, cwd)
        run = live(env, cwd)
    if len(plain) < 3 or len(trace) < 3:
        print("the workload ran fewer than 3 passes", file=sys.stderr)
        return 2
    plain_cycle = (plain[3] - plain[1]) / 2  # closure-to-closure: forward, backward, step
    trace_cycle = (trace[3] - trace[1]) / 2
    rows = [
        ("first stop (s)", run["first"], plain[1], plain[1] + 1.0, "plain to 1st backward + 1"),
        ("f through a pass (s)", run["f"], plain_cycle, 1.5 * trace_cycle,
         f"1.5 x trace {trace_cycle:.2f}"),
        ("c through a pass (s)", run["c"], plain_cycle, 1.5 * trace_cycle,
         f"1.5 x trace {trace_cycle:.2f}"),
        ("q at a stop (s)", run["q"], None, 0.5, "0.5"),
    ]
    print(f"backstep big-pass benchmark: N={args.n} L={args.l} (6,380 nodes at L=199), "
          f"plain closure {plain_cycle:.2f} s, trace {trace_cycle:.2f} s")
    print(f"{'measure':24} {'run s':>7} {'plain s':>8} {'x plain':>8} {'target s':>9}  ok")
    ok_all = True
    for name, value, base, target, why in rows:
        ok = value <= target
        ok_all &= ok
        ratio = f"{value / base:8.2f}" if base else f"{'':8}"
        base_s = f"{base:8.2f}" if base is not None else f"{'':8}"
        print(f"{name:24} {value:7.2f} {base_s} {ratio} {target:9.2f}  "
              f"{'PASS' if ok else 'FAIL'}  ({why})")
    print(f"UI process CPU (s): f {run['f_cpu']:.2f}, c {run['c_cpu']:.2f}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
