"""The predicted rows selected by host-computed indices (no host synchronisation) give the boolean selection's
loss and gradients, bit for bit."""

import pytest
import torch

from megamlm.objectives import IGNORE_INDEX, sparse_lm_loss
from megamlm.objectives.loss import predicted_positions


@pytest.mark.parametrize("backend", ["chunked", "reference"])
def test_selecting_by_positions_is_the_boolean_selection_bit_for_bit(backend):
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 16, 8, generator=generator)
    weight = torch.randn(50, 8, generator=generator)
    targets = torch.randint(0, 50, (2, 16), generator=generator)
    targets[torch.rand(2, 16, generator=generator) < 0.6] = IGNORE_INDEX
    results = []
    for positions in (None, predicted_positions(targets)):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        loss, predicted = sparse_lm_loss(h, w, targets, backend, positions=positions)
        loss.backward()
        results.append((loss.detach(), predicted, h.grad, w.grad))
    (loss_a, n_a, dh_a, dw_a), (loss_b, n_b, dh_b, dw_b) = results
    assert n_a == n_b == int((targets != IGNORE_INDEX).sum()) > 0
    assert torch.equal(loss_a, loss_b) and torch.equal(dh_a, dh_b) and torch.equal(dw_a, dw_b)
    kept = (targets.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)
    assert predicted_positions(targets).tolist() == kept.tolist()
