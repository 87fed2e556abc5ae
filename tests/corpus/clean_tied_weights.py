"""Clean: an embedding tied to the output projection (one parameter, two uses)."""

import torch
import torch.nn as nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 11, dim: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, vocab, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.mix(self.embed(tokens))))


torch.manual_seed(0)
model = TinyLM()
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
tokens = torch.randint(0, 11, (3, 5))
for _ in range(2):
    optimizer.zero_grad()
    logits = model(tokens[:, :-1])
    loss = nn.functional.cross_entropy(logits.reshape(-1, 11), tokens[:, 1:].reshape(-1))
    loss.backward()
    optimizer.step()
print("done")
