"""A short CLM-then-MLM training run gives the same losses with every kernel backend.

Each backend trains the same tiny model on the same batches for 20 AdamW steps (10 CLM, then 10 MLM
with sparse prediction); the per-step losses must agree with the reference path's. On CPU the Triton
kernels run in the interpreter (hence the tiny model, and the slow mark); on a GPU they run compiled.
"""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_args

from megamlm.model.config import Backends
from megamlm.model.transformer import Transformer
from megamlm.objectives.loss import sparse_lm_loss

VOCAB, SEQ, BATCH, STEPS, SWITCH = 61, 8, 2, 20, 10
MASK_ID = VOCAB - 1


def _batches(device):
    g = torch.Generator().manual_seed(123)
    for step in range(STEPS):
        tokens = torch.randint(0, VOCAB - 1, (BATCH, SEQ), generator=g)
        if step < SWITCH:  # CLM: predict the next token, causal attention
            targets = torch.full_like(tokens, -100)
            targets[:, :-1] = tokens[:, 1:]
            yield tokens.to(device), targets.to(device), True
        else:  # MLM: 40% of positions masked and predicted, bidirectional attention
            selected = torch.rand(tokens.shape, generator=g) < 0.4
            selected[:, 0] = True
            inputs = torch.where(selected, torch.full_like(tokens, MASK_ID), tokens)
            yield inputs.to(device), torch.where(selected, tokens, -100).to(device), False


def _train(backend: str, device) -> list[float]:
    args = tiny_args(vocab_size=VOCAB, hidden_size=24, ffn_hidden_size=40, max_seq_length=SEQ)
    torch.manual_seed(0)
    model = Transformer(args, backends=Backends(kernels=backend)).to(device)
    model.reset_parameters(torch.Generator(device=device).manual_seed(0))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    losses = []
    for inputs, targets, causal in _batches(device):
        hidden = model(inputs, causal=causal)
        loss_sum, n_tokens = sparse_lm_loss(hidden, model.lm_head.weight, targets, model.backends.kernels)
        loss = loss_sum / n_tokens
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


# Interpreted Triton runs a few thousand kernel programs here (minutes on 2 busy cores): slow on CPU.
_TRITON_MARKS = [] if torch.cuda.is_available() else [pytest.mark.slow]


@pytest.mark.parametrize("backend", [pytest.param("triton", marks=_TRITON_MARKS), "chunked"])
def test_twenty_steps_match_the_reference_path(triton_ops, device, backend):
    reference = _train("reference", device)
    got = _train(backend, device)
    assert reference[-1] < reference[0]  # it trains at all
    torch.testing.assert_close(torch.tensor(got), torch.tensor(reference), atol=2e-4, rtol=1e-4)
