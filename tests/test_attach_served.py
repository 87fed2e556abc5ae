"""``attach(serve=...)`` when the browser UI cannot be had: one line, and the script runs on
exactly as without backstep (same output, same gradients, same exit status)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import sys, types, torch, backstep
if {colab!r}:
    sys.modules["google.colab"] = types.ModuleType("google.colab")  # what Colab's kernel has
torch.manual_seed(0)
w = torch.randn(3, requires_grad=True)
backstep.attach(serve={serve!r})
(w * w).sum().backward()
print("grad", w.grad.tolist())
raise SystemExit(4)
"""


def run(tmp_path: Path, serve: str | None, env: dict[str, str] | None = None,
        colab: bool = False) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(serve=serve, colab=colab))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **(env or {})}, stdin=subprocess.DEVNULL)


def plain(tmp_path: Path) -> subprocess.CompletedProcess:
    """The script without backstep."""
    script = tmp_path / "plain.py"
    script.write_text(SCRIPT.format(serve=None, colab=False).replace(
        "backstep.attach(serve=None)", "pass"))
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)


def test_without_textual_serve_attach_says_so_and_the_script_runs_on(tmp_path: Path) -> None:
    hidden = tmp_path / "hide" / "textual_serve"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('textual-serve is not installed')\n")
    done = run(tmp_path, "127.0.0.1:0", {"PYTHONPATH": str(hidden.parent)})
    assert done.returncode == 4
    assert done.stdout == plain(tmp_path).stdout
    said = [line for line in done.stderr.splitlines() if line.startswith("backstep")]
    assert "Traceback" not in done.stderr and said == [f"backstep: could not attach: textual-serve (the UI in a browser) is not "
                    f"installed for this Python ({sys.executable}): run {sys.executable} -m pip "
                    "install 'backstep[serve]'"], done.stderr  # one line, no child's traceback


def test_a_bad_serve_address_is_one_line(tmp_path: Path) -> None:
    done = run(tmp_path, "nowhere")
    assert done.returncode == 4 and done.stdout == plain(tmp_path).stdout
    assert "backstep: serve='nowhere': 'nowhere' is not [HOST:]PORT" in done.stderr


def test_in_colab_attach_says_why_not_and_the_script_runs_on(tmp_path: Path) -> None:
    done = run(tmp_path, None, {"BACKSTEP_SERVE": "1"}, colab=True)
    assert done.returncode == 4 and done.stdout == plain(tmp_path).stdout
    assert "backstep: in Colab the browser cannot reach this kernel's ports" in done.stderr
    assert "is served at" not in done.stderr
