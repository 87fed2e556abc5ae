"""Clean: truncated backpropagation through time with k1 < k2, the forum recipe (keep the last
k2 states; every k1 steps, backward through each with retain_graph=True): every graph is gone
back through k2/k1 times, so retain_graph is needed although each graph's last pass is not
followed by another. The optimizer steps once a sequence: a step inside it would change the
weights the retained graphs saved (PyTorch refuses that)."""

import torch
import torch.nn as nn


class TBPTT:
    def __init__(self, one_step_module: nn.Module, loss_module: nn.Module, k1: int, k2: int,
                 optimizer: torch.optim.Optimizer) -> None:
        self.one_step_module = one_step_module
        self.loss_module = loss_module
        self.k1 = k1
        self.k2 = k2
        self.retain_graph = k1 < k2
        self.optimizer = optimizer

    def train(self, input_sequence: list, init_state: torch.Tensor) -> None:
        states = [(None, init_state)]
        self.optimizer.zero_grad()
        for j, (inp, target) in enumerate(input_sequence):
            state = states[-1][1].detach()
            state.requires_grad = True
            output, new_state = self.one_step_module(inp, state)
            states.append((state, new_state))
            while len(states) > self.k2:
                del states[0]
            if (j + 1) % self.k1 == 0:
                loss = self.loss_module(output, target)
                loss.backward(retain_graph=self.retain_graph)
                for i in range(self.k2 - 1):
                    if states[-i - 2][0] is None:
                        break
                    curr_grad = states[-i - 1][0].grad
                    states[-i - 2][1].backward(curr_grad, retain_graph=self.retain_graph)
        self.optimizer.step()


class MyMod(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(2 * layer_size, 2 * layer_size)

    def forward(self, inp: torch.Tensor, state: torch.Tensor) -> tuple:
        full_out = self.lin(torch.cat([inp, state], 1))
        out, state = full_out.chunk(2, dim=1)
        return out, state


torch.manual_seed(0)
seq_len, layer_size = 20, 5
one_step_module = MyMod()
loss_module = nn.MSELoss()
input_sequence = [(torch.rand(200, layer_size), torch.rand(200, layer_size))] * seq_len
optimizer = torch.optim.SGD(one_step_module.parameters(), lr=1e-3)
runner = TBPTT(one_step_module, loss_module, 5, 7, optimizer)
for _ in range(2):
    runner.train(input_sequence, torch.zeros(200, layer_size))
print("done")
