"""``backstep diff eager.jsonl compiled.jsonl``: a torch.compile run against an eager one.

The two graphs differ by construction (a compiled region is one ``CompiledFunctionBackward``
node where the eager run has dozens), so they are not aligned by graph position. They are
aligned where they must agree:

- by leaf: every parameter's ``.grad`` after each pass (the last ``accumulate`` of each leaf);
- by region: each gradient a region gives out reaches a node that the eager run has too (a
  leaf's ``AccumulateGrad``): what the region sends there is compared with what the eager
  nodes send there, the gradient at the region's boundary.

The report names the first region (in execution order) whose gradients differ beyond
tolerance, the leaves it feeds, both sides' numbers, and every leaf that differs.
"""

from __future__ import annotations

from typing import Any

from backstep.traces.diff import Tolerance, brief_summary, compare_summary
from backstep.traces.index import TraceIndex
from backstep.traces.passes import Pass

REGION = "CompiledFunctionBackward"
SHOWN = 8  # differing leaves listed in full; the rest are counted


def canonical(leaf: str) -> str:
    """A leaf's name as both runs give it: reached through a compiled module, a parameter's
    path holds the wrapper's ``_orig_mod`` (``model._orig_mod.fc.weight`` is ``model.fc.weight``,
    which ``--eager`` names it, ``torch.compile`` then returning the module itself)."""
    return leaf.replace("._orig_mod.", ".").replace("_orig_mod.", "")


def is_compiled(p: Pass) -> bool:
    return any(n.get("name") == REGION for n in p.nodes)


def compiled_side(a: TraceIndex, b: TraceIndex) -> str | None:
    """"a" or "b": which trace holds compiled regions while the other holds none (the first
    pass of each decides); None when that is not so (a plain diff then)."""
    numbers_a, numbers_b = a.numbers(), b.numbers()
    if not numbers_a or not numbers_b:
        return None
    ca, cb = is_compiled(a.read(numbers_a[0])), is_compiled(b.read(numbers_b[0]))
    return "a" if ca and not cb else "b" if cb and not ca else None


def leaf_grads(p: Pass) -> dict[str, dict[str, Any] | None]:
    """Each leaf's ``.grad`` at the end of the pass."""
    out: dict[str, dict[str, Any] | None] = {}
    for e in p.events:
        if e.get("event") == "accumulate" and isinstance(e.get("leaf"), str):
            out[canonical(e["leaf"])] = e.get("after")
    return out


def leaf_incoming(p: Pass) -> dict[str, dict[str, Any] | None]:
    """The gradient each leaf's ``AccumulateGrad`` received in the pass."""
    leaves = {n.get("id"): n.get("leaf") for n in p.nodes if n.get("leaf")}
    out: dict[str, dict[str, Any] | None] = {}
    for e in p.steps:
        leaf = leaves.get(e.get("id"))
        incoming = e.get("grad_outputs") or []
        if isinstance(leaf, str) and incoming:
            out[canonical(leaf)] = incoming[0]
    return out


def _regions(compiled: Pass) -> dict[int, dict[str, Any]]:
    return {e["id"]: e for e in compiled.events
            if e.get("event") == "region" and isinstance(e.get("id"), int)}


def compare_regions(eager: Pass, compiled: Pass, tol: Tolerance) -> list[dict[str, Any]]:
    """Each region of the compiled pass, in execution order, with its outgoing gradients
    compared at the leaves they reach."""
    info = {n.get("id"): n for n in compiled.nodes}
    reference = leaf_incoming(eager)
    described = _regions(compiled)
    out = []
    for event in compiled.steps:
        if event.get("name") != REGION:
            continue
        node = info.get(event.get("id")) or {}
        sent = event.get("grad_inputs") or []
        feeds, differs, compared = [], [], 0
        for i, target in enumerate(node.get("next") or []):
            leaf = (info.get(target) or {}).get("leaf") if target is not None else None
            if not isinstance(leaf, str):
                continue
            leaf = canonical(leaf)
            feeds.append(leaf)
            if i >= len(sent) or leaf not in reference:
                continue
            compared += 1
            why = compare_summary(reference[leaf], sent[i], tol)
            if why:
                differs.append({"output": i, "leaf": leaf, "why": why,
                                "eager": brief_summary(reference[leaf]), "compiled": brief_summary(sent[i])})
        region = described.get(event["id"], {})
        out.append({"id": event["id"], "step": event.get("step"),
                    "function": region.get("function"), "module": node.get("module"),
                    "source": node.get("source"), "feeds": feeds, "compared": compared,
                    "differs": differs, "outputs": _names(region.get("outputs"))})
    return out


def _names(value: Any) -> list[str]:
    """The region's incoming gradients' names (what took each forward output)."""
    return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []


def compare_leaves(eager: Pass, compiled: Pass, tol: Tolerance) -> list[dict[str, Any]]:
    grads_e, grads_c = leaf_grads(eager), leaf_grads(compiled)
    out = []
    for leaf in sorted(set(grads_e) | set(grads_c)):
        if leaf not in grads_e or leaf not in grads_c:
            out.append({"leaf": leaf, "why": f"accumulated only in the "
                        f"{'eager' if leaf in grads_e else 'compiled'} run",
                        "eager": brief_summary(grads_e.get(leaf)), "compiled": brief_summary(grads_c.get(leaf))})
            continue
        why = compare_summary(grads_e[leaf], grads_c[leaf], tol)
        if why:
            out.append({"leaf": leaf, "why": why, "eager": brief_summary(grads_e[leaf]),
                        "compiled": brief_summary(grads_c[leaf])})
    return out


def diff_compiled(a: TraceIndex, b: TraceIndex, side: str, tol: Tolerance) -> dict[str, Any]:
    """The report (one JSON-able object) of a compiled trace against an eager one."""
    eager, compiled = (b, a) if side == "a" else (a, b)
    numbers_e, numbers_c = eager.numbers(), compiled.numbers()
    report: dict[str, Any] = {
        "mode": "compiled", "a": a.path, "b": b.path, "compiled": side,
        "passes": [len(a.numbers()), len(b.numbers())], "same": True, "pass": None,
        "regions": 0, "region": None, "leaves": [],
        "notes": [n for n in (a.note(), b.note()) if n],
    }
    for ne, nc in zip(numbers_e, numbers_c, strict=False):
        pe, pc = eager.read(ne), compiled.read(nc)
        regions = compare_regions(pe, pc, tol)
        leaves = compare_leaves(pe, pc, tol)
        report["regions"] += len(regions)
        first = next((r for r in regions if r["differs"]), None)
        if first is None and not leaves:
            continue
        report.update(same=False, region=first, leaves=leaves, pass_eager=ne)
        report["pass"] = nc
        break
    if report["same"] and len(numbers_e) != len(numbers_c):
        report["same"] = False
        report["notes"].append(f"{len(numbers_e)} passes in the eager run, {len(numbers_c)} in "
                               "the compiled one")
    return report


def _numbers(summary: dict[str, Any] | None) -> str:
    if summary is None:
        return "None"
    parts = [f"{k} {summary[k]:.6g}" if isinstance(summary.get(k), float) else
             f"{k} {summary.get(k)}" for k in ("norm", "min", "max") if k in summary]
    return ", ".join(parts)


def render_compiled(report: dict[str, Any]) -> list[str]:
    """The text lines of a compiled-vs-eager report (the caller escapes them)."""
    side = report["compiled"]
    lines = [f"compiled: {side.upper()}, eager: {'B' if side == 'a' else 'A'} (aligned by leaf "
             "and by region boundary, not by graph position)"]
    lines += [f"note: {n}" for n in report["notes"]]
    if report["same"]:
        lines.append(f"no difference ({report['passes'][0]} pass(es), {report['regions']} "
                     "region(s) compared)")
        return lines
    if report.get("pass") is not None:
        lines.append(f"pass {report['pass']} (compiled) against pass {report['pass_eager']} "
                     "(eager):")
    region = report.get("region")
    if region is not None:
        function = region.get("function") or {}
        where = (f" (compiled {function.get('name')} at {function.get('file')}:"
                 f"{function.get('line')})" if function.get("file") else "")
        lines.append(f"first region that differs: {REGION} #{region['id']} step "
                     f"{region['step']}{where}")
        lines.append(f"  it feeds {len(region['feeds'])} leaves: {', '.join(region['feeds'])}")
        names = region.get("outputs") or []
        if names:  # its incoming gradients, named by what took each forward output
            lines.append("  its incoming gradients (one per forward output):")
            lines += [f"    {name}" for name in names]
        for d in region["differs"]:
            lines.append(f"  output {d['output']} -> {d['leaf']}: {d['why']}")
            lines.append(f"    eager:    {_numbers(d['eager'])}")
            lines.append(f"    compiled: {_numbers(d['compiled'])}")
    elif report.get("pass") is not None:
        lines.append("every region's gradients agree at its boundary")
    leaves = report.get("leaves") or []
    if leaves:
        lines.append(f"{len(leaves)} leaf .grad(s) differ:")
        for d in leaves[:SHOWN]:
            lines.append(f"  {d['leaf']}: {d['why']}")
            lines.append(f"    eager:    {_numbers(d['eager'])}")
            lines.append(f"    compiled: {_numbers(d['compiled'])}")
        if len(leaves) > SHOWN:
            lines.append(f"  ... and {len(leaves) - SHOWN} more")
    return lines
