"""Clean: saved-tensor hooks as the autograd saved-tensors tutorial uses them: pack/unpack
hooks that copy to a list, save_on_cpu, and hooks on one node's saved tensor."""

import torch
import torch.nn as nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(32, 8), torch.randn(32, 1)

storage: list = []


def pack(t: torch.Tensor) -> int:
    storage.append(t.clone())
    return len(storage) - 1


def unpack(index: int) -> torch.Tensor:
    return storage[index]


for step in range(3):
    optimizer.zero_grad()
    if step == 0:
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = ((model(x) - y) ** 2).mean()
    elif step == 1:
        with torch.autograd.graph.save_on_cpu(pin_memory=False):
            loss = ((model(x) - y) ** 2).mean()
    else:
        loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    optimizer.step()
    storage.clear()

a = torch.randn(4, requires_grad=True)
b = a.pow(2)
b.grad_fn._raw_saved_self.register_hooks(lambda t: t * 1.0, lambda t: t)
b.sum().backward()
print(a.grad.shape)
