"""Cross-entropy over a vocabulary split across tensor-parallel ranks, for the sparse LM head.

Each rank multiplies the selected hidden rows by its slice of the LM head and never sees the other
slices' logits: the softmax max, the normaliser and the target logit are combined with three
all-reduces of (rows,) vectors, as in Megatron's vocab-parallel cross-entropy.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.tensor import DTensor, Partial, Replicate

from megamlm.objectives import IGNORE_INDEX, sparse_lm_loss
from megamlm.objectives.loss import select_predicted


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, group) -> torch.Tensor:
        """logits (N, V_local) fp32, targets (N,) global ids -> per-row losses (N,)."""
        logits_max = logits.max(dim=-1).values
        dist.all_reduce(logits_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - logits_max.unsqueeze(-1)
        vocab_end = vocab_start + logits.shape[-1]
        not_mine = (targets < vocab_start) | (targets >= vocab_end)
        local_targets = (targets - vocab_start).masked_fill(not_mine, 0)
        rows = torch.arange(logits.shape[0], device=logits.device)
        target_logit = shifted[rows, local_targets].masked_fill(not_mine, 0.0)
        dist.all_reduce(target_logit, group=group)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        ctx.save_for_backward(exp.div_(sum_exp.unsqueeze(-1)), local_targets, not_mine)
        return sum_exp.log() - target_logit

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor):
        softmax, local_targets, not_mine = ctx.saved_tensors
        grad = softmax
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, local_targets] -= (~not_mine).to(grad.dtype)
        return grad * grad_loss.unsqueeze(-1), None, None, None


def vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, vocab_start: int, group) -> torch.Tensor:
    """Per-row cross-entropy of vocabulary-sharded ``logits`` (this rank: ids [vocab_start, vocab_start + V_local))."""
    return _VocabParallelCrossEntropy.apply(logits.float(), targets, vocab_start, group)


def replicate_hidden(hidden: torch.Tensor) -> torch.Tensor:
    """A sequence-sharded hidden DTensor -> the full local tensor on every TP rank.

    The all-gather's backward turns each rank's partial gradient (from its vocabulary slice) back into
    a reduce-scatter over the sequence.
    """
    return hidden.redistribute(placements=[Replicate()]).to_local(grad_placements=[Partial()])


class _SumGradients(torch.autograd.Function):
    """Identity forward; backward all-reduces (sums) the gradient over ``group`` (Megatron's copy to the
    tensor-parallel region): each rank's gradient is the part from its vocabulary slice."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.group)
        return grad, None


def head_rows(hidden: torch.Tensor, targets: torch.Tensor, positions: torch.Tensor | None,
              prediction_head: nn.Module, mesh) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Under TP: the predicted rows through the prediction head (its parameters replicated DTensors on ``mesh``),
    as local tensors whose gradient is summed over the ranks' vocabulary slices before it enters the head, so the
    head's gradients and the rows' are whole on every rank."""
    if isinstance(hidden, DTensor):
        hidden = hidden.redistribute(placements=[Replicate()]).to_local()  # whole gradients come back
    rows, row_targets, predicted = select_predicted(hidden, targets, positions)
    out = prediction_head(DTensor.from_local(rows, mesh, [Replicate()], run_check=False)).to_local()
    return _SumGradients.apply(out, mesh.get_group()), row_targets, predicted


def parallel_sparse_lm_loss(hidden: torch.Tensor, head_weight: torch.Tensor, targets: torch.Tensor,
                            kernel_backend: str = "auto", positions: torch.Tensor | None = None,
                            prediction_head: nn.Module | None = None,
                            bias: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """``sparse_lm_loss`` for any layout: (fp32 sum of token losses, predicted tokens); ``positions``,
    ``prediction_head`` and ``bias`` as there.

    Without tensor parallelism this is ``sparse_lm_loss`` itself, with ``kernel_backend`` (pass the model's
    ``backends.kernels``). With a vocabulary-sharded head (a DTensor on the TP mesh) only the selected rows
    are multiplied by this rank's slice of the head (and of its bias), and the cross-entropy is the
    vocabulary-parallel one.
    """
    if not isinstance(head_weight, DTensor):
        if isinstance(hidden, DTensor):
            hidden = replicate_hidden(hidden)
        return sparse_lm_loss(hidden, head_weight, targets, kernel_backend, positions, prediction_head, bias)
    mesh = head_weight.device_mesh
    if prediction_head is not None:
        selected, selected_targets, predicted = head_rows(hidden, targets, positions, prediction_head, mesh)
    else:
        if isinstance(hidden, DTensor):
            hidden = replicate_hidden(hidden)
        selected, selected_targets, predicted = select_predicted(hidden, targets, positions)
    weight = head_weight.to_local()
    vocab_start = mesh.get_local_rank() * weight.shape[0]
    logits = selected @ weight.t()
    if bias is not None:
        logits = logits + bias.to_local()
    losses = vocab_parallel_cross_entropy(logits, selected_targets, vocab_start, mesh.get_group())
    return losses.sum(), predicted


def parallel_top1_correct(hidden: torch.Tensor, head_weight: torch.Tensor, targets: torch.Tensor,
                          chunk_rows: int = 1024, prediction_head: nn.Module | None = None,
                          bias: torch.Tensor | None = None) -> int:
    """How many predicted positions of ``targets`` have their target as the highest logit (ties count as correct).

    For validation, any layout: the selected rows meet the (maybe vocabulary-sharded) LM head ``chunk_rows`` at a
    time, so the full logits of a batch are never held; a sharded head combines each row's largest logit and its
    target logit with two all-reduces (MAX) over the tensor-parallel group. ``prediction_head`` and the LM head's
    ``bias`` as in ``parallel_sparse_lm_loss``.
    """
    if isinstance(hidden, DTensor):
        hidden = replicate_hidden(hidden)
    weight, vocab_start, group = head_weight, 0, None
    if isinstance(head_weight, DTensor):
        mesh = head_weight.device_mesh
        weight = head_weight.to_local()
        vocab_start, group = mesh.get_local_rank() * weight.shape[0], mesh.get_group()
        bias = bias.to_local() if bias is not None else None
    flat_targets = targets.reshape(-1)
    keep = flat_targets != IGNORE_INDEX
    selected, wanted = hidden.reshape(-1, hidden.shape[-1])[keep], flat_targets[keep]
    if prediction_head is not None:
        selected = _through_head(selected, prediction_head, head_weight)
    correct = 0
    for start in range(0, selected.shape[0], chunk_rows):
        logits = selected[start:start + chunk_rows] @ weight.t()
        logits = (logits + bias if bias is not None else logits).float()
        local = wanted[start:start + chunk_rows] - vocab_start
        mine = (local >= 0) & (local < weight.shape[0])
        rows = torch.arange(logits.shape[0], device=logits.device)
        target_logit = logits[rows, local.clamp(0, weight.shape[0] - 1)].masked_fill(~mine, float("-inf"))
        best = logits.max(dim=-1).values
        if group is not None:
            dist.all_reduce(best, op=dist.ReduceOp.MAX, group=group)
            dist.all_reduce(target_logit, op=dist.ReduceOp.MAX, group=group)
        correct += int((target_logit >= best).sum())
    return correct


def _through_head(rows: torch.Tensor, prediction_head: nn.Module, head_weight: torch.Tensor) -> torch.Tensor:
    """``rows`` through the prediction head, whose parameters are replicated DTensors under TP."""
    if not isinstance(head_weight, DTensor):
        return prediction_head(rows)
    return prediction_head(DTensor.from_local(rows, head_weight.device_mesh, [Replicate()], run_check=False)).to_local()
