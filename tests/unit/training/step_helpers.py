"""The tiny model, batches and state comparisons shared by the train-step tests (test_step.py, test_device_guard.py)."""

import torch

from megamlm.model.config import ModelArgs
from megamlm.objectives import MaskingSpec, ObjectiveSchedule

ARGS = ModelArgs(vocab_size=256, num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                 num_query_groups=2, max_seq_length=16)
CPU = torch.device("cpu")


def batches(step: int):
    spec = MaskingSpec(0.4, 1.0, 0.0, 0.0, mask_id=3, special_ids=(0, 1, 2, 3), random_vocab_size=256)
    tokens = torch.randint(4, 256, (2, 16), generator=torch.Generator().manual_seed(step)).numpy()
    return [ObjectiveSchedule("mlm", None, 10, spec, seed=0).make_batch(step, tokens, [2 * step, 2 * step + 1])]


def snapshot(model, optimizer):
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {n: {k: v.clone() for k, v in optimizer.state[p].items()} for n, p in model.named_parameters()}
    return params, state


def assert_same(a, b):
    for name in a:
        assert torch.equal(a[name], b[name]), name
