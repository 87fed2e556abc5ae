"""Backward twice: saved tensors are freed node by node during the first pass; the second pass
fails at the first node that needs one, and not before: an error, never silently wrong values.

Run it with `python backward_twice.py`, or step through it with `backstep demo backward_twice`.
"""

import json

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


print("A. out = x**3, backward twice")
x = torch.tensor(2.0, requires_grad=True)
out = x**3  # PowBackward0 saves x (to compute 3*x**2)
out.backward()  # pass 1: PowBackward0 runs, then its saved x is freed
print(f"  x.grad = {x.grad}")
check("x.grad == 3*x**2 == 12", x.grad.item() == 12.0)
try:
    out.backward()  # pass 2: fails at its very first node
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error}")
check(
    "the second backward raises 'Trying to backward through the graph a second time'",
    error is not None and "backward through the graph a second time" in error,
)
check("x.grad is still 12: the failed pass added nothing", x.grad.item() == 12.0)
try:
    saved_x = "alive" if out.grad_fn._saved_self is x else "other"  # the node's saved x
except RuntimeError:
    saved_x = "freed"
check(
    "the graph is not deleted: out.grad_fn is still its PowBackward0; only its saved x is freed",
    type(out.grad_fn).__name__ == "PowBackward0" and saved_x == "freed",
)

print("B. two heads on a shared encoder, without retain_graph")
torch.manual_seed(0)
encoder = nn.Linear(10, 5)
head_a = nn.Linear(5, 2)
head_b = nn.Linear(5, 3)
batch = torch.randn(4, 10)
features = encoder(batch)
loss_a = head_a(features).mean()
loss_b = head_b(features).mean()
loss_a.backward()  # pass 3: frees what head_a's and the encoder's nodes saved
try:
    loss_b.backward()  # pass 4: head_b's nodes never ran, so their saved tensors are alive
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error[:72]}...")
check(
    "the second backward raises an error (no silently wrong or missing values): it fails (at the encoder's AddmmBackward0, whose saved input is freed)",
    error is not None and "backward through the graph a second time" in error,
)
check(
    "yet head_b.weight.grad was written before the failure: a failed backward is partial",
    head_b.weight.grad is not None,
)
ref_weight, ref_bias = torch.autograd.grad(  # pass 5: loss_a alone, on a fresh graph
    head_a(encoder(batch)).mean(), [encoder.weight, encoder.bias]
)
check(
    "the encoder got only loss_a's gradient: bit-identical to a loss_a-only run",
    torch.equal(encoder.weight.grad, ref_weight) and torch.equal(encoder.bias.grad, ref_bias),
)


print("C. a graph that saved nothing can be walked twice")
x = torch.tensor(2.0, requires_grad=True)
w = x + 1  # AddBackward0 saves no tensor (only the scalar alpha)
w.backward()  # pass 6
w.backward()  # pass 7: nothing was freed, so nothing is missing
print(f"  x.grad = {x.grad}")
check("backward twice through x + 1 works, and x.grad accumulates to 2", x.grad.item() == 2.0)
try:
    w.backward(retain_variables=True)  # the forum thread's old name for retain_graph
    error = None
except TypeError as exc:
    error = str(exc)
    print(f"  TypeError: {error}")
check(
    "retain_variables is gone in torch 2.x: backward() rejects it (TypeError)",
    error is not None and "retain_variables" in error,
)
