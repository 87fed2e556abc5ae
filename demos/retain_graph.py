"""retain_graph with two losses on a shared encoder, (loss_a + loss_b).backward() instead, and what
an optimizer.step() between the two backward calls changes; and a gradient never computed is
None, not zero.

Run it with `python retain_graph.py`, or step through it with `backstep demo retain_graph`.
"""

import copy
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


torch.manual_seed(0)
encoder = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 4))
head_a = nn.Linear(4, 2)
head_b = nn.Linear(4, 3)
params = [*encoder.parameters(), *head_a.parameters(), *head_b.parameters()]
x = torch.randn(5, 3)


def losses() -> tuple[torch.Tensor, torch.Tensor]:
    """One forward pass: two task losses over one shared encoder output."""
    features = encoder(x)
    return head_a(features).mean(), head_b(features).pow(2).mean()


def encoder_grads() -> list[torch.Tensor]:
    return [p.grad.clone() for p in encoder.parameters()]


def zero() -> None:
    for p in params:
        p.grad = None


print("A. two backward calls; the first keeps the graph for the second")
loss_a, loss_b = losses()
loss_a.backward(retain_graph=True)  # pass 1
loss_b.backward()  # pass 2: runs through the shared encoder again
two_calls = encoder_grads()

print("B. one backward call on the sum")
zero()
loss_a, loss_b = losses()
(loss_a + loss_b).backward()  # pass 3: the encoder is walked once, with summed gradients
summed = encoder_grads()
diff = max((a - b).abs().max().item() for a, b in zip(two_calls, summed, strict=True))
print(f"  largest difference between A and B encoder gradients: {diff:.1e}")
measure("max_diff", diff)  # machine-dependent rounding: the narration quotes this run's value
check(
    "A and B give the same encoder gradients, up to float rounding",
    all(torch.allclose(a, b, atol=1e-6) for a, b in zip(two_calls, summed, strict=True)),
)

print("C. optimizer.step() between the two backward calls")
zero()
optimizer = torch.optim.SGD(params, lr=0.1)
loss_a, loss_b = losses()
version = encoder[2].weight._version
loss_a.backward(retain_graph=True)  # pass 4
check(
    "backward() never changes a parameter: the weight's version is the same after it",
    encoder[2].weight._version == version,
)
optimizer.step()  # updates encoder weights IN PLACE; the graph saved encoder[2].weight
print(f"  encoder[2].weight version: {version} before step, {encoder[2].weight._version} after")
measure("version_before", version)
measure("version_after", encoder[2].weight._version)
check("optimizer.step() bumped the weight's version", encoder[2].weight._version > version)
try:
    loss_b.backward()  # pass 5
    failed = None
except RuntimeError as exc:
    failed = str(exc)
    print(f"  RuntimeError: {failed}")
check(
    "loss_b.backward() fails: a saved weight was modified in place by optimizer.step()",
    failed is not None and "modified by an inplace operation" in failed,
)

print("D. the same, where no stepped weight was saved (one Linear layer on plain data)")
torch.manual_seed(0)
model = nn.Linear(10, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data, target = torch.randn(1, 10), torch.randn(1, 1)
output = model(data)
before_step = copy.deepcopy(model)  # to recompute the gradient at the old weights
loss1 = nn.MSELoss()(output, target)
loss1.backward(retain_graph=True)  # pass 6
optimizer.step()
optimizer.zero_grad()
loss2 = nn.L1Loss()(output, target)
loss2.backward()  # pass 7: no error, but `output` still holds the values from before the step
fresh_loss = nn.L1Loss()(model(data), target).item()
print(f"  loss2 = {loss2.item():.6f}; L1 of a fresh forward after the step = {fresh_loss:.6f}")
measure("loss2", loss2.item())
measure("fresh_loss", fresh_loss)
check(
    "loss2.backward() runs: Linear on plain data saves the data, not the weight",
    model.weight.grad is not None,
)
check(
    "loss2 is computed from the pre-step output, not the updated model", loss2.item() != fresh_loss
)
nn.L1Loss()(before_step(data), target).backward()  # pass 8: the gradient at the OLD weights
check(
    "loss2's gradient is exactly the gradient at the OLD weights",
    torch.equal(model.weight.grad, before_step.weight.grad),
)

print("E. the forum thread's 'would be zero': head_b's gradient from loss_a alone is None")
zero()
loss_a, _ = losses()
loss_a.backward()  # pass 9: loss_a alone; head_b is not in its graph at all
measure("head_b_grad", None if head_b.weight.grad is None else head_b.weight.grad.tolist())
check(
    "after loss_a.backward(), head_b.weight.grad is None (never computed), not a tensor of zeros",
    head_b.weight.grad is None and encoder[0].weight.grad is not None,
)
# None and zero are not the same to an optimizer: SGD skips a parameter whose .grad is None,
# but weight decay still moves one whose .grad is zero.
w_none = nn.Parameter(torch.ones(2))
w_zero = nn.Parameter(torch.ones(2))
w_zero.grad = torch.zeros(2)
torch.optim.SGD([w_none, w_zero], lr=0.1, weight_decay=0.1).step()
measure("w_none_after_step", [round(v, 6) for v in w_none.tolist()])
measure("w_zero_after_step", [round(v, 6) for v in w_zero.tolist()])
check(
    "SGD(weight_decay=0.1) leaves a parameter with .grad None untouched, but moves a zero-grad one",
    torch.equal(w_none, torch.ones(2)) and bool((w_zero < 1).all()),
)
