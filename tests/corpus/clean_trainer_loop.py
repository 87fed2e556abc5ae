"""Clean: a Trainer-style loop (as Hugging Face's Trainer and Lightning structure it): gradient
accumulation over micro-batches, clipping, an LR scheduler, evaluation under no_grad, a
callback reading gradient norms, and zero_grad(set_to_none=True) after each optimizer step."""

import torch
import torch.nn as nn


class Trainer:
    def __init__(self, model: nn.Module, accumulation: int, max_norm: float) -> None:
        self.model = model
        self.accumulation = accumulation
        self.max_norm = max_norm
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: 1 / (s + 1))
        self.norms: list[float] = []

    def compute_loss(self, batch: tuple) -> torch.Tensor:
        inputs, labels = batch
        return nn.functional.cross_entropy(self.model(inputs), labels)

    def training_step(self, batch: tuple) -> torch.Tensor:
        self.model.train()
        loss = self.compute_loss(batch) / self.accumulation
        loss.backward()
        return loss.detach()

    def evaluate(self, batches: list) -> float:
        self.model.eval()
        with torch.no_grad():
            return sum(self.compute_loss(b).item() for b in batches) / len(batches)

    def train(self, batches: list, epochs: int) -> None:
        for epoch in range(epochs):
            for step, batch in enumerate(batches):
                self.training_step(batch)
                if (step + 1) % self.accumulation == 0:
                    norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
                    self.norms.append(float(norm))
                    self.optimizer.step()
                    self.scheduler.step()
                    self.optimizer.zero_grad(set_to_none=True)
            print(f"epoch {epoch}: eval loss {self.evaluate(batches[:2]):.3f}")


torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(50, 16), nn.Flatten(), nn.Linear(16 * 6, 32), nn.GELU(),
                      nn.Dropout(0.1), nn.Linear(32, 3))
batches = [(torch.randint(50, (4, 6)), torch.randint(3, (4,))) for _ in range(8)]
Trainer(model, accumulation=4, max_norm=1.0).train(batches, epochs=2)
