"""retain_grad: calling it after the op still works, as long as it is before backward; a non-leaf's
.grad is None without it (with a warning); y.grad is written mid-pass, just before y's own node
runs; and with y in two branches the engine sums them, retain_grad or not.

Run it with `python retain_grad.py`, or step through it with `backstep demo retain_grad`.
"""

import json
import warnings

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


x = torch.linspace(-1.0, 1.0, 10, requires_grad=True)
expected = torch.full((10,), 0.1)  # d(mean(2x + 3))/dy = 1/10 for every element

print("A. retain_grad() right after y = x * 2")
y = x * 2
# When does y.grad get written? Look from hooks (they return nothing: they change nothing). The
# prehook on y's own node is registered BEFORE retain_grad(), and still sees y.grad already set.
seen = {}
y.grad_fn.register_prehook(lambda go: seen.update(before_mul=y.grad is not None))
y.grad_fn.register_hook(lambda gi, go: seen.update(after_mul=y.grad is not None))
y.retain_grad()
z = y + 3
z.grad_fn.register_hook(lambda gi, go: seen.update(after_add=y.grad is not None))
z.mean().backward()  # pass 1
check("y.grad == 0.1 everywhere", torch.allclose(y.grad, expected))
measure("y_grad_after_add", seen["after_add"])
measure("y_grad_before_mul", seen["before_mul"])
check(
    "y.grad is still None after AddBackward0 ran, and already set before y's own MulBackward0 runs",
    seen == {"after_add": False, "before_mul": True, "after_mul": True},
)

print("B. retain_grad() AFTER z = y + 3 was computed (the article says this raises)")
y = x * 2
z = y + 3
y.retain_grad()  # still before backward: that is all that matters
z.mean().backward()  # pass 2
check("no error, and y.grad == 0.1 everywhere", torch.allclose(y.grad, expected))

print("C. no retain_grad() at all")
y = x * 2
z = y + 3
z.mean().backward()  # pass 3
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    grad = y.grad
message = str(caught[0].message) if caught else ""
print(f"  y.grad = {grad}; UserWarning: {message[:78]}...")
check(
    "y.grad is None, with a UserWarning, not an error",
    grad is None and "not a leaf Tensor" in message,
)

print("D. retain_grad() after backward")
y = x * 2
z = y + 3
z.mean().backward()  # pass 4
y.retain_grad()  # too late: the pass has run
check("y.grad is None: retain_grad only affects later backward passes", y.grad is None)

print("E. the article's 'second backprop' example")
x = torch.tensor([1.5], requires_grad=True)
y = x**2
y.retain_grad()
z = y**2
z.backward()  # pass 5
print(f"  first backprop: y.grad = {y.grad}")
check("y.grad == 2*y == 4.5", y.grad.item() == 4.5)
y.grad.zero_()
try:
    z.backward()  # pass 6: the graph was freed by pass 5, retain_grad or not
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error[:60]}...")
check(
    "the second z.backward() fails WITH retain_grad: it needed retain_graph=True, not retain_grad",
    error is not None and "second time" in error,
)

print("F. y in two branches, with and without retain_grad (the article says it would 'overwrite')")
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x * 2
y.retain_grad()
((y * 3).sum() + (y**2).sum()).backward()  # pass 7: y feeds MulBackward0 and PowBackward0
print(f"  y.grad = {y.grad.tolist()}; 3 + 2*y = {(3 + 2 * y.detach()).tolist()}")
measure("two_branch_y_grad", y.grad.tolist())
check(
    "y.grad is the SUM of both branches' gradients, 3 (from y*3) + 2*y (from y**2)",
    torch.equal(y.grad, 3 + 2 * y.detach()),
)
with_retain = x.grad.clone()
x = torch.tensor([1.0, 2.0], requires_grad=True)
y = x * 2
((y * 3).sum() + (y**2).sum()).backward()  # pass 8: the same, no retain_grad
measure("x_grad_with_retain", with_retain.tolist())
measure("x_grad_without_retain", x.grad.tolist())
check(
    "x.grad is bit-identical with and without retain_grad: the engine sums the branches either way",
    torch.equal(with_retain, x.grad),
)
