"""Both sides of test_modernbert_layouts.py: MLM steps of the ModernBERT block in one process (the reference) and in
a parallel layout, from the same weights and batches (packed documents with restarting positions, sliding and global
layers), and the validation numbers of the trained model.

(Kept out of the test module so spawned processes can import it by name.)
"""

from __future__ import annotations

import torch

STEPS = 3
ROWS_PER_MICRO, SEQ = 1, 32
LR, CLIP = 1e-3, 1.0
LAYOUTS = {"tp2": dict(tp=2), "pp2": dict(pp=2), "fsdp_dp2": dict()}
FOUR_RANK_LAYOUTS = {"tp2_pp2": dict(tp=2, pp=2), "pp2_fsdp2": dict(pp=2), "hsdp_2x2": dict(dp_replicate=2)}


def model_args():
    from modernbert_pair import hf_model

    from megamlm.hf.modernbert import modernbert_model_args

    return modernbert_model_args(hf_model().config)


def save_weights(path: str) -> None:
    """The tiny ModernBERT of tests/modernbert_pair.py (sliding and global layers, LayerNorms, head, decoder bias,
    perturbed norms and biases), as megamlm's state dict."""
    from modernbert_pair import hf_model, megamlm_twin

    torch.save(megamlm_twin(hf_model()).state_dict(), path)


def batches(step: int, ids: list[int], causal: bool = False) -> list:
    """One micro-batch per global sample id: two documents per row, positions restarting at the second."""
    from megamlm.objectives import Batch
    from megamlm.objectives.loss import predicted_positions

    out = []
    for k in ids:
        g = torch.Generator().manual_seed(1000 * step + k)
        tokens = torch.randint(4, 96, (ROWS_PER_MICRO, SEQ), generator=g)
        cut = int(torch.randint(8, SEQ - 8, (), generator=g))
        docs = (torch.arange(SEQ) >= cut).long()[None]
        positions = torch.where(docs == 0, torch.arange(SEQ), torch.arange(SEQ) - cut)
        selected = torch.rand(tokens.shape, generator=g) < 0.4
        selected[:, 0] = True
        inputs, targets = torch.where(selected, 3, tokens), torch.where(selected, tokens, -100)
        out.append(Batch(inputs, targets, predicted_positions(targets), causal=causal, sample_ids=[k],
                         document_ids=docs, position_ids=positions))
    return out


def train(weights: str, dims, mesh, world: int) -> dict:
    """STEPS MLM steps of this rank's share of the global batch (one sample per rank of ``world``), then the
    validation loss and top-1 accuracy of a held-out global batch: losses, pre-clip norms, validation."""
    from megamlm.model.transformer import Transformer
    from megamlm.parallel.parallelize import parallelize
    from megamlm.training.optim import build_optimizer
    from megamlm.training.step import StepSetup, train_step
    from megamlm.training.validation import forward_metrics

    cpu = torch.device("cpu")
    model = Transformer(model_args())
    model.load_state_dict(torch.load(weights, weights_only=True))
    pm = parallelize(model, dims, mesh, cpu)
    optimizer = build_optimizer(pm.model, LR, 0.1, (0.9, 0.95), 1e-5)
    setup = StepSetup.of(pm, cpu, CLIP)
    per_rank = world // dims.dp
    mine = list(range(world))[pm.dp_rank * per_rank:(pm.dp_rank + 1) * per_rank]
    losses, norms = [], []
    for step in range(1, STEPS + 1):
        out = train_step(setup, optimizer, batches(step, mine), LR)
        losses.append(float(out.loss))
        norms.append(float(out.grad_norm))
    loss, predicted, correct = forward_metrics(pm, batches(99, mine), cpu, accuracy=True)
    return {"losses": losses, "norms": norms, "validation": (loss / predicted, correct, predicted)}


def _close(name: str, got: list[float], want: list[float], rel: float) -> None:
    for step, (g, w) in enumerate(zip(got, want), start=1):
        if abs(g - w) > rel * abs(w):
            raise AssertionError(f"{name}: step {step}: {g} != {w} (rel {rel})")


def check_layouts(rank: int, world: int, layouts: dict, weights: str, expected: dict) -> None:
    """Every layout trains with the reference's losses, first norm and validation numbers."""
    from helpers import layout_dims

    args = model_args()
    for name, layout in layouts.items():
        dims = layout_dims(world, layout, args, micro_batch_size=ROWS_PER_MICRO, global_batch_size=world,
                           seq_length=SEQ)
        got = train(weights, dims, dims.build_mesh("cpu"), world)
        _close(f"{name} loss", got["losses"], expected["losses"], 1e-5)
        _close(f"{name} grad norm", got["norms"][:1], expected["norms"][:1], 1e-4)
        _close(f"{name} validation loss", got["validation"][:1], expected["validation"][:1], 1e-5)
        if got["validation"][1:] != expected["validation"][1:]:
            raise AssertionError(f"{name} validation accuracy: {got['validation']} != {expected['validation']}")
