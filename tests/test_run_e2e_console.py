"""End to end: the expression console in the real ``backstep run`` on a pseudo-terminal. The line
is typed at a stop, runs in the debuggee over the real tensors, and its answer is read off the
screen; an edit then changes the leaf gradients the script prints."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tests.pty_session import Pty, pytestmark  # noqa: F401 - the same skips apply here

SCRIPT = textwrap.dedent(
    """\
    import torch

    x = torch.tensor([2.0, 3.0], requires_grad=True)
    factor = 7.0
    out = (x * factor).sum() * 5
    out.backward()
    print("grad", x.grad.tolist())
    """
)


def test_typing_an_expression_at_a_stop_shows_its_answer(tmp_path: Path) -> None:
    (tmp_path / "console.py").write_text(SCRIPT)
    ui = Pty(["-m", "backstep", "run", "console.py"], tmp_path)
    try:
        drive(ui)
    finally:
        ui.kill()


def drive(ui: Pty) -> None:
    ui.expect(r"before MulBackward0")  # (x*factor).sum() * 5: the first node
    ui.press("n")
    ui.expect(r"before SumBackward0")
    ui.press(":")
    ui.expect(r"python at the stop")  # the line has the keyboard (focus moves after the key)
    ui.press("grad_outputs[0].sum() + 0.25\r")
    screen = ui.expect(r"tensor\(5\.2500\)")
    assert ">>> grad_outputs[0].sum() + 0.25" in screen
    ui.press("factor * 2\r")  # the frame that called backward(): its variables are there
    ui.expect(r"\b14\.0\b")
    ui.press("1/0\r")
    ui.expect(r"ZeroDivisionError: division by zero")
    ui.press("\x1b")  # escape: back to the graph, still stopped at the same node
    ui.pump(1.0)  # a key right after ESC would read as alt+key
    ui.press("e")
    ui.expect(r"enter applies the edit")
    ui.press("\r")  # the offered edit, as it is: a pass without NaN keeps its values
    screen = ui.expect(r"zero_nonfinite\(\): no value changed, nothing edited")
    assert "edited by you" not in screen  # issue 44: no mark when no value changed
    ui.press("scale(2)\r")  # the line keeps the keyboard: scale the incoming gradient
    ui.expect(r"scale\(2\) changed 1 value \(for the rest of this pass\)")
    ui.expect(r"edited by you")
    ui.press("\x1b")
    ui.pump(1.0)
    ui.press("c")
    screen = ui.expect(r"grad \[70\.0, 70\.0\]")  # 2 * 5 * 7 instead of 35
    assert "edited by you" in screen
    ui.press("q")
    assert ui.wait() == 0
