"""ModernBERT's prediction head: dense (hidden -> hidden), exact GELU, norm, applied before the LM head.

The sparse loss (megamlm/objectives/loss.py) runs it on the predicted positions only.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from megamlm.model.config import Backends, ModelArgs
from megamlm.model.norms import DEFAULT_BACKENDS, build_norm


class PredictionHead(nn.Module):
    def __init__(self, args: ModelArgs, backends: Backends = DEFAULT_BACKENDS):
        super().__init__()
        self.dense = nn.Linear(args.hidden_size, args.hidden_size, bias=args.classifier_bias)
        self.norm = build_norm(args, backends)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(F.gelu(self.dense(x)))
