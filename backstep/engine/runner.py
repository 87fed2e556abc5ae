"""Run a script exactly as ``python script.py args...`` (or a module as ``python -m``) would.

Same ``sys.argv``, ``__name__ == "__main__"``, ``sys.path[0]``; output untouched; uncaught
exceptions go to ``sys.excepthook`` with backstep's and runpy's frames removed, so the traceback
a person sees is the one plain Python prints; the exit code follows Python's rules.
"""

from __future__ import annotations

import builtins
import importlib.machinery
import os
import runpy
import signal
import sys
import types
from collections.abc import Callable
from types import TracebackType

from backstep.engine import recursion

_BACKSTEP_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class ScriptMissing(Exception):
    """The script cannot be opened; ``str()`` is Python's own message for it, ``code`` the
    exit status python gives it."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def check_script(path: str) -> None:
    """Raise ScriptMissing with Python's wording if ``python path`` could not even start."""
    absolute = os.path.abspath(path)
    if not os.path.exists(path):
        raise ScriptMissing(f"can't open file {absolute!r}: [Errno 2] No such file or directory", 2)
    if os.path.isdir(path) and not os.path.exists(os.path.join(path, "__main__.py")):
        raise ScriptMissing(f"can't find '__main__' module in {absolute!r}", 1)


def _torch_dir() -> str | None:
    """torch's package directory, if the script imported torch (never imports it here)."""
    torch = sys.modules.get("torch")
    file = getattr(torch, "__file__", None)
    return os.path.dirname(file) + os.sep if file else None


def _hidden(filename: str, torch_dir: str | None, runpy_shown: bool = False) -> bool:
    """Frames plain ``python script.py`` would not show: backstep's, runpy's (``python -m``
    shows those: ``runpy_shown``), and torch's ``__torch_function__`` dispatch (provenance's
    mode routes calls through it)."""
    return (
        filename.startswith(_BACKSTEP_DIR)
        or (not runpy_shown and (filename == "<frozen runpy>"
                                 or filename.endswith(os.sep + "runpy.py")))
        or (torch_dir is not None and filename == torch_dir + "overrides.py")
    )


def _strip(tb: TracebackType | None, runpy_shown: bool = False) -> TracebackType | None:
    """The traceback as plain Python would have it: hidden frames removed, and a function
    re-entered through torch-function dispatch shown once."""
    kept: list[TracebackType] = []
    torch_dir = _torch_dir()
    while tb is not None:
        code = tb.tb_frame.f_code
        if not _hidden(code.co_filename, torch_dir, runpy_shown):
            if (
                kept
                and kept[-1].tb_frame.f_code is code
                and torch_dir is not None
                and code.co_filename.startswith(torch_dir)
            ):
                kept[-1] = tb
            else:
                kept.append(tb)
        tb = tb.tb_next
    for a, b in zip(kept, kept[1:], strict=False):
        a.tb_next = b
    if kept:
        kept[-1].tb_next = None
    return kept[0] if kept else None


def _strip_chain(exc: BaseException, seen: set[int] | None = None,
                 runpy_shown: bool = False) -> None:
    seen = seen if seen is not None else set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        exc.__traceback__ = _strip(exc.__traceback__, runpy_shown)
        if exc.__context__ is not None and exc.__cause__ is None:
            _strip_chain(exc.__context__, seen, runpy_shown)
        exc = exc.__cause__  # type: ignore[assignment]


def exit_code(exc: SystemExit) -> int:
    """What Python exits with for ``sys.exit(code)`` (printing a non-int code, as it does)."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF if code >= 0 else code % 256
    try:
        print(code, file=sys.stderr)
    except Exception:  # noqa: BLE001
        pass
    return 1


def run_script(
    path: str,
    args: list[str],
    on_exit: Callable[[int, str | None], None] | None = None,
) -> int:
    """Run the script; return the exit code Python would. ``on_exit(code, traceback_text)``
    is called once the script is over (before an interrupt re-raises SIGINT)."""
    sys.argv = [path, *args]
    script_dir = os.path.dirname(os.path.abspath(path)) if not os.path.isdir(path) else path
    sys.path[0] = os.path.abspath(script_dir)
    return _run(lambda: _run_main(path), on_exit, runpy_shown=False)


def run_module(
    name: str,
    args: list[str],
    on_exit: Callable[[int, str | None], None] | None = None,
) -> int:
    """Run a module as ``python -m name args...`` does: the current directory first on
    ``sys.path``, ``sys.argv[0]`` the module's file (set by runpy, as for python), ``__main__``
    with its ``__spec__``. A module that cannot be found ends with python's own message and
    status 1."""
    sys.argv = ["-m", *args]  # python's own placeholder until runpy knows the file
    sys.path[0] = os.getcwd()
    return _run(lambda: _run_module_main(name), on_exit, runpy_shown=True)


def _run(body: Callable[[], None], on_exit: Callable[[int, str | None], None] | None,
         runpy_shown: bool) -> int:
    code = 0
    text = None
    interrupted = False
    try:
        try:
            body()
        finally:
            recursion.unshift()
    except SystemExit as exc:
        code = exit_code(exc)
    except KeyboardInterrupt as exc:
        _strip_chain(exc, runpy_shown=runpy_shown)
        text = _report(exc)
        interrupted = True
        code = 130
    except BaseException as exc:  # noqa: BLE001 - reported exactly as Python would
        _strip_chain(exc, runpy_shown=runpy_shown)
        text = _report(exc)
        code = 1
    _flush_std()
    if on_exit is not None:
        on_exit(code, text)
    if interrupted:
        # Python ends a process killed by Ctrl-C with SIGINT, so the shell sees 130.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


def _run_module_main(name: str) -> None:
    """What python's ``-m`` calls (``runpy._run_module_as_main``), in a fresh ``__main__`` of
    its own rather than backstep's; its errors are python's (``sys.exit("python: No module
    named x")``)."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins)
    sys.modules["__main__"] = main
    as_main = getattr(runpy, "_run_module_as_main", None)
    if as_main is not None:
        recursion.shift(recursion.depth())  # python calls it from depth 0
        as_main(name, alter_argv=True)
        return
    try:  # a Python without the private entry point: the public one, same semantics
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    except ImportError as exc:
        sys.exit(f"{sys.executable}: {exc}")


def _run_main(path: str) -> None:
    """Execute the script as python's own ``python path`` does.

    A file is compiled under its absolute path (tracebacks and ``__file__`` show it so) and run
    in a fresh ``__main__`` module; ``sys.argv[0]`` stays as typed. A directory or zip archive
    with a ``__main__.py`` goes through runpy, as python does for those.
    """
    if not os.path.isfile(path) or _is_zip(path):
        recursion.shift(recursion.depth())
        runpy.run_path(path, run_name="__main__")
        return
    absolute = os.path.abspath(path)
    with open(absolute, "rb") as handle:
        source = handle.read()
    if b"\0" in source:
        raise SyntaxError("source code cannot contain null bytes", (absolute, 1, None, ""))
    code = compile(source, absolute, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__dict__.update(
        __file__=absolute, __cached__=None, __package__=None, __spec__=None,
        __builtins__=builtins,
        __loader__=importlib.machinery.SourceFileLoader("__main__", absolute),
    )
    sys.modules["__main__"] = main
    recursion.shift(recursion.depth())  # the script's frame at depth 1, as python runs it
    exec(code, main.__dict__)


def _is_zip(path: str) -> bool:
    import zipfile

    try:
        return zipfile.is_zipfile(path)
    except OSError:
        return False


def _report(exc: BaseException) -> str:
    import traceback

    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except Exception:  # noqa: BLE001
        sys.stderr.write(text)
    return text


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001
            pass
