"""retain_graph in a loop: not needed when each iteration rebuilds the graph, and what it really
costs when misused (saved-tensor bytes held), measured rather than guessed.

Run it with `python retain_graph_loop.py`, or step through it with `backstep demo retain_graph_loop`.
"""

import json
import weakref

import torch
import torch.nn as nn


def check(fact: str, ok: bool) -> None:
    """Print a fact this demo relies on; stop loudly if PyTorch disagrees."""
    if not ok:
        raise SystemExit(f"FACT FAILED: {fact}")
    print(f"  checked: {fact}")


def measure(name: str, value: object) -> object:
    """Print a value the narration quotes, so it is the run's number and never a typed-in one."""
    print(f"  measured: {name} = {json.dumps(value)}")
    return value


def saved_bytes(node: object) -> int:
    """Bytes of every tensor the graph below ``node`` saved for backward, node by node (what
    backstep's graph_released event reports for a retained graph)."""
    total, seen, todo = 0, set(), [node]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        for attr in dir(n):
            if attr.startswith("_saved_"):
                value = getattr(n, attr)  # unpacks: only while the graph is still alive
                if isinstance(value, torch.Tensor):
                    total += value.nbytes
        todo.extend(next_node for next_node, _ in n.next_functions)
    return total


def train(retain: bool, keep_losses: bool) -> tuple[list[int], torch.Tensor]:
    """Three SGD steps; returns the extra saved-tensor bytes still held after each, and the weights.

    `diff` is an intermediate that only the graph's PowBackward0 node saves: while a weak
    reference to it is alive, that graph's saved tensors are still in memory. The graph also
    saved x (AddmmBackward0's mat1), but x is held by this function anyway: it costs nothing extra.
    """
    torch.manual_seed(0)
    model = nn.Linear(10, 1)
    x, y = torch.randn(32, 10), torch.randn(32, 1)
    diffs: list[weakref.ref] = []
    kept: list[torch.Tensor] = []
    held: list[int] = []
    for _ in range(3):
        pred = model(x)
        diff = pred - y
        loss = (diff**2).mean()
        if not graph_bytes:
            graph_bytes.append(saved_bytes(loss.grad_fn))
            x_bytes.append(x.nbytes)
        loss.backward(retain_graph=retain)
        with torch.no_grad():
            for param in model.parameters():
                param -= 0.01 * param.grad
        model.zero_grad()
        if keep_losses:
            kept.append(loss)  # e.g. to average later: keeps each graph reachable
        diffs.append(weakref.ref(diff))
        nbytes = diff.nbytes
        del diff
        held.append(sum(nbytes for ref in diffs if ref() is not None))
    return held, model.weight.detach().clone()


graph_bytes: list[int] = []  # one graph's saved tensors, all of them
x_bytes: list[int] = []  # of which the input x

print("A. the loop from the article, with and without retain_graph=True")
held_retain, w_retain = train(retain=True, keep_losses=False)  # passes 1-3
held_plain, w_plain = train(retain=False, keep_losses=False)  # passes 4-6
print(f"  saved bytes held after each step: retain_graph=True {held_retain}, False {held_plain}")
check(
    "without retain_graph the loop runs and ends with bit-identical weights",
    torch.equal(w_retain, w_plain),
)
one = measure("graph_bytes", graph_bytes[0])
measure("x_bytes", x_bytes[0])
extra = measure("extra_bytes", held_retain[0])
measure("held_retain", held_retain)
measure("held_plain", held_plain)
check(
    "one graph saved (pred - y) and x; only (pred - y), 32 floats, is extra memory",
    extra == 32 * 4 and one == extra + x_bytes[0],
)
check(
    "retain_graph=True holds ONE graph (the latest), not a growing pile",
    held_retain == [extra] * 3 and held_plain == [0, 0, 0],
)

print("B. the real leak: retain_graph=True plus keeping the losses around")
held_kept, _ = train(retain=True, keep_losses=True)  # passes 7-9
held_kept_plain, _ = train(retain=False, keep_losses=True)  # passes 10-12
print(f"  saved bytes held: retain_graph=True {held_kept}, False {held_kept_plain}")
measure("held_kept", held_kept)
measure("held_kept_plain", held_kept_plain)
check(
    "every kept loss keeps its whole graph's saved tensors: bytes grow by one graph per step",
    held_kept == [extra, 2 * extra, 3 * extra],
)
check(
    "without retain_graph, kept losses hold the nodes but their saved tensors are freed",
    held_kept_plain == [0, 0, 0],
)
