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


WARMED = textwrap.dedent("""\
    class GraphModule(torch.nn.Module):
        def forward(self, tangents_1: "f32[]", primals_3: "i64[4]"):
            # File: /a/b.py:20 in forward, code: return F.cross_entropy(logits, targets)
            div_1: "f32[]" = torch.ops.aten.div.Tensor(tangents_1, 4);  tangents_1 = None
            unsqueeze_1: "i64[4, 1]" = torch.ops.aten.unsqueeze.default(primals_3, 1)
            full_default: "i64[]" = torch.ops.aten.full.default([], 0, dtype = torch.int64)
            where_2: "i64[4, 1]" = torch.ops.aten.where.self(unsqueeze_1, unsqueeze_1, full_default)
            getitem_3: "f32[4]" = max_1[0]
            # File: /a/b.py:19 in forward, code: logits = self.head(x)
            mm_2: "f32[4, 8]" = torch.ops.aten.mm.default(where_2, primals_3)
            sum_1: "f32[8]" = torch.ops.aten.sum.dim_IntList(mm_2, [0], True)
            view_4: "f32[8]" = torch.ops.aten.view.default(sum_1, [8])
            permute_3: "f32[8, 4]" = torch.ops.aten.permute.default(mm_2, [1, 0])
            mul_5: "f32[8, 4]" = torch.ops.aten.mul.Tensor(permute_3, 2)
            return (view_4, mul_5)
""")


def test_a_graph_cached_by_another_process_is_matched_op_for_op() -> None:
    """Warmed by plain python, the cache's copy of the backward holds a constant where the
    printed graph has the ``aten.full`` that made it: the other ops still get their lines;
    an op the printed graph does not have, in its order, leaves every op without one."""
    loss = {"file": "/a/b.py", "line": 20, "code": "return F.cross_entropy(logits, targets)",
            "function": "forward"}
    head = {**loss, "line": 19, "code": "logits = self.head(x)"}
    ops = ["aten.div.Tensor", "aten.unsqueeze.default", "_tensor_constant0", "aten.where.self",
           "getitem", "aten.mm.default", "aten.sum.dim_IntList", "aten.view.default",
           "aten.permute.default", "aten.mul.Tensor"]
    got = CachedBackward((0, 0), WARMED).sources(ops)  # line for line: the constant's op
    assert got == [("div_1", loss), ("unsqueeze_1", loss), ("full_default", loss),
                   ("where_2", loss), ("getitem_3", loss), ("mm_2", head), ("sum_1", head),
                   ("view_4", head), ("permute_3", head), ("mul_5", head)]
    fewer = [op for op in ops if op != "getitem"]  # a node less: matched op for op
    assert CachedBackward((0, 0), WARMED).sources(fewer) == [
        ("div_1", loss), ("unsqueeze_1", loss), (None, None), ("where_2", loss), ("mm_2", head),
        ("sum_1", head), ("view_4", head), ("permute_3", head), ("mul_5", head)]
    other = [*ops[:5], "aten.add.Tensor", *ops[6:]]  # not the printed graph: nothing guessed
    assert CachedBackward((0, 0), WARMED).sources(other) == [(None, None)] * len(other)


WARMED_SCRIPT = textwrap.dedent("""\
    import torch
    import torch.nn.functional as F
    from torch import nn


    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.a = nn.Linear(8, 5)

        def forward(self, x, targets):
            logits = self.a(torch.tanh(x))
            return F.cross_entropy(logits, targets)


    torch.manual_seed(0)
    net = torch.compile(Head())
    net(torch.randn(4, 8), torch.tensor([0, 1, 2, 3])).backward()
    print(net.a.bias.grad.sum().item())
""")


def test_a_cache_warmed_by_plain_python_keeps_forward_lines(tmp_path: Path) -> None:
    """The user's cache is warmed by their own plain runs: a trace then loads every region from
    it, and each still names its ops' forward lines."""
    (tmp_path / "net.py").write_text(WARMED_SCRIPT)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONWARNINGS", "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
                        "TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE", "BACKSTEP_EAGER")}
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "cache")
    env["OMP_NUM_THREADS"] = "1"
    plain = subprocess.run([sys.executable, "net.py"], cwd=tmp_path, capture_output=True,
                           text=True, env=env, timeout=600)
    assert plain.returncode == 0, plain.stderr
    traced = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", "hit.jsonl",
                             "net.py"], cwd=tmp_path, capture_output=True, text=True, env=env,
                            timeout=600)
    assert (traced.returncode, traced.stdout) == (0, plain.stdout)  # the same gradient
    events = [json.loads(line) for line in (tmp_path / "hit.jsonl").read_text().splitlines()]
    hit = next(e for e in events if e["event"] == "region")
    assert hit["reason"] == "loaded from torch's compile cache: ops without their modules"
    lines = {op["source"]["line"] for op in hit["ops"] if op["source"]}
    assert lines == {12, 13}
    # all but the two ops torch printed without a stack (cross_entropy's one-hot expand, eq)
    assert sum(op["source"] is not None for op in hit["ops"]) >= len(hit["ops"]) - 2
