"""``backstep memory``: a pass's saved activations by module, op or line (no torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from backstep.cli import main

SCRIPT = '''
import torch, torch.nn as nn
torch.manual_seed(0)
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(64, 256); self.act = nn.Tanh(); self.fc2 = nn.Linear(256, 64)
    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))
model = Net()
x, y = torch.randn(32, 64), torch.randn(32, 64)
for _ in range(2):
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
'''


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("memory")
    script, out = folder / "net.py", folder / "run.jsonl"
    script.write_text(SCRIPT)
    subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", str(out), str(script)],
                   check=True, capture_output=True, timeout=120)
    return out


def test_by_module_largest_first_with_a_total(trace: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["memory", str(trace)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("pass 1: 56.0 KiB of saved activations")
    assert lines[1].split()[:3] == ["32.0", "KiB", "57.1%"] and "model.act" in lines[1]
    assert ["56.0", "KiB", "total"] in [line.split() for line in lines]
    assert any("left out: 64.0 KiB" in line for line in lines)  # fc2's weight


def test_json_by_op_and_pass(trace: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["memory", str(trace), "--by", "op", "--pass", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["pass"] == 2 and out["bytes"] == 56 * 1024 and out["by"] == "op"
    assert [r["key"] for r in out["rows"]][0] == "TanhBackward0"
    assert sum(r["bytes"] for r in out["rows"]) == out["bytes"] and out["held_at_end"] == 0


def test_bad_input_exits_2(trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    assert main(["memory", str(bad)]) == 2
    assert main(["memory", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["memory", str(trace), "--pass", "9"]) == 2
    assert "no pass 9" in capsys.readouterr().err


def test_strings_from_the_trace_are_escaped(tmp_path: Path, trace: Path,
                                            capsys: pytest.CaptureFixture) -> None:
    text = trace.read_text().replace('"model.act"', '"\\u001b[31mevil\\u0007"')
    hostile = tmp_path / "hostile.jsonl"
    hostile.write_text(text)
    assert main(["memory", str(hostile)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "evil" in out


def test_no_torch_imported() -> None:
    code = ("import sys; from backstep.commands import memory; from backstep.traces import memory"
            " as m; assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
