"""Clean: torch.func transforms as the per-sample-gradients and model-ensembling tutorials use
them (functional_call, grad, vmap, jacrev, hessian), next to an ordinary training step."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, hessian, jacrev, stack_module_state, vmap


class SimpleCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, 1)
        self.fc1 = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        return F.log_softmax(self.fc1(torch.flatten(x, 1)), dim=1)


torch.manual_seed(0)
model = SimpleCNN()
data, targets = torch.randn(8, 1, 28, 28), torch.randint(10, (8,))
params = {k: v.detach() for k, v in model.named_parameters()}
buffers = {k: v.detach() for k, v in model.named_buffers()}


def compute_loss(params: dict, buffers: dict, sample: torch.Tensor,
                 target: torch.Tensor) -> torch.Tensor:
    batch, targets = sample.unsqueeze(0), target.unsqueeze(0)
    predictions = functional_call(model, (params, buffers), (batch,))
    return F.nll_loss(predictions, targets)


per_sample = vmap(grad(compute_loss), in_dims=(None, None, 0, 0))(params, buffers, data, targets)
print(per_sample["fc1.weight"].shape)

# model ensembling: stacked states, vmapped over the models
models = [nn.Linear(5, 3) for _ in range(4)]
stacked, stacked_buffers = stack_module_state(models)
base = nn.Linear(5, 3).to("meta")


def one(params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
    return functional_call(base, (params, buffers), (x,))


out = vmap(one, in_dims=(0, 0, None))(stacked, stacked_buffers, torch.randn(2, 5))
out.sum().backward()  # into the stacked parameters (leaves)
print(stacked["weight"].grad.shape)

x = torch.randn(5)
print(jacrev(torch.sin)(x).shape, hessian(lambda t: (t ** 3).sum())(x).shape)

optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for _ in range(2):
    optimizer.zero_grad()
    F.nll_loss(model(data), targets).backward()
    optimizer.step()
print("done")
