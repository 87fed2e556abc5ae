"""Two ranks of gloo DDP under the real torchrun (CPU, loopback): ``trace`` writes one valid
file per rank, ``run --rank 0`` steps rank 0 in the UI while rank 1 runs on; gradients and
output are those of the same job without backstep. Each torchrun start costs seconds: every
test makes one and checks all it can on it."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from backstep.events.form import expand
from tests.pty_session import Pty, alive
from tests.torchrun_runs import ENV, EXIT_ABORT, TORCHRUN, descendants, free_port

pytestmark = [
    pytest.mark.skipif(sys.platform != "linux", reason="needs a pty and gloo on loopback"),
    pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch"),
]

TRAIN = textwrap.dedent(
    """\
    import hashlib
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)), bucket_cap_mb=0.0001)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(2):
        torch.manual_seed(1 + 10 * step + rank)  # each rank its own data: all-reduce matters
        loss = model(torch.randn(3, 4)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        grads = [p.grad.flatten().tolist() for p in model.parameters()]
        digest = hashlib.sha256(repr(grads).encode()).hexdigest()[:12]
        print(f"rank {rank} step {step} grads {digest}", flush=True)
        opt.step()
    weights = [p.detach().flatten().tolist() for p in model.parameters()]
    print(f"rank {rank} weights {hashlib.sha256(repr(weights).encode()).hexdigest()[:12]}")
    del model, opt  # see EXIT_ABORT
    dist.destroy_process_group()
    """
)

def project(tmp_path: Path) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "train.py").write_text(TRAIN)
    return tmp_path


def lines(output: str) -> list[str]:
    """The script's lines, sorted: under ``python -u`` print writes a line and its newline
    apart, so two ranks on one pipe can interleave them (plain torchrun does the same)."""
    return sorted(re.findall(r"rank \d (?:step \d grads|weights) [0-9a-f]{12}", output))


def run_plain(cwd: Path) -> tuple[list[int], list[str], str]:
    """One run of the job without backstep: the ranks' exit codes, lines and error output."""
    port = str(free_port())
    ranks = [subprocess.Popen(
        [sys.executable, "-u", "-m", "pkg.train"], cwd=cwd, stdout=subprocess.PIPE, text=True,
        stderr=subprocess.PIPE, env={**ENV, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
                                     "RANK": str(r), "LOCAL_RANK": str(r),
                                     "WORLD_SIZE": "2"}) for r in (0, 1)]
    codes, found, errors = [], [], ""
    for process in ranks:
        out, err = process.communicate(timeout=180)
        codes.append(process.returncode)
        found += lines(out)
        errors += err
    return codes, found, errors


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The job without backstep or torchrun: two pythons, the environment torchrun would give
    them. Its lines, sorted (the ranks' output interleaves differently every run)."""
    cwd = project(tmp_path_factory.mktemp("plain"))
    for _ in range(3):  # torch's own abort at exit (EXIT_ABORT, above) is run again, up to twice
        codes, found, errors = run_plain(cwd)
        if codes == [0, 0] or set(codes) - {0, -signal.SIGABRT} or EXIT_ABORT not in errors:
            break
    assert codes == [0, 0], errors[-2000:]
    assert len(found) == 6
    return found


def test_trace_writes_one_valid_file_per_rank(tmp_path: Path, plain: list[str]) -> None:
    cwd = project(tmp_path)
    result = subprocess.run([*TORCHRUN, "-m", "backstep", "trace", "-o", "t.jsonl",
                             "-m", "pkg.train"], cwd=cwd, env=ENV, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert lines(result.stdout) == plain  # same output, same gradients
    assert result.stderr.count("one file each: t.rank0.jsonl … t.rank1.jsonl") == 1
    assert sorted(p.name for p in cwd.glob("*.jsonl")) == ["t.rank0.jsonl", "t.rank1.jsonl"]
    for rank in (0, 1):
        events = [expand(json.loads(line))
                  for line in (cwd / f"t.rank{rank}.jsonl").read_text().splitlines()]
        kinds = [e["event"] for e in events]
        session = events[0]
        assert (session["rank"], session["local_rank"], session["world_size"]) == (rank, rank, 2)
        assert session["argv"] == ["-m", "pkg.train"] and session["hostname"]
        group = events[kinds.index("process_group")]
        assert kinds.index("process_group") + 1 == kinds.index("pass_begin")
        assert group == {"event": "process_group", "backend": "gloo", "rank": rank,
                         "world_size": 2, "timeout": 1800.0}
        assert kinds.count("pass_end") == 2 and events[-1]["code"] == 0
    # the ranks' data differ, so their traces part at the first gradient that depends on it
    diff = subprocess.run([sys.executable, "-m", "backstep", "diff", "t.rank0.jsonl",
                           "t.rank1.jsonl"], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert diff.returncode == 1, diff.stdout + diff.stderr
    assert "difference born at pass 1, step 2" in diff.stdout and "PowBackward0" in diff.stdout


def test_run_rank_0_steps_while_rank_1_runs_on(tmp_path: Path, plain: list[str]) -> None:
    cwd = project(tmp_path)
    ui = Pty([*TORCHRUN[1:], "-m", "backstep", "run", "--rank", "0", "--trace-others",
              "o.jsonl", "pkg/train.py"], cwd)
    try:
        screen = ui.expect(r"start of pass before SumBackward0", 180)
        assert "under gloo (2 ranks): collectives time out after 30 min" in screen
        processes = descendants(ui.pid)
        assert len(processes) >= 3  # the 2 ranks and the UI rank's debuggee
        time.sleep(0.5)  # rank 1 is held in its all-reduce while rank 0 is stopped
        assert b"rank 1 step 0" not in ui.raw
        ui.press("c")
        ui.expect(r"pass 2 .*start of pass", 60)
        ui.press("c")
        screen = ui.expect(r"script exited with code 0", 60)
        ours = [line for line in plain if line.startswith("rank 0")]
        for line in ours:
            ui.expect(re.escape(line), 30)  # rank 0's output in the UI's console
        raw = ui.raw.decode(errors="replace")
        theirs = [line for line in plain if line.startswith("rank 1")]
        assert [line for line in theirs if line not in raw] == []  # on the terminal
        ui.press("q")
        assert ui.wait(60) == 0
        time.sleep(0.3)
        assert [pid for pid in processes if alive(pid)] == [], "orphans left behind"
        events = [expand(json.loads(line)) for line in (cwd / "o.rank1.jsonl").read_text().splitlines()]
        assert events[0]["rank"] == 1 and [e["event"] for e in events].count("pass_end") == 2
        assert not (cwd / "o.rank0.jsonl").exists()
    finally:
        ui.kill()
