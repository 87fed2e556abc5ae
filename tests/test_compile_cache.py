"""A region torch loads from its AOTAutograd cache (a second inductor run of the same model in a
fresh process) keeps its backward ops' forward lines and names: they come from the graph torch
logs from the cache entry, matched op for op with the cache's copy of the graph (which keeps
neither). Caches stay on; each test has its own cache directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from backstep.engine.compiled.artifacts import CachedBackward

SCRIPT = textwrap.dedent("""\
    import torch
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 8)

        def forward(self, x):
            h = torch.tanh(self.a(x))
            return x + h * 0.5


    torch.manual_seed(0)
    net = torch.compile(Block())
    net(torch.randn(4, 8)).sum().backward()
    print(net.a.bias.grad.sum().item())
""")


def _region(tmp_path: Path, name: str, env: dict[str, str]) -> dict:
    result = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", name, "net.py"],
                            cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in (tmp_path / name).read_text().splitlines()]
    return next(e for e in events if e["event"] == "region")


def test_a_region_from_the_compile_cache_keeps_its_forward_lines(tmp_path: Path) -> None:
    (tmp_path / "net.py").write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONWARNINGS", "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
                        "TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE", "BACKSTEP_EAGER")}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")
    fresh = _region(tmp_path, "first.jsonl", env)
    hit = _region(tmp_path, "second.jsonl", env)
    assert fresh["reason"] is None
    assert hit["reason"] == "loaded from torch's compile cache: ops without their modules"
    assert hit["function"] == fresh["function"] and hit["compile_id"] == fresh["compile_id"]
    assert [(op["name"], op["op"], op["source"]) for op in hit["ops"]] == \
        [(op["name"], op["op"], op["source"]) for op in fresh["ops"]]
    lines = {(op["source"]["line"], op["source"]["code"]) for op in hit["ops"]}
    assert lines == {(12, "return x + h * 0.5"), (11, "h = torch.tanh(self.a(x))")}
    assert all(op["module"] is None for op in hit["ops"])


PRINTED = textwrap.dedent("""\
    class GraphModule(torch.nn.Module):
        def forward(self, tangents_1: "f32[4]"):
            # File: /a/b.py:12 in forward, code: return x * 0.5
            mul_1: "f32[4]" = torch.ops.aten.mul.Tensor(tangents_1, 0.5);  tangents_1 = None
            # No stacktrace found for following nodes
            view: "f32[4]" = torch.ops.aten.view.default(mul_1, [4]);  mul_1 = None
            return (view,)
""")


def test_a_printed_graph_that_does_not_line_up_gives_no_lines() -> None:
    line = {"file": "/a/b.py", "line": 12, "code": "return x * 0.5", "function": "forward"}
    assert CachedBackward((0, 0), PRINTED).sources(["aten.mul.Tensor", "aten.view.default"]) \
        == [("mul_1", line), ("view", None)]
    assert CachedBackward((0, 0), PRINTED).sources(["aten.mm.default", "aten.view.default"]) \
        == [(None, None), (None, None)]  # another op at a position: nothing is guessed
    assert CachedBackward((0, 0), PRINTED).sources(["aten.mul.Tensor"]) == [(None, None)]
