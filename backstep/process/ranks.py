"""Which rank of a multi-process job this process is, and where its trace goes.

torchrun (and any launcher that sets ``RANK``, ``LOCAL_RANK`` and ``WORLD_SIZE``) starts one
process per rank, all with the same command line. Under several ranks, one ``-o t.jsonl`` would
have every rank write into the same file, so each rank writes its own: ``-o`` may name
``{rank}``, ``{local_rank}`` or ``{pid}``, and a plain name gets ``.rank<N>`` before its
suffix. Stdlib only: ``backstep run`` reads this before anything else is loaded.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_TRACE = "backstep-trace.jsonl"
DEFAULT_RANKED_TRACE = "backstep-trace.rank{rank}.jsonl"

_FIELDS = re.compile(r"\{(rank|local_rank|pid)\}")


@dataclass(frozen=True)
class Rank:
    """This process's place in the job (0 of 1 outside any launcher)."""

    rank: int = 0
    local_rank: int = 0
    world_size: int = 1

    @property
    def several(self) -> bool:
        """True when other ranks run the same command beside this one."""
        return self.world_size > 1


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def from_environment(environ: Mapping[str, str] | None = None) -> Rank:
    """The rank the launcher gave this process (``Rank()`` when there is none)."""
    env = os.environ if environ is None else environ
    world = max(1, _int(env.get("WORLD_SIZE"), 1))
    rank = _int(env.get("RANK"), 0)
    return Rank(rank=rank, local_rank=_int(env.get("LOCAL_RANK"), rank), world_size=world)


def session_fields(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What the ``session`` event says about where it runs: rank, local rank, world size
    (null outside a multi-process launcher) and host name."""
    env = os.environ if environ is None else environ
    launched = "WORLD_SIZE" in env
    here = from_environment(env)
    return {
        "rank": here.rank if launched else None,
        "local_rank": here.local_rank if launched else None,
        "world_size": here.world_size if launched else None,
        "hostname": socket.gethostname(),
    }


def trace_path(template: str | None, here: Rank, pid: int | None = None) -> tuple[str, bool]:
    """Where this rank writes its trace, and whether ``.rank<N>`` was put in for it.

    ``template`` is what ``-o`` said (None: the default). Its ``{rank}``, ``{local_rank}`` and
    ``{pid}`` are filled in; under several ranks a name with none of them gets ``.rank<N>``
    before its suffix (``t.jsonl`` -> ``t.rank1.jsonl``), so no two ranks share a file.
    """
    if template is None:
        template = DEFAULT_RANKED_TRACE if here.several else DEFAULT_TRACE
    values = {"rank": here.rank, "local_rank": here.local_rank,
              "pid": os.getpid() if pid is None else pid}
    path = _FIELDS.sub(lambda match: str(values[match.group(1)]), template)
    if not here.several or _FIELDS.search(template):
        return path, False
    root, ext = os.path.splitext(path)
    return f"{root}.rank{here.rank}{ext}", True


def say_inserted(who: str, template: str, here: Rank) -> None:
    """The one line (from rank 0 only, not once per rank) telling where the files went."""
    if here.rank != 0:
        return
    root, ext = os.path.splitext(template)
    print(f"{who}: {here.world_size} ranks, one file each: {root}.rank0{ext} … "
          f"{root}.rank{here.world_size - 1}{ext} (put {{rank}} in -o to name them)",
          file=sys.stderr)
