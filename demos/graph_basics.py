"""Graph basics: out = (x*y + x)**2, its grad_fn chain, AccumulateGrad, and 64 and 32 by hand.

Run it with `python graph_basics.py`, or step through it with `backstep demo graph_basics`.
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


x = torch.tensor(2.0, requires_grad=True)
y = torch.tensor(3.0, requires_grad=True)
z = x * y  # MulBackward0
w = z + x  # AddBackward0
out = w**2  # PowBackward0
print(f"out = {out.item()}")

# The chain of grad_fn nodes, from the output back to the leaves.
pow_node = out.grad_fn
add_node = pow_node.next_functions[0][0]
mul_node = add_node.next_functions[0][0]
acc_x = add_node.next_functions[1][0]
print(f"out.grad_fn = {type(pow_node).__name__}")
print(f"  -> {type(add_node).__name__} -> {type(mul_node).__name__} and {type(acc_x).__name__}")
check(
    "out.grad_fn is PowBackward0, then AddBackward0, then MulBackward0",
    [type(n).__name__ for n in (pow_node, add_node, mul_node)]
    == ["PowBackward0", "AddBackward0", "MulBackward0"],
)
check(
    "a leaf's node is AccumulateGrad and .variable is the leaf itself",
    type(acc_x).__name__ == "AccumulateGrad" and acc_x.variable is x,
)
# x is used twice (x*y and +x): one AccumulateGrad node, reached by two edges.
check(
    "x's AccumulateGrad is ONE node reached twice (a DAG, not a tree)",
    mul_node.next_functions[0][0] is acc_x,
)

out.backward()
print(f"x.grad = {x.grad}")
print(f"y.grad = {y.grad}")
# d(out)/dx = 2*(x*y+x) * (y+1) = 2*8*4 = 64 ; d(out)/dy = 2*(x*y+x) * x = 2*8*2 = 32
check("x.grad == 2*(x*y+x)*(y+1) == 64", x.grad.item() == 64.0)
check("y.grad == 2*(x*y+x)*x == 32", y.grad.item() == 32.0)
# A 0-dim tensor formats like its Python number inside an f-string (print(x.grad) would not).
check(
    "f'{x.grad}' prints '64.0' but print(x.grad) prints 'tensor(64.)'",
    f"{x.grad}" == "64.0" and str(x.grad) == "tensor(64.)",
)
