"""megamlm trains its ModernBERT block step for step as transformers trains ModernBertForMaskedLM (MLM) and
ModernBertDecoderForCausalLM (CLM): the same weights, batches and masks; megamlm's own train step (sparse loss, its
optimizer construction, one process) against transformers' forward and loss in a plain torch AdamW loop, with the
same parameter groups (weight decay on matrices). 200 steps, CPU fp32; every loss within 1e-4 relative, and the
validation loss (megamlm's validation forward and sparse loss) equal before and after. The tokens are random: the
held-out loss need not fall, the training loss does.

With documents, megamlm packs several documents per row (document ids, positions restarting at each document, as
ModernBERT's unpadded path), and transformers gets each document as its own row, padded, with an attention mask.
"""

from __future__ import annotations

import pytest
import torch
from modernbert_pair import FIRST_WORD, MASK, PAD, VOCAB, hf_model, megamlm_twin

from megamlm.objectives import Batch
from megamlm.objectives.loss import predicted_positions
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.parallelize import parallelize
from megamlm.training.optim import build_optimizer
from megamlm.training.step import StepSetup, train_step
from megamlm.training.validation import forward_metrics

STEPS, ROWS, SEQ = 200, 2, 32
LR, WEIGHT_DECAY, BETAS, EPS = 2e-3, 0.01, (0.9, 0.98), 1e-6
CPU = torch.device("cpu")


def _documents(g: torch.Generator) -> torch.Tensor:
    """(ROWS, SEQ) document ids: three or four documents per row, of random lengths."""
    rows = []
    for _ in range(ROWS):
        cuts = torch.randperm(SEQ - 1, generator=g)[: 2 + int(torch.randint(0, 2, (), generator=g))] + 1
        starts = torch.zeros(SEQ, dtype=torch.long)
        starts[cuts] = 1
        rows.append(starts.cumsum(0))
    return torch.stack(rows)


def _targets(tokens, documents, causal: bool, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets): MLM masks 30% of the tokens; CLM predicts the next token of the same document."""
    if not causal:
        selected = torch.rand(tokens.shape, generator=g) < 0.3
        selected[:, 0] = True
        return torch.where(selected, MASK, tokens), torch.where(selected, tokens, -100)
    targets = torch.full_like(tokens, -100)
    same = documents[:, 1:] == documents[:, :-1]
    targets[:, :-1] = torch.where(same, tokens[:, 1:], -100)
    return tokens, targets


def _per_document(inputs, targets, documents, causal: bool) -> dict:
    """transformers' batch: each document its own row, padded, with an attention mask (CLM labels are the tokens:
    transformers shifts them)."""
    pieces = [(inputs[r][documents[r] == d], targets[r][documents[r] == d])
              for r in range(ROWS) for d in documents[r].unique()]
    longest = max(len(piece[0]) for piece in pieces)
    ids = torch.full((len(pieces), longest), PAD)
    labels = torch.full((len(pieces), longest), -100)
    mask = torch.zeros((len(pieces), longest), dtype=torch.long)
    for row, (piece_inputs, piece_targets) in enumerate(pieces):
        n = len(piece_inputs)
        ids[row, :n], mask[row, :n] = piece_inputs, 1
        labels[row, :n] = piece_inputs if causal else piece_targets
    return dict(input_ids=ids, attention_mask=mask, labels=labels)


def batch_pair(seed: int, causal: bool, documents: bool) -> tuple[Batch, dict]:
    """One micro-batch as megamlm sees it and as transformers sees it."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(FIRST_WORD, VOCAB, (ROWS, SEQ), generator=g)
    docs = _documents(g) if documents else torch.zeros((ROWS, SEQ), dtype=torch.long)
    inputs, targets = _targets(tokens, docs, causal, g)
    batch = Batch(inputs, targets, predicted_positions(targets), causal=causal, sample_ids=[seed] * ROWS)
    if not documents:
        return batch, dict(input_ids=inputs, labels=tokens if causal else targets)
    starts = torch.ones_like(docs, dtype=torch.bool)
    starts[:, 1:] = docs[:, 1:] != docs[:, :-1]
    index = torch.arange(SEQ).expand(ROWS, SEQ)
    first = torch.cummax(torch.where(starts, index, 0), dim=1).values
    batch.document_ids, batch.position_ids = docs, index - first
    return batch, _per_document(inputs, targets, docs, causal)


def _hf_optimizer(hf) -> torch.optim.AdamW:
    params = [p for p in hf.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if p.ndim >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)


def _validate(pm, hf, batch: Batch, hf_batch: dict) -> tuple[float, float]:
    """(megamlm's mean validation loss, transformers') on one held-out batch."""
    loss, predicted, _ = forward_metrics(pm, [batch], CPU, "fp32")
    hf.eval()
    with torch.no_grad():
        expected = hf(**hf_batch).loss.item()
    hf.train()
    return loss / predicted, expected


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny matrices: one thread is 50x faster than two on a loaded machine (thread hand-offs dominate)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("decoder,documents", [(False, False), (False, True), (True, False), (True, True)],
                         ids=["mlm", "mlm-documents", "clm", "clm-documents"])
def test_training_equals_transformers_step_for_step(decoder, documents):
    hf = hf_model(decoder).train()
    model = megamlm_twin(hf).train()
    pm = parallelize(model, ParallelDims(world_size=1), None, CPU, precision="fp32")
    setup = StepSetup.of(pm, CPU, clip_grad=0.0, precision="fp32")
    optimizer = build_optimizer(model, LR, WEIGHT_DECAY, BETAS, EPS)
    hf_optimizer = _hf_optimizer(hf)
    held_out = batch_pair(10_000, decoder, documents)
    before = _validate(pm, hf, *held_out)
    assert before[0] == pytest.approx(before[1], rel=1e-5)
    ours, theirs = [], []
    for step in range(STEPS):
        batch, hf_batch = batch_pair(step, decoder, documents)
        ours.append(float(train_step(setup, optimizer, [batch], LR).loss))
        loss = hf(**hf_batch).loss
        hf_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        hf_optimizer.step()
        theirs.append(loss.item())
    torch.testing.assert_close(torch.tensor(ours), torch.tensor(theirs), rtol=1e-4, atol=0.0)
    assert sum(ours[-20:]) < sum(ours[:20])  # it learns
    after = _validate(pm, hf, *held_out)
    assert after[0] == pytest.approx(after[1], rel=1e-4)
