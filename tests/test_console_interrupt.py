"""``console_core.Evaluator`` leaves the interpreter as it found it: no pending
KeyboardInterrupt escapes a finished line, and nothing of the interrupt machinery stays armed
(CPython 3.11 kept its eval breaker set for good after ``PyThreadState_SetAsyncExc(id, NULL)``,
and the next call under ``sys.setprofile`` never got past its first instruction)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from backstep.console_core import INTERRUPTED, Evaluator

AFTER_A_LINE = textwrap.dedent(
    """\
    import sys
    from backstep.console_core import Evaluator

    assert Evaluator({}).evaluate("1 + 1") == (True, "2")

    def inner(x):
        return x + 1

    def outer(x):
        return inner(x)

    sys.setprofile(lambda frame, event, arg: None)
    total = sum(outer(i) for i in range(100))
    sys.setprofile(None)
    print(total)
    """
)


def test_a_profiled_call_after_a_line_runs_as_without_the_console() -> None:
    result = subprocess.run([sys.executable, "-c", AFTER_A_LINE], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "5050\n"


def test_an_interrupt_stops_a_python_loop_and_none_is_left_pending() -> None:
    evaluator = Evaluator({})
    answers: list[tuple[bool, str]] = []
    worker = threading.Thread(target=lambda: answers.append(
        evaluator.evaluate("while True: pass")))
    worker.start()
    deadline = time.monotonic() + 30
    while not evaluator.interrupt():  # until the line runs
        assert time.monotonic() < deadline
        time.sleep(0.01)
    worker.join(30)
    assert answers == [(False, INTERRUPTED)]


def test_an_interrupt_the_line_swallows_is_not_raised_later() -> None:
    evaluator = Evaluator({"ready": threading.Event(), "go": threading.Event()})
    answers: list[tuple[bool, str]] = []
    line = ("try:\n    ready.set()\n    go.wait(30)\nexcept KeyboardInterrupt:\n    pass\n"
            "caught = 1")

    def run() -> None:
        answers.append(evaluator.evaluate(line))
        answers.append(evaluator.evaluate("sum(range(1000))"))  # a pending one would land here

    worker = threading.Thread(target=run)
    worker.start()
    evaluator.namespace["ready"].wait(30)
    assert evaluator.interrupt()
    assert evaluator.interrupt()  # twice: only one is ever pending, and it is dropped
    evaluator.namespace["go"].set()
    worker.join(30)
    assert answers == [(True, ""), (True, "499500")]
