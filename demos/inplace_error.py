"""The in-place modification error: which saved tensor, which versions, which line.

Run it with `python inplace_error.py`, or step through it with `backstep demo inplace_error`.
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


w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
x = torch.tensor([1.0, 2.0, 3.0])

print("A. clamp_ modifies a tensor that SigmoidBackward0 saved")
h = torch.sigmoid(x * w)  # SigmoidBackward0 saves its output h (at version 0)
saved_version = h._version
h.clamp_(max=0.8)  # in place: h is now at version 1
print(f"  h._version: {saved_version} when saved, {h._version} now")
check("the in-place clamp_ bumped h's version from 0 to 1", (saved_version, h._version) == (0, 1))
loss = (h * 3).sum()
try:
    loss.backward()  # pass 1: MulBackward0 and ClampBackward1 run, SigmoidBackward0 raises
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error}")
check(
    "backward fails naming the tensor's shape and the versions: 'is at version 1; expected "
    "version 0'",
    error is not None
    and "[torch.FloatTensor [3]]" in error
    and "is at version 1; expected version 0" in error,
)
check("w.grad stays None: the failing node sits between the loss and w", w.grad is None)

print("B. the fix: clamp out of place, so the saved output stays untouched")
h = torch.sigmoid(x * w)
h = h.clamp(max=0.8)  # a new tensor; the saved one is still at version 0
measure("sigmoid_6", round(torch.sigmoid(x[2] * w[2]).item(), 4))
(h * 3).sum().backward()  # pass 2
print(f"  w.grad = {w.grad}")
check(
    "backward succeeds; the clamped element (sigmoid(6) > 0.8) gets zero gradient",
    w.grad is not None and w.grad[2].item() == 0.0 and w.grad[0].item() != 0.0,
)
