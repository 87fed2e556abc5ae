"""Issue 45: one wide hostile pass costs no more than a small multiple of the file's size. A
132 MB trace of one 2,000,000-node pass cost ``diff`` 2.7 GB and 2 minutes, ``export --dot``
1.9 GB; now a pass whose nodes would cost more than 8 times its bytes (``traces.limits``) is
refused in one line before any node is parsed, under an address-space limit of 3 times the
file (plus the interpreter's own). ``diff`` shortens a 1 MB node name in its report."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

FIXTURE = Path(__file__).parent / "fixtures" / "small_trace.jsonl"
NODES = 600_000  # 40 MB of file: 840 MB to read, over 8 times its size


def write_wide(path: Path, nodes: int) -> None:
    """One pass: a root whose inputs are ``nodes`` nodes, each as short as the file allows."""
    with open(path, "w") as out:
        out.write('{"event":"session","version":1,"torch":"t","argv":["w"],"pid":1}\n')
        out.write('{"event":"pass_begin","pass":1,"api":"backward","roots":[0],"nodes":[')
        out.write('{"id":0,"name":"SumBackward0","next":['
                  + ",".join(map(str, range(1, nodes + 1))) + "]}")
        out.writelines(f',{{"id":{i},"name":"MulBackward0","next":[],"leaf":null}}'
                       for i in range(1, nodes + 1))
        out.write(']}\n{"event":"pass_end","pass":1,"status":"ok","error":null,"skipped":[]}\n')


def limited(args: list[str], cwd: Path, memory: int) -> subprocess.CompletedProcess:
    """``backstep ARGS`` with at most ``memory`` bytes of address space."""

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    env = {k: v for k, v in os.environ.items() if k != "BACKSTEP_MAX_PASS_NODES"}
    return subprocess.run([sys.executable, "-m", "backstep", *args], cwd=cwd, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          preexec_fn=cap)


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wide") / "wide.jsonl"
    write_wide(path, NODES)
    return path


@pytest.mark.parametrize("args", [["diff", "{t}", "{t}"], ["diff", "--json", "{t}", "{t}"],
                                  ["export", "--dot", "{t}"], ["show", "{t}"]])
def test_a_wide_pass_is_refused_in_one_line_within_a_small_multiple_of_its_size(
        wide: Path, args: list[str]) -> None:
    size = wide.stat().st_size
    # the interpreter itself maps ~100-200 MB of address space; the file is read once
    done = limited([a.format(t=wide) for a in args], wide.parent, 300 * 2**20 + 3 * size)
    assert done.returncode == 2, done.stderr[-2000:]
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr[-2000:]
    assert f"pass 1 has {NODES + 1:,} nodes in " in done.stderr
    assert "of memory, more than 8 times its size" in done.stderr


def test_the_limit_can_be_raised_and_a_pass_under_it_is_read(tmp_path: Path) -> None:
    small = tmp_path / "w.jsonl"
    write_wide(small, 2000)
    env = {**os.environ, "BACKSTEP_MAX_PASS_NODES": "1000"}
    done = subprocess.run([sys.executable, "-m", "backstep", "export", str(small)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "more than BACKSTEP_MAX_PASS_NODES=1000" in done.stderr
    env["BACKSTEP_MAX_PASS_NODES"] = "5000"
    done = subprocess.run([sys.executable, "-m", "backstep", "export", str(small)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("digraph"), done.stderr


def _huge_name_pair(tmp_path: Path) -> tuple[Path, Path]:
    """The fixture twice, node 2 named with 1 MB, its outgoing gradient tripled in B."""
    big = "MulBackward0" + "x" * 1_000_000
    events = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    paths = []
    for name, scale in (("a.jsonl", 1.0), ("b.jsonl", 3.0)):
        lines = []
        for event in json.loads(json.dumps(events)):
            if event["event"] == "pass_begin":
                for node in event["nodes"]:
                    if node["id"] == 2:
                        node["name"] = big
            if event["event"] == "node" and event["id"] == 2:
                event["name"] = big
                for summary in event["grad_inputs"]:
                    if summary:
                        for key in ("norm", "min", "max", "mean"):
                            summary[key] *= scale
                        summary["values"] = [v * scale for v in summary.get("values") or []]
            lines.append(json.dumps(event))
        (tmp_path / name).write_text("\n".join(lines) + "\n")
        paths.append(tmp_path / name)
    return paths[0], paths[1]


@pytest.mark.parametrize("json_report", [False, True])
def test_diff_shortens_a_huge_name(tmp_path: Path, json_report: bool) -> None:
    a, b = _huge_name_pair(tmp_path)
    done = subprocess.run([sys.executable, "-m", "backstep", "diff", *(["--json"] * json_report),
                           str(a), str(b)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 1, done.stderr
    assert max(len(line) for line in done.stdout.splitlines()) < 2000
    assert "(1,000,012 characters)" in done.stdout


def test_a_real_pass_is_far_from_the_limit() -> None:
    """The fixture (a recorded run): its pass costs a small fraction of what it may."""
    from backstep.traces import limits
    from backstep.traces.index import TraceIndex

    with TraceIndex(FIXTURE) as index:
        index.check_size(1)
        assert len(index.read(1).nodes) == 8
    limits.check("t", 1, b'{"id":1},' * 40_000, 0, 10)  # under the floor: read, however small
    with pytest.raises(limits.PassTooBig, match="more than 8 times its size"):
        limits.check("t", 1, b'{"id":1},' * 60_000, 0, 540_000)


# ``backstep show`` over a trace whose second pass is the wide one: the first is drawn, the
# second is opened ahead while the person reads and reached with ]. Run in the pilot, in a
# child under the same memory limit (the app in-process, so the screen can be read)
SHOW_SECOND = """\
import asyncio, json, resource, sys
limit = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from backstep.traces.index import TraceIndex
from backstep.tui.app import BackstepApp
from backstep.tui.panels.console import ConsolePanel
from backstep.tui.runtime.replay_driver import ReplayDriver
from tests.tui_pilot import screen_text

async def main():
    with TraceIndex(sys.argv[1]) as index:
        app = BackstepApp(ReplayDriver(index))
        async with app.run_test(size=(140, 40)) as pilot:
            await pilot.pause(1.0)  # indexed, and the next pass opened ahead
            await pilot.press("right_square_bracket")
            await pilot.pause(0.5)
            second = {"status": str(app.query_one("#status").render()),
                      "console": app.query_one(ConsolePanel).text, "screen": screen_text(app)}
            await pilot.press("left_square_bracket")
            await pilot.pause(0.3)
            second["back"] = str(app.query_one("#status").render())
        print(json.dumps(second))

asyncio.run(main())
"""


def write_wide_second(path: Path, nodes: int) -> None:
    """Two passes: the first of three nodes, the second as ``write_wide``'s one pass."""
    write_wide(path, nodes)
    wide = path.read_bytes().split(b"\n", 1)
    first = (b'{"event":"pass_begin","pass":1,"api":"backward","roots":[0],"nodes":['
             b'{"id":0,"name":"SumBackward0","next":[1,2]},'
             b'{"id":1,"name":"MulBackward0","next":[],"leaf":null},'
             b'{"id":2,"name":"MulBackward0","next":[],"leaf":null}]}\n'
             b'{"event":"pass_end","pass":1,"status":"ok","error":null,"skipped":[]}\n')
    path.write_bytes(wide[0] + b"\n" + first + wide[1].replace(b'"pass":1', b'"pass":2'))


def test_a_wide_later_pass_is_refused_in_show_in_one_line_on_screen(tmp_path: Path) -> None:
    trace = tmp_path / "second.jsonl"
    write_wide_second(trace, NODES)
    limit = 300 * 2**20 + 3 * trace.stat().st_size
    env = {k: v for k, v in os.environ.items() if k != "BACKSTEP_MAX_PASS_NODES"}
    done = subprocess.run([sys.executable, "-c", SHOW_SECOND, str(trace), str(limit)],
                          cwd=Path(__file__).resolve().parent.parent, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.splitlines()[-1])
    said = f"pass 2 has {NODES + 1:,} nodes in "
    assert " pass 2/2 " in seen["status"], seen["status"]
    assert "not read: too many nodes for its size" in seen["status"], seen["status"]
    (line,) = [line for line in seen["console"].splitlines() if said in line]  # said once
    assert line.startswith("[backstep] ") and "more than 8 times its size" in line
    assert "Graph · pass 2 · 0 nodes" in seen["screen"]
    assert " pass 1/2 " in seen["back"] and "end of pass: ok" in seen["back"], seen["back"]
