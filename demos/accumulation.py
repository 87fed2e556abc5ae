"""Accumulation: .grad piles up across backward calls without zero_grad; accumulation on purpose
over micro-batches gives the full-batch gradient (where skipping zero_grad is right).

Run it with `python accumulation.py`, or step through it with `backstep demo accumulation`.
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


print("A. three backward calls, no zero_grad")
x = torch.tensor(1.0, requires_grad=True)
seen = []
for i in range(3):
    y = x * (i + 1)
    y.backward()  # passes 1, 2, 3
    print(f"  After step {i}: x.grad = {x.grad}")
    seen.append(x.grad.item())
measure("seen", seen)
check(
    "x.grad reads 1, 3, 6: each pass ADDS its gradient (1, then 2, then 3)", seen == [1.0, 3.0, 6.0]
)

print("B. on purpose: 2 micro-batches of 4 add up to the full batch of 8")
torch.manual_seed(0)
model = nn.Linear(5, 1)
data, target = torch.randn(8, 5), torch.randn(8, 1)
((model(data) - target) ** 2).mean().backward()  # pass 4: the full batch
full = model.weight.grad.clone()
model.zero_grad()
for chunk, goal in zip(data.split(4), target.split(4), strict=True):
    loss = ((model(chunk) - goal) ** 2).mean() / 2  # a mean over the 2 micro-batches
    loss.backward()  # passes 5 and 6: the weight's .grad grows each time
print(f"  full batch:    {full[0, :3].tolist()}")
print(f"  micro-batches: {model.weight.grad[0, :3].tolist()}")
measure("max_diff", (full - model.weight.grad).abs().max().item())
check(
    "the accumulated micro-batch gradient equals the full-batch one (up to rounding)",
    torch.allclose(full, model.weight.grad, atol=1e-6),
)

print("C. the same without dividing each micro-batch loss by 2")
model.zero_grad()
for chunk, goal in zip(data.split(4), target.split(4), strict=True):
    ((model(chunk) - goal) ** 2).mean().backward()  # passes 7 and 8
check(
    "without the / 2 the accumulated gradient is twice the full-batch one",
    torch.allclose(full * 2, model.weight.grad, atol=1e-5),
)
