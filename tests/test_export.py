"""``backstep export --dot``: one recorded pass as Graphviz text, from a real trace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from backstep.cli import main
from tests.replay_traces import record

SCRIPT = """\
import torch

class Boom(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("boom")

a = torch.tensor([1.0, -1.0], requires_grad=True)
b = torch.tensor([2.0, 3.0], requires_grad=True)
y = (torch.sqrt(a) * b).sum()
y.backward(inputs=[a])
try:
    Boom.apply(a).sum().backward()
except RuntimeError:
    pass
"""


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return record(tmp_path_factory.mktemp("export"), "nan", SCRIPT)


def export(capsysbinary: pytest.CaptureFixture[bytes], *argv: str | Path) -> tuple[int, str, str]:
    code = main(["export", *map(str, argv)])
    out, err = capsysbinary.readouterr()
    return code, out.decode(), err.decode()


def node_line(dot: str, name: str) -> str:
    lines = [line for line in dot.splitlines() if f'label="{name}' in line]
    assert len(lines) == 1, dot
    return lines[0]


def test_a_pass_exports_with_status_colours_norms_and_leaf_grads(trace, capsysbinary) -> None:
    code, dot, err = export(capsysbinary, trace, "--pass", "1", "--dot")
    assert code == 0 and err == ""
    assert dot.startswith("digraph pass_1 {") and dot.rstrip().endswith("}")
    sqrt = node_line(dot, "SqrtBackward0")
    assert "nan.py:14" in sqrt and "(nan)" in sqrt and "#ffcc80" in sqrt
    leaf_a = node_line(dot, "AccumulateGrad\\nleaf a")
    assert ".grad norm nan" in leaf_a and "#ffcc80" in leaf_a
    leaf_b = node_line(dot, "AccumulateGrad\\nleaf b")
    assert "(skipped)" in leaf_b and "#eeeeee" in leaf_b and ".grad" not in leaf_b
    mul = node_line(dot, "MulBackward0")
    assert "(" not in mul.split("fillcolor")[0].split("\\n")[-1] and "#c8e6c9" in mul
    # the edge from Sum to Mul carries the norm of the gradient Sum passed on: sqrt(2)
    assert re.search(r'n\d+ -> n\d+ \[label="1.414"\];', dot)
    assert dot.count("->") == 4  # sum->mul, mul->sqrt, mul->leaf b, sqrt->leaf a


def test_a_failed_node_is_red(trace, capsysbinary) -> None:
    code, dot, _ = export(capsysbinary, trace, "--pass", "2")
    assert code == 0
    assert "(failed)" in node_line(dot, "BoomBackward") and "#ff8a80" in dot


def test_svg_without_graphviz_is_a_one_line_hint(trace, capsysbinary, monkeypatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    code, out, err = export(capsysbinary, trace, "--svg")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "needs Graphviz's `dot` program" in err


def test_svg_with_graphviz(trace, capsysbinary, tmp_path) -> None:
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz is not installed")
    code, _, _ = export(capsysbinary, trace, "--svg", "-o", tmp_path / "p.svg")
    assert code == 0 and "<svg" in (tmp_path / "p.svg").read_text()


def test_errors_exit_2(trace, capsysbinary, tmp_path) -> None:
    code, _, err = export(capsysbinary, trace, "--pass", "9")
    assert code == 2 and err.strip() == f"backstep export: no pass 9 in {trace} (passes 1-2)"
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    code, _, err = export(capsysbinary, junk)
    assert code == 2 and "not a backstep trace" in err and "Traceback" not in err
