"""Higher-order gradients: torch.autograd.grad with create_graph=True gives 27, then 18; why
x.grad.backward() after a plain backward fails; and why create_graph is not "equivalent" to
retain_graph: for exp and tanh the gradient's graph reuses the original nodes.

Run it with `python higher_order.py`, or step through it with `backstep demo higher_order`.
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


print("A. autograd.grad with create_graph=True")
x = torch.tensor(3.0, requires_grad=True)
y = x**3
grad_x = torch.autograd.grad(y, x, create_graph=True)[0]  # pass 1: builds a graph for 3*x**2
print(f"  dy/dx = {grad_x.item()}  (grad_fn: {type(grad_x.grad_fn).__name__})")
check("dy/dx == 3*x**2 == 27", grad_x.item() == 27.0)
check("the gradient has its own grad_fn: pass 1 built a NEW graph", grad_x.grad_fn is not None)
try:
    kept = y.grad_fn._saved_self is x  # raises if pass 1 had freed it
except RuntimeError:
    kept = False
check("create_graph=True also kept y's graph: retain_graph defaults to create_graph", kept)
grad_x2 = torch.autograd.grad(grad_x, x)[0]  # pass 2: walks that new graph
print(f"  d2y/dx2 = {grad_x2.item()}")
check("d2y/dx2 == 6*x == 18", grad_x2.item() == 18.0)
check("autograd.grad never touches x.grad", x.grad is None)

print("B. the article's version: a plain backward, then x.grad.backward()")
x = torch.tensor([1.0], requires_grad=True)
y = x**2
y.backward()  # pass 3
print(f"  print(x.grad) -> {x.grad}")
check(
    "print(x.grad) shows tensor([2.]), and x.grad has no grad_fn",
    str(x.grad) == "tensor([2.])" and x.grad.grad_fn is None,
)
x.grad.zero_()
try:
    y.backward(retain_graph=True)  # pass 4: too late, pass 3 already freed the graph
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error[:60]}...")
check(
    "y.backward(retain_graph=True) after a plain backward fails: retain it the FIRST time",
    error is not None and "second time" in error,
)
try:
    x.grad.backward()  # pass 5: fails before any node runs: there is no graph
    error = None
except RuntimeError as exc:
    error = str(exc)
    print(f"  RuntimeError: {error}")
check(
    "x.grad.backward() fails: a plain backward's gradient carries no graph",
    error is not None and "does not require grad" in error,
)

print("C. backward(create_graph=True), then backward through x.grad")
x = torch.tensor(3.0, requires_grad=True)
(x**3).backward(create_graph=True)  # pass 6: x.grad = 27, with a graph
first = x.grad
check("x.grad == 27 and now has a grad_fn", first.item() == 27.0 and first.grad_fn is not None)
first.backward(retain_graph=True)  # pass 7: accumulates into the same x.grad
print(f"  after x.grad.backward(): x.grad = {x.grad.item()}")
check("x.grad.backward() ADDS 18 to x.grad: 27 + 18 == 45, not 18", x.grad.item() == 45.0)
x.grad = None
first.backward()  # pass 8: with .grad reset first
check("reset x.grad to None first and it reads 18", x.grad.item() == 18.0)

print("D. create_graph=True, retain_graph=False: x**3 vs exp vs tanh, side by side")


def node_names(node: object) -> list[str]:
    """The names of a gradient's graph nodes, each once, depth first (AccumulateGrad left out)."""
    names, seen, todo = [], set(), [node]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        if type(n).__name__ != "AccumulateGrad":
            names.append(type(n).__name__)
        todo.extend(next_node for next_node, _ in reversed(n.next_functions))
    return names


def reaches(node: object, target: object) -> bool:
    """Whether ``target`` is in the graph below ``node``."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n is None or n in seen:
            continue
        if n is target:
            return True
        seen.add(n)
        todo.extend(next_node for next_node, _ in n.next_functions)
    return False


for label, fn in (("pow3", lambda t: t**3), ("exp", torch.exp), ("tanh", torch.tanh)):
    x = torch.tensor(0.5, requires_grad=True)
    y = fn(x)
    # passes 9, 11, 13: the first derivative, with a graph, WITHOUT retaining y's graph
    grad_x = torch.autograd.grad(y, x, create_graph=True, retain_graph=False)[0]
    names = node_names(grad_x.grad_fn)
    print(f"  {label}: y.grad_fn = {type(y.grad_fn).__name__}; the gradient's graph: {names}")
    measure(f"graph_{label}", names)
    uses_y = reaches(grad_x.grad_fn, y.grad_fn)
    measure(f"reuses_{label}", uses_y)
    saved_name = "_saved_self" if label == "pow3" else "_saved_result"
    try:
        getattr(y.grad_fn, saved_name)
        freed = False
    except RuntimeError:  # "... after they have already been freed"
        freed = True
    check(f"{label}: without retain_graph, pass 1 freed what y's own node saved", freed)
    try:
        torch.autograd.grad(grad_x, x)  # passes 10, 12, 14: the second derivative
        error = None
    except RuntimeError as exc:
        error = str(exc)
        print(f"  {label}: RuntimeError: {error[:60]}...")
    if label == "pow3":
        check(
            "x**3: the gradient's graph is all new (y's PowBackward0 is not in it), so the second"
            " derivative works without retain_graph",
            not uses_y and error is None,
        )
    else:
        check(
            f"{label}: the gradient's graph contains y's own {type(y.grad_fn).__name__}, whose saved"
            " tensor pass 1 freed: the second derivative fails 'a second time'",
            uses_y and error is not None and "backward through the graph a second time" in error,
        )
