"""Clean: torch.autograd.functional.jacobian and hessian with default arguments (torch passes
retain_graph=True to its own autograd.grad calls; the user's lines never do)."""

import torch

torch.manual_seed(0)
x = torch.randn(3, requires_grad=True)
J = torch.autograd.functional.jacobian(lambda t: t.tanh(), x)
H = torch.autograd.functional.hessian(lambda t: (t ** 3).sum(), x)
w = torch.randn(3, 2)
J2 = torch.autograd.functional.jacobian(lambda a, b: (a @ b).sin(), (x, w))
hvp = torch.autograd.functional.hvp(lambda t: (t.exp() * t).sum(), x.detach(), torch.ones(3))
print(J.shape, H.shape, J2[0].shape, J2[1].shape, hvp[1].shape)
