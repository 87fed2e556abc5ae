"""Clean: gradient hooks that edit gradients: per-parameter clipping with register_hook
(returning the clamped gradient), a gradient-reversal layer, a hook that masks a frozen part of a
weight, and a post-accumulate hook that steps the optimizer in backward."""

import torch
import torch.nn as nn


class GradReverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, alpha: float) -> torch.Tensor:
        ctx.alpha = alpha
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor) -> tuple:
        return grad_output.neg() * ctx.alpha, None


torch.manual_seed(0)
features = nn.Linear(8, 8)
label_head, domain_head = nn.Linear(8, 2), nn.Linear(8, 2)
for p in features.parameters():
    p.register_hook(lambda grad: torch.clamp(grad, -0.1, 0.1))
mask = torch.ones_like(label_head.weight)
mask[:, :4] = 0
label_head.weight.register_hook(lambda grad: grad * mask)
params = [*features.parameters(), *label_head.parameters(), *domain_head.parameters()]
optimizer = torch.optim.SGD(params, lr=0.1)
x, y, d = torch.randn(16, 8), torch.randint(2, (16,)), torch.randint(2, (16,))
for _ in range(3):
    optimizer.zero_grad()
    h = features(x)
    loss = nn.functional.cross_entropy(label_head(h), y) + nn.functional.cross_entropy(
        domain_head(GradReverse.apply(h, 0.5)), d)
    loss.backward()
    optimizer.step()

# optimizer steps fused into backward, one optimizer per parameter
model = nn.Linear(4, 1)
optimizers = {p: torch.optim.SGD([p], lr=0.1) for p in model.parameters()}


def step_in_backward(p: torch.Tensor) -> None:
    optimizers[p].step()
    optimizers[p].zero_grad()


for p in model.parameters():
    p.register_post_accumulate_grad_hook(step_in_backward)
for _ in range(3):
    model(torch.randn(5, 4)).pow(2).mean().backward()
print("done")
