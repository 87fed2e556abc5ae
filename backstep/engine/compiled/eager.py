"""``--eager`` / ``attach(eager=True)``: torch.compile turned off for the whole script.

torch reads ``TORCH_COMPILE_DISABLE`` when ``torch._dynamo.config`` is first imported and
``TORCHDYNAMO_DISABLE`` when ``torch.compile`` builds its wrapper; both are set before the
script runs, so every ``torch.compile`` becomes a no-op and each node of the model is a stop of
its own. Child processes (DataLoader workers, torchrun ranks) inherit them. ``BACKSTEP_EAGER``
carries the choice to the debuggee and into the ``session`` event, which the UI shows.
"""

from __future__ import annotations

import os
import sys

ENV = "BACKSTEP_EAGER"
TORCH_ENV = ("TORCH_COMPILE_DISABLE", "TORCHDYNAMO_DISABLE")
STATUS = "compile disabled by --eager"


def request(environ: dict[str, str] | None = None) -> None:
    """Ask for eager execution in this process and its children (before the script runs)."""
    env = os.environ if environ is None else environ
    env[ENV] = "1"
    for name in TORCH_ENV:
        env[name] = "1"


def requested() -> bool:
    """Whether ``--eager`` was asked for (this process or the CLI that started it)."""
    return os.environ.get(ENV) == "1"


def apply() -> None:
    """Turn torch.compile off now: the environment for what is yet to import, the config for a
    Dynamo already imported; code compiled before this call is dropped (``attach(eager=True)``
    in the middle of a script)."""
    request()
    dynamo = sys.modules.get("torch._dynamo")
    config = sys.modules.get("torch._dynamo.config")
    if config is not None:
        config.disable = True
    if dynamo is not None:
        dynamo.reset()


def session_fields() -> dict[str, bool]:
    """What the ``session`` event carries about it: ``eager`` only when it is on."""
    return {"eager": True} if requested() else {}
