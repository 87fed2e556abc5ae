"""NaN through torch.where(x > 0, x.sqrt(), 0): the forward is clean, yet the gradient has NaN.
Where is the NaN gradient born?

Run it with `python nan_where.py`, or step through it with `backstep demo nan_where`.
"""

import json

import torch


def check(fact: str, ok: bool) -> None:
    """Print a fact this demo relies on; stop loudly if PyTorch disagrees."""
    if not ok:
        raise SystemExit(f"FACT FAILED: {fact}")
    print(f"  checked: {fact}")


def measure(name: str, value: object) -> object:
    """Print a value the narration quotes, so it is the run's number and never a typed-in one."""
    print(f"  measured: {name} = {json.dumps(value)}")
    return value


print("A. where() picks 0 for x <= 0, but sqrt still ran on every element")
x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
y = torch.where(x > 0, x.sqrt(), 0.0)
print(f"  y = {y.tolist()}")
check("the forward result is finite: [0, 0, 2]", y.tolist() == [0.0, 0.0, 2.0])
y.sum().backward()  # pass 1: SumBackward0, WhereBackward0, SqrtBackward0, AccumulateGrad
print(f"  x.grad = {x.grad.tolist()}")
check(
    "x.grad is [nan, nan, 0.25]: NaN where x <= 0",
    x.grad.isnan().tolist() == [True, True, False] and x.grad[2].item() == 0.25,
)
# WhereBackward0 sends 0 to the masked elements; SqrtBackward0 computes 0 / (2 * sqrt(x)):
# sqrt(-1) is nan and 0 / (2 * sqrt(0)) is 0 / 0, so the NaN is born in SqrtBackward0.
check(
    "0 / (2 * sqrt(-1)) and 0 / (2 * sqrt(0)) are both NaN",
    all(torch.tensor(0.0).div(2 * torch.tensor(v).sqrt()).isnan().item() for v in (-1.0, 0.0)),
)

print("B. the fix: make the unused branch safe before sqrt (the 'double where')")
x = torch.tensor([-1.0, 0.0, 4.0], requires_grad=True)
safe = torch.where(x > 0, x, 1.0)  # sqrt never sees x <= 0
y = torch.where(x > 0, safe.sqrt(), 0.0)
y.sum().backward()  # pass 2
print(f"  x.grad = {x.grad.tolist()}")
check(
    "same forward result, and x.grad is [0, 0, 0.25]: no NaN",
    y.tolist() == [0.0, 0.0, 2.0] and x.grad.tolist() == [0.0, 0.0, 0.25],
)
