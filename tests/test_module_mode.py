"""``backstep trace -m`` and ``backstep run -m`` behave exactly like ``python -m``: sys.path[0],
sys.argv[0], ``__main__`` with its ``__spec__``, output, errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from backstep.events.form import expand
from tests.pty_session import Pty, alive, children_of, pytestmark  # noqa: F401 - same skips
from tests.trace_runs import ENV

MODULE = textwrap.dedent(
    """\
    import pickle, sys
    import torch

    class Point:  # pickled by reference to __main__, as under python -m
        pass

    print("argv", sys.argv)
    print("path0", sys.path[0])
    print("main", __name__, __spec__.name, __spec__.parent, __file__, __package__)
    print("pickle", type(pickle.loads(pickle.dumps(Point()))).__module__)
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    print("grad", x.grad.tolist())
    if "--fail" in sys.argv:
        raise ValueError("from the module")
    sys.exit(int(sys.argv[-1]))
    """
)


def package(tmp_path: Path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "train.py").write_text(MODULE)
    (pkg / "__main__.py").write_text("import sys\nprint('pkg main', sys.argv[1:])\n")
    return pkg


def both(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess, ...]:
    """``python ARGV`` and ``backstep trace -o run.jsonl ARGV``, side by side, from a
    directory that is not the package's (sys.path[0] must be the cwd, not the file's)."""
    kwargs = dict(cwd=tmp_path, capture_output=True, text=True, env=ENV, timeout=120)
    plain = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=ENV)
    traced = subprocess.run([sys.executable, "-m", "backstep", "trace", "-o", "run.jsonl",
                             *argv], **kwargs)  # type: ignore[call-overload]
    out, err = plain.communicate(timeout=120)
    return subprocess.CompletedProcess(plain.args, plain.returncode, out, err), traced


def test_trace_m_runs_the_module_as_python_m_does(tmp_path: Path) -> None:
    package(tmp_path)
    plain, traced = both(tmp_path, "-m", "pkg.train", "--lr", "3", "-m", "7")
    assert plain.returncode == traced.returncode == 7
    assert traced.stdout == plain.stdout
    assert f"argv ['{tmp_path / 'pkg' / 'train.py'}', '--lr', '3', '-m', '7']" in plain.stdout
    assert f"path0 {tmp_path}\n" in plain.stdout
    assert "main __main__ pkg.train pkg" in plain.stdout and "pickle __main__" in plain.stdout
    events = [expand(json.loads(line)) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert events[0]["event"] == "session"
    assert events[0]["argv"] == ["-m", "pkg.train", "--lr", "3", "-m", "7"]
    assert [e["event"] for e in events].count("pass_end") == 1
    assert events[-1] == {"event": "exit", "code": 7, "traceback": None, "passes": 1}


def test_trace_m_errors_read_as_python_m(tmp_path: Path) -> None:
    package(tmp_path)
    # an uncaught exception: the same traceback, runpy's frames included as python shows them
    plain, traced = both(tmp_path, "-m", "pkg.train", "--fail")
    assert plain.returncode == traced.returncode == 1
    assert traced.stderr == plain.stderr and "<frozen runpy>" in plain.stderr
    # a package runs its __main__; a missing module is python's one line and status 1
    plain, traced = both(tmp_path, "-mpkg", "a")
    assert (traced.returncode, traced.stdout) == (plain.returncode, plain.stdout) == (
        0, "pkg main ['a']\n")
    for name in ("nosuch", "pkg.nosuch"):
        plain, traced = both(tmp_path, "-m", name)
        assert plain.returncode == traced.returncode == 1
        assert traced.stderr == plain.stderr and "No module named" in plain.stderr
        assert traced.stdout == plain.stdout == ""
    usage = subprocess.run([sys.executable, "-m", "backstep", "trace", "-m"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "-m MODULE" in usage.stderr


def test_run_m_in_a_pty(tmp_path: Path) -> None:
    package(tmp_path)
    missing = subprocess.run([sys.executable, "-m", "backstep", "run", "-m", "nosuch.x"],
                             cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.endswith(": No module named nosuch\n")
    ui = Pty(["-m", "backstep", "run", "-m", "pkg.train", "5"], tmp_path)
    try:
        ui.expect(r"stopped: start of pass before SumBackward0")
        debuggees = children_of(ui.pid)
        ui.press("c")
        ui.expect(r"script exited with code 5")
        ui.expect(r"grad \[2\.0, 4\.0\]")  # the module's own print, in the console
        ui.press("q")
        assert ui.wait() == 5
        assert not any(alive(pid) for pid in debuggees)
    finally:
        ui.kill()
