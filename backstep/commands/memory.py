"""``backstep memory TRACE.jsonl [--pass N] [--by module|op|line] [--json]``: where a pass's
saved activations go, largest first (stdlib only: no torch)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from backstep.traces.memory import BY


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser(
        "memory",
        help="what a recorded pass's graph holds in saved activations, by module, op or line",
        description="The saved tensors a backward pass's graph holds at its start, each "
        "storage counted once (views and shared storages once; parameters left out), by the "
        "module whose forward made them, the node type or the forward line; largest first, "
        "with what was still held at the pass's end.",
    )
    parser.add_argument("trace", metavar="TRACE.jsonl", help="a trace from `backstep trace`")
    parser.add_argument("--pass", dest="number", type=int, default=None, metavar="N",
                        help="the pass (default: the first)")
    parser.add_argument("--by", choices=BY, default="module",
                        help="group by module (the default), op or line")
    parser.add_argument("--json", action="store_true", help="one JSON object, for machines")
    parser.set_defaults(handler=main)


def main(args: argparse.Namespace) -> int:
    from backstep.commands import chosen_pass, open_traces, say
    from backstep.safe_text import printable
    from backstep.traces import memory as table
    from backstep.traces.passes import TraceError
    from backstep.units import human_bytes

    opened = open_traces("memory", args.trace, strict=True)
    if opened is None:
        return 2
    index = opened[0]
    with index:
        number = chosen_pass("memory", index, args.trace, args.number)
        if number is None:
            return 2
        try:
            events = index.read_kinds(number, {"pass_begin", "memory", "memory_end"})
        except TraceError as exc:
            say("memory", str(exc))
            return 2
    memory = next((e for e in events if e.get("event") == "memory"), None)
    end = next((e for e in events if e.get("event") == "memory_end"), None)
    if memory is None:
        say("memory", f"{args.trace}: pass {number} has no memory event (recorded by an older "
            "backstep, or not recorded)")
        return 2
    begin = next((e for e in events if e.get("event") == "pass_begin"), None)
    sources = {n.get("id"): n.get("source") for n in (begin or {}).get("nodes") or []
               if isinstance(n, dict)}
    freed = end.get("freed") if end else None
    rows = table.rows(memory, args.by, freed if isinstance(freed, list) else None,
                      sources=sources)
    total = memory.get("bytes") or 0
    if args.json:
        out: dict[str, Any] = {
            "pass": number, "by": args.by, "bytes": total, "leaves": memory.get("leaves"),
            "rows": rows, "held_at_end": sum(r["held"] for r in rows) if end else None,
            "cuda": {"start": memory.get("cuda"), "end": end.get("cuda") if end else None},
            "kept": end.get("kept") if end else None}
        print(json.dumps(out))
        return 0
    width = max([len(human_bytes(r["bytes"])) for r in rows] + [len(human_bytes(total))])
    print(printable(f"pass {number}: {human_bytes(total)} of saved activations at the start, "
                    f"{len(memory.get('storages') or [])} storages (by {args.by})"))
    for row in rows:
        share = f"{100 * row['bytes'] / total:5.1f}%" if total else "     -"
        held = f", {human_bytes(row['held'])} still held at the end" if end and row["held"] else ""
        count = f"{row['storages']} storage{'s' if row['storages'] != 1 else ''}"
        print(printable(f"  {human_bytes(row['bytes']):>{width}}  {share}  {row['key']}  "
                        f"({count}{held})"))
    print(f"  {human_bytes(total):>{width}}  total")
    leaves = memory.get("leaves")
    if leaves:
        print(f"  (parameters and other leaves saved too, left out: {human_bytes(leaves)})")
    for label, figures in (("start", memory.get("cuda")), ("end", end and end.get("cuda"))):
        if isinstance(figures, dict):
            print(f"  CUDA at the pass's {label}: {human_bytes(figures.get('allocated') or 0)} "
                  f"allocated, peak {human_bytes(figures.get('peak') or 0)}")
    return 0
