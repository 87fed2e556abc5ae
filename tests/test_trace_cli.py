"""``backstep trace`` behaves exactly like ``python script.py``: same output, same exit code,
same error messages — and always leaves a valid trace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.trace_runs import ENV, compare, kinds


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return name


def test_sample_trace_and_script_environment(tmp_path: Path) -> None:
    target = script(tmp_path, "train.py", """\
        import os, sys
        import torch
        print(sys.argv, __name__, os.path.basename(sys.path[0]), os.path.basename(__file__))
        x = torch.tensor(2.0, requires_grad=True)
        y = torch.tensor(3.0, requires_grad=True)
        out = (x * y + x) ** 2
        out.backward()
        print(x.grad.item(), y.grad.item())
    """)
    result, events = compare(tmp_path, target, "--lr", "0.1")
    assert "['train.py', '--lr', '0.1'] __main__" in result.stdout
    assert "64.0 32.0" in result.stdout
    passes = [kind for kind in kinds(events) if kind != "output"]  # the prints: recorded too
    assert passes[:2] == ["session", "pass_begin"]
    assert passes[-4:] == ["pass_end", "leaves", "history", "exit"]  # the pass in brief, last
    assert kinds(events)[1] == "output" and kinds(events)[-2] == "output"
    nodes = [e for e in events if e["event"] == "node"]
    assert [n["name"] for n in nodes][:3] == ["PowBackward0", "AddBackward0", "MulBackward0"]
    begin = next(e for e in events if e["event"] == "pass_begin")
    assert begin["nodes"][0]["source"]["line"] == 6
    assert begin["caller"]["code"] == "out.backward()"


@pytest.mark.parametrize(
    "body, code",
    [
        ("raise ValueError('bad data')\n", 1),
        ("import sys\nprint('bye')\nsys.exit(3)\n", 3),
        ("import sys\nsys.exit('fatal: no data')\n", 1),
        ("import os, sys\nprint('x', flush=True)\nos._exit(4)\n", 4),
        ("def broken(:\n    pass\n", 1),
        ("print('no backward here')\n", 0),
    ],
    ids=["raises", "sys-exit-3", "sys-exit-text", "os-exit-4", "syntax-error", "no-backward"],
)
def test_scripts_that_end_badly(tmp_path: Path, body: str, code: int) -> None:
    target = script(tmp_path, "job.py", body)
    result, events = compare(tmp_path, target)
    assert result.returncode == code
    assert "pass_begin" not in kinds(events)
    assert kinds(events)[-1] == "exit" and events[-1]["code"] == code


def test_backward_error_reaches_the_script_unchanged(tmp_path: Path) -> None:
    target = script(tmp_path, "twice.py", """\
        import torch
        x = torch.ones(2, requires_grad=True)
        y = (x * x).sum()
        y.backward()
        y.backward()
    """)
    result, events = compare(tmp_path, target)
    assert result.returncode == 1 and "Trying to backward through the graph" in result.stderr
    ends = [e for e in events if e["event"] == "pass_end"]
    assert [e["status"] for e in ends] == ["ok", "error"]


def test_error_inside_a_module_forward_has_plain_pythons_traceback(tmp_path: Path) -> None:
    target = script(tmp_path, "shapes.py", """\
        import torch
        import torch.nn as nn

        class Block(nn.Module):
            def forward(self, x):
                return x @ torch.ones(3, 3)

        model = nn.Sequential(nn.Linear(2, 2), Block())
        model(torch.ones(2, 2)).sum().backward()
    """)
    result, _ = compare(tmp_path, target)  # stderr, traceback frames included, is plain's
    assert result.returncode == 1
    assert "in _wrapped_call_impl" in result.stderr and "in inner" not in result.stderr


@pytest.mark.parametrize("kind", ["missing", "directory", pytest.param("binary", marks=(
    pytest.mark.skipif(sys.version_info < (3, 11), reason="Python 3.10's tokenizer drops what "
                       "follows a null byte and names the first non-UTF-8 line instead: backstep "
                       "says 'source code cannot contain null bytes', as 3.11+ does"),))])
def test_bad_targets(tmp_path: Path, kind: str) -> None:
    if kind == "missing":
        target = "nope.py"
    elif kind == "directory":
        (tmp_path / "pkg").mkdir()
        target = "pkg"
    else:
        (tmp_path / "data.bin").write_bytes(bytes(range(256)) * 4)
        target = "data.bin"
    result, events = compare(tmp_path, target)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    assert kinds(events)[0] == "session" and "pass_begin" not in kinds(events)


def test_unwritable_output_fails_before_the_script_runs(tmp_path: Path) -> None:
    target = script(tmp_path, "job.py", "open('ran', 'w').write('yes')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "backstep", "trace", "-o", str(tmp_path / "no" / "t.jsonl"),
         target],
        cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "cannot write" in proc.stderr
    assert not (tmp_path / "ran").exists()


def test_script_without_torch_never_loads_it(tmp_path: Path) -> None:
    target = script(tmp_path, "plain.py", "import sys\nprint('torch' in sys.modules)\n")
    result, _ = compare(tmp_path, target)
    assert result.stdout == "False\n"


def test_warnings_keep_their_text_line_and_once_per_location(tmp_path: Path) -> None:
    target = script(tmp_path, "warn.py", """\
        import torch
        import torch.nn.functional as F
        x = torch.randn(3, requires_grad=True)
        y = x * 2
        for _ in range(3):
            print(y.grad)
        print(y.grad)
        F.mse_loss(torch.randn(3, 1), torch.randn(3))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result, events = compare(tmp_path, target, env=env)
    assert result.stderr.count("warn.py:6: UserWarning: The .grad attribute") == 1
    assert "warn.py:7: UserWarning: The .grad attribute" in result.stderr
    assert "warn.py:8: UserWarning: Using a target size" in result.stderr
    assert any(e["event"] == "diagnosis" and e["kind"] == "grad_none" for e in events)


def test_torch_compile_runs_unchanged(tmp_path: Path) -> None:
    target = script(tmp_path, "compiled.py", """\
        import torch
        import torch.nn as nn
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))
        compiled = torch.compile(model, backend="aot_eager")
        x = torch.randn(4, 8)
        for _ in range(2):
            compiled(x).pow(2).mean().backward()
        print(model[0].weight.grad.sum().item(), model[2].bias.grad.tolist())
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    result, events = compare(tmp_path, target, env=env)  # same output: no extra warnings
    begins = [e for e in events if e["event"] == "pass_begin"]
    assert [b["pass"] for b in begins] == [1, 2], "torch.compile's own traced backward is not a pass"
    assert any(n["name"] == "CompiledFunctionBackward" for n in begins[0]["nodes"])


def test_a_command_builds_only_its_own_parser() -> None:
    """``backstep trace`` imports no other command's module (7 modules, 10-15 ms of every start),
    and the full parser still lists every command."""
    code = ("import sys\nfrom backstep.cli import build_parser\n"
            "build_parser('trace').parse_args(['trace', 'x.py'])\n"
            "print(sorted(m for m in sys.modules if m.startswith('backstep.commands.')))\n"
            "print(' '.join(build_parser().parse_args(['demo']).command for _ in [0]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.splitlines()
    assert out == ["['backstep.commands.trace']", "demo"]
