"""The attention-dropout path (a model trained with attention_dropout > 0) attends where the sdpa backend does: at a
rate of 0 it equals the backends' attention for causal, bidirectional, windowed and document-masked calls, grouped
query heads included; at a rate above 0 it drops with torch's RNG (the same seed, the same output)."""

import pytest
import torch

from megamlm.model.attention_backends import attention
from megamlm.model.attention_dropout import attention_mask, dropout_attention


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("window", [None, 3])
@pytest.mark.parametrize("documents", [False, True])
def test_at_rate_zero_it_is_the_backends_attention(causal, window, documents):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 10, 4, 8, generator=g)
    k, v = (torch.randn(2, 10, 2, 8, generator=g) for _ in range(2))
    doc_ids = torch.tensor([[0] * 4 + [1] * 6, [0] * 7 + [1] * 3]) if documents else None
    mask = attention_mask(10, causal, doc_ids, window, q.device)
    got = dropout_attention(q, k, v, mask, None, 0.0)
    want = attention(q, k, v, causal=causal, document_ids=doc_ids, window=window)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_above_zero_it_drops_with_torchs_rng():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 6, 2, 4, generator=g) for _ in range(3))
    outs = []
    for _ in range(2):
        torch.manual_seed(7)
        outs.append(dropout_attention(q, k, v, None, None, 0.5))
    assert torch.equal(outs[0], outs[1])
    assert not torch.allclose(outs[0], dropout_attention(q, k, v, None, None, 0.0))
