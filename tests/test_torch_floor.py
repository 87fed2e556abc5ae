"""A torch backstep cannot use is named in one line, before the script runs (``trace``, ``run``)
or with the script left untouched (``attach()``); never a traceback in the script's own
``import torch``. And the torch that runs these tests has every private name backstep needs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from backstep import cli
from backstep.engine import torch_api

FLOOR_LINE = f"backstep needs torch >= {torch_api.FLOOR_TEXT}; found 2.2.2"


def test_this_torch_has_every_private_name_backstep_needs() -> None:
    assert torch_api.version_problem(torch.__version__) is None
    assert torch_api.missing_names(torch) == []
    assert torch_api.check_imported() is None


MAJOR, MINOR = torch_api.FLOOR


@pytest.mark.parametrize("version, ok", [
    ("2.2.2", False), ("1.13.1", False), (f"{MAJOR}.{MINOR - 1}.9", False),
    (f"{MAJOR}.{MINOR}.0", True), (f"{MAJOR}.{MINOR}.0a0+git1234", True),
    (f"{MAJOR}.{MINOR + 1}.0+cpu", True), (f"{MAJOR + 1}.0.0", True), ("nightly", True),
    # the floor is 2.4: 2.4 to 2.9 lack SavedTensor.data, and run with saved status unknown
    ("2.3.1", False), ("2.4.1+cu121", True), ("2.9.1", True), ("2.10.0", True),
])
def test_the_floor(version: str, ok: bool) -> None:
    problem = torch_api.version_problem(version)
    assert (problem is None) == ok
    if not ok:
        assert problem == f"backstep needs torch >= {torch_api.FLOOR_TEXT}; found {version}"


def test_a_missing_name_is_named() -> None:
    assert torch_api.missing_names(torch, ["torch.autograd.backward", "torch.autograd._nope",
                                           "torch._C._nope.deeper"]) == [
        "torch.autograd._nope", "torch._C._nope.deeper"]


# -- end to end, with a stand-in torch package first on the path ------------------------------

def fake_torch(root: Path, version: str) -> Path:
    """A package named torch, installed as ``version``, that has none of backstep's names."""
    (root / "torch").mkdir(parents=True)
    (root / "torch" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    info = root / f"torch-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    return root


def environment(tmp_path: Path, torch_dir: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(torch_dir), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def job(tmp_path: Path) -> Path:
    target = tmp_path / "job.py"
    target.write_text("open('ran', 'w').close()\nimport torch\nprint('done')\n")
    return target


def backstep(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backstep", *args], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("command", [["trace", "-o", "out.jsonl"], ["run"]])
def test_an_old_torch_is_refused_in_one_line(tmp_path: Path, command: list[str]) -> None:
    env = environment(tmp_path, fake_torch(tmp_path / "old", "2.2.2"))
    done = backstep(tmp_path, env, *command, str(job(tmp_path)))
    assert (done.returncode, done.stdout, done.stderr) == (2, "", FLOOR_LINE + "\n")
    assert not (tmp_path / "ran").exists(), "the script never started"
    assert not (tmp_path / "out.jsonl").exists()


@pytest.mark.parametrize("command", [["trace", "-o", "out.jsonl"], ["run"]])
def test_a_torch_without_a_private_name_is_refused_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    env = environment(tmp_path, fake_torch(tmp_path / "renamed", "2.99.0"))
    done = backstep(tmp_path, env, *command, str(job(tmp_path)))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("backstep needs torch.autograd._engine_run_backward, ")
    assert "which torch 2.99.0 lacks" in done.stderr
    assert not (tmp_path / "ran").exists(), "the script never started"


ATTACHING = """\
    import torch, backstep
    backstep.attach(trace="attached.jsonl")
    backstep.attach(trace="attached.jsonl")
    print("ran", torch.__version__)
"""


@pytest.mark.parametrize("version", ["2.2.2", "2.99.0"])
def test_attach_warns_once_and_the_script_runs_untouched(tmp_path: Path, version: str) -> None:
    env = environment(tmp_path, fake_torch(tmp_path / "fake", version))
    (tmp_path / "attaching.py").write_text(textwrap.dedent(ATTACHING))
    done = subprocess.run([sys.executable, "attaching.py"], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, f"ran {version}\n")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith("backstep needs ")
    assert done.stderr.endswith(" (the script continues without backstep)\n")
    assert not (tmp_path / "attached.jsonl").exists()


def test_a_torch_the_script_brings_itself_is_checked_after_its_import(tmp_path: Path) -> None:
    """The pre-run check saw the installed torch; the script imports another one. The import
    hook names it in one line and the script runs on, without backstep, as under python."""
    fake_torch(tmp_path / "own", "2.99.0")
    target = tmp_path / "own_torch.py"
    target.write_text("import sys\nsys.path.insert(0, 'own')\nimport torch\n"
                      "print('ran', torch.__version__)\n")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = backstep(tmp_path, env, "trace", "-o", "out.jsonl", str(target))
    assert (done.returncode, done.stdout) == (0, "ran 2.99.0\n")
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert "which torch 2.99.0 lacks" in done.stderr
    assert done.stderr.endswith(" (the script runs without backstep)\n")


# -- in process, a private name monkeypatched away from the real torch --------------------------

def test_trace_refuses_a_torch_that_lost_a_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """The real probe (a child Python importing the real torch) finds the missing name."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setitem(torch_api.REQUIRED, "torch.autograd._renamed_in_a_later_torch", "test")
    monkeypatch.chdir(tmp_path)
    code = cli.main(["trace", "-o", "out.jsonl", str(job(tmp_path))])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err == (f"backstep needs torch.autograd._renamed_in_a_later_torch, which torch "
                   f"{torch_api.installed_version()} lacks (backstep supports torch >= "
                   f"{torch_api.FLOOR_TEXT})\n")
    assert not (tmp_path / "ran").exists() and not (tmp_path / "out.jsonl").exists()


def test_a_passing_probe_is_remembered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    probes: list[list[str]] = []
    monkeypatch.setattr(torch_api, "_probe", lambda names: probes.append(names) or [])
    assert torch_api.check() is None and torch_api.check() is None
    assert len(probes) == 1, "the second check reads the cache"
    monkeypatch.setitem(torch_api.REQUIRED, "torch.autograd._another", "test")
    assert torch_api.check() is None and len(probes) == 2, "a new list of names probes again"


@pytest.mark.parametrize("version", ["2.2.2", None])
def test_run_checks_before_the_ui(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str], version: str | None) -> None:
    if version is None:
        monkeypatch.setattr(torch_api, "_probe", lambda names: ["torch.autograd._gone"])
        monkeypatch.setattr(torch_api, "_cache_marker", lambda version, names: None)
    else:
        monkeypatch.setattr(torch_api, "installed_version", lambda: version)
    code = cli.main(["run", str(job(tmp_path))])
    out, err = capsys.readouterr()
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("backstep needs torch")
    assert not (tmp_path / "ran").exists()


def test_attach_in_process_warns_once(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from backstep.process.attach import attachment, registry

    monkeypatch.setattr(torch_api, "installed_version", lambda: "2.2.2")
    monkeypatch.setattr(registry, "torch_warned", False)
    before = torch.autograd._engine_run_backward
    attachment.attach(trace=str(tmp_path / "t.jsonl"))
    attachment.attach(trace=str(tmp_path / "t.jsonl"))
    assert capsys.readouterr().err == FLOOR_LINE + " (the script continues without backstep)\n"
    assert torch.autograd._engine_run_backward is before, "nothing was armed"
    assert registry.current is None and not (tmp_path / "t.jsonl").exists()


def test_session_arm_leaves_a_torch_without_a_name_alone(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from backstep.engine.session import Session

    monkeypatch.setitem(torch_api.REQUIRED, "torch._C._renamed", "test")
    events: list[dict] = []

    class Sink:
        def emit(self, event: dict) -> None:
            events.append(event)

        def flush(self) -> None:
            pass

    before = torch.autograd._engine_run_backward
    session = Session(Sink())
    session.arm()
    assert session.capture is None and torch.autograd._engine_run_backward is before
    err = capsys.readouterr().err
    assert err.startswith("backstep needs torch._C._renamed, which torch ") and err.count("\n") == 1


# -- the probe runs nothing from the working directory; a failed one is not repeated -----------

def test_the_probe_never_imports_a_torch_py_in_the_working_directory(tmp_path: Path) -> None:
    """``python -c`` would put the working directory first on sys.path; the script itself
    (``python /abs/script.py``) never looks there, so neither does the probe."""
    (tmp_path / "torch.py").write_text("open('planted-torch-ran', 'w').close()\n")
    (tmp_path / "elsewhere").mkdir()
    target = job(tmp_path / "elsewhere")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = backstep(tmp_path, env, "trace", "-o", "out.jsonl", str(target))
    assert (done.returncode, done.stdout) == (0, "done\n"), done.stderr
    assert not (tmp_path / "planted-torch-ran").exists()
    assert list((tmp_path / "cache" / "backstep").glob("torch-ok-*")), "the real torch passed"


def test_a_torch_that_does_not_import_is_probed_once(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    broken = fake_torch(tmp_path / "broken", "2.99.0")
    (broken / "torch" / "__init__.py").write_text(
        "open(__file__ + '.imports', 'a').write('x')\nraise ImportError('broken install')\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONPATH", str(broken))
    monkeypatch.syspath_prepend(str(broken))
    monkeypatch.setattr(torch_api, "installed_version", lambda: "2.99.0")
    assert torch_api.check() is None and torch_api.check() is None
    count = broken / "torch" / "__init__.py.imports"
    assert count.read_text() == "x", "the second check read the cache"
