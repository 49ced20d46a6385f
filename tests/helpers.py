"""Set-up shared by the tests of every folder: tiny model shapes, models and batches, small indexed datasets,
a free TCP port, the pretrain flags of the small in-process runs, the tools/ scripts as modules, the check of a
one-line user error, and the digest of a folder (what "left untouched" means).

Imported by module name (``from helpers import tiny_args``): tests/conftest.py puts this folder on sys.path,
and processes spawned by the distributed tests inherit it. Heavy imports (torch, megamlm) happen inside the
functions, so that importing this module costs nothing to the tests that only need a flag list or a port.
"""

from __future__ import annotations

import hashlib
import importlib.util
import socket
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]

# ---- pretrain flags ------------------------------------------------------------------------------------------

# The trainer tests' tiny model: one layer of width 32 (2 heads, 2 KV groups), 32-token samples.
TINY_SHAPE = ["--num-layers", "1", "--hidden-size", "32", "--ffn-hidden-size", "64", "--num-attention-heads", "2",
              "--num-query-groups", "2", "--seq-length", "32"]
# Its usual batch: global 4 = 2 micro-batches of 2.
TINY_BATCH = ["--global-batch-size", "4", "--micro-batch-size", "2"]
# Small enough for seconds per run on 2 cores, large enough for the loss to move.
FAST = ["--seq-length", "64", "--global-batch-size", "8", "--micro-batch-size", "4", "--log-interval", "5"]
# Smaller still (TINY_SHAPE, global batch 4, short LR phases): a run of a few steps takes a second.
TINY = [*TINY_SHAPE, *TINY_BATCH, "--lr-warmup-iters", "2", "--lr-wsd-decay-iters", "2"]
# The tiny preset at half width (SPLITTABLE's shape): heads, KV heads, layers and MLP width split by 2 and 4.
SPLITTABLE_SHAPE = ["--model", "tiny", "--hidden-size", "64", "--ffn-hidden-size", "128", "--seq-length", "32"]

# ---- model shapes --------------------------------------------------------------------------------------------

# ModelArgs fields of SPLITTABLE_SHAPE (give vocab_size): what parallel layouts are compared on.
SPLITTABLE = dict(num_layers=4, hidden_size=64, ffn_hidden_size=128, num_attention_heads=8, num_query_groups=4,
                  max_seq_length=32)


def tiny_args(**overrides):
    """A tiny ModelArgs: 256 ids, two layers of width 32 (MLP 64), 4 heads in 2 KV groups, 16 positions;
    ``overrides`` replace fields (a test that needs another shape says which fields differ)."""
    from megamlm.model.config import ModelArgs

    shape = dict(vocab_size=256, num_layers=2, hidden_size=32, ffn_hidden_size=64, num_attention_heads=4,
                 num_query_groups=2, max_seq_length=16)
    shape.update(overrides)
    return ModelArgs(**shape)


def layout_dims(world: int, layout: dict, args, micro_batch_size: int, global_batch_size: int, **shape):
    """The checked ParallelDims of ``layout`` (short names: tp, pp, dp_replicate, pipeline_schedule, ...) for the
    model ``args`` and batch sizes; ``shape`` overrides a model flag (e.g. seq_length)."""
    from megamlm.config import ParallelConfig, TrainingConfig, model_section_values
    from megamlm.training.startup import resolve_parallel_dims

    degrees = {"tensor_model_parallel_size": layout.get("tp", 1), "pipeline_model_parallel_size": layout.get("pp", 1)}
    parallel = ParallelConfig(**degrees, **{k: v for k, v in layout.items() if k not in ("tp", "pp")})
    training = TrainingConfig(micro_batch_size=micro_batch_size, global_batch_size=global_batch_size)
    return resolve_parallel_dims(world, parallel, training, {**model_section_values(args), **shape})


# ---- models and batches --------------------------------------------------------------------------------------

def random_model(args, seed: int = 0):
    """A Transformer seeded with ``seed`` whose norm weights are drawn from [0.5, 1.5], so that a swapped or
    dropped norm weight shows in the logits."""
    import torch

    from megamlm.model.transformer import Transformer

    torch.manual_seed(seed)
    model = Transformer(args)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
    return model


def sparse_batch(args, seed: int, rows: int = 2, first_target: bool = False):
    """(tokens, targets) on CPU: ``rows`` random rows of ``args.max_seq_length`` ids from the whole vocabulary,
    about half of the positions to predict (the others -100); ``first_target``: position 0 always predicted."""
    import torch

    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, args.vocab_size, (rows, args.max_seq_length), generator=g)
    targets = torch.where(torch.rand(tokens.shape, generator=g) < 0.5, tokens, -100)
    if first_target:
        targets[:, 0] = tokens[:, 0]
    return tokens, targets


def loss_and_grads(model, tokens, targets, causal: bool):
    """One forward and backward of the mean sparse LM loss with the model's kernel backend:
    (hidden states, loss sum, {parameter name: gradient})."""
    from megamlm.objectives.loss import sparse_lm_loss

    model.zero_grad(set_to_none=True)
    hidden = model(tokens, causal=causal)
    loss_sum, n = sparse_lm_loss(hidden, model.lm_head.weight, targets, kernel_backend=model.backends.kernels)
    (loss_sum / n).backward()
    return hidden.detach(), loss_sum.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


def objective_batches(step: int, objective: str, rows: int = 2, seq: int = 16, high: int = 256,
                      train_iters: int = 10) -> list:
    """One micro-batch of ``objective`` for ``step`` (a list, as train_step takes them): ``rows`` rows of ``seq``
    ids in [4, high) seeded by the step, sample ids rows*step onwards; masking over a vocabulary of 256 with
    ids 0-3 special (3 the mask)."""
    import torch

    from megamlm.objectives import MaskingSpec, ObjectiveSchedule

    spec = MaskingSpec(0.4, 1.0, 0.0, 0.0, mask_id=3, special_ids=(0, 1, 2, 3), random_vocab_size=256)
    schedule = ObjectiveSchedule(objective, None, train_iters, spec, seed=0)
    tokens = torch.randint(4, high, (rows, seq), generator=torch.Generator().manual_seed(step)).numpy()
    return [schedule.make_batch(step, tokens, list(range(rows * step, rows * step + rows)))]


def snapshot(model, optimizer) -> tuple[dict, dict]:
    """Copies of every parameter and of its optimizer state, by parameter name."""
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    state = {n: {k: v.clone() for k, v in optimizer.state[p].items()} for n, p in model.named_parameters()}
    return params, state


def assert_same(a: dict, b: dict) -> None:
    """Two ``snapshot`` parameter (or state) dicts hold bitwise equal tensors."""
    import torch

    for name in a:
        assert torch.equal(a[name], b[name]), name


# ---- data ----------------------------------------------------------------------------------------------------

def write_dataset(prefix, docs, dtype=np.uint16) -> str:
    """Write ``docs`` (token id sequences, one document each) as the indexed dataset ``prefix``; returns
    ``str(prefix)``."""
    from megamlm.data import IndexedDatasetWriter

    with IndexedDatasetWriter(prefix, dtype) as writer:
        for doc in docs:
            writer.add_document(doc)
    return str(prefix)


# ---- processes -----------------------------------------------------------------------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- tools, user errors, files left untouched ----------------------------------------------------------------

def load_tool(name: str, folder: str = "tools"):
    """``tools/<name>.py`` (or ``<folder>/<name>.py``) loaded as a module: the scripts are not a package. Loaded
    afresh on every call, so that a test's monkeypatching of one copy never reaches another test."""
    path = REPO / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tool_main(name: str):
    """The ``main(argv) -> exit status`` of ``tools/<name>.py``."""
    return load_tool(name).main


def expect_one_line(capsys, status, *messages: str) -> str:
    """A user error as the project promises it: exit status 2 and one line on stderr, ``error: ...`` with no
    traceback, holding every one of ``messages``; returns that line."""
    err = capsys.readouterr().err
    assert status == 2, (status, err)
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    for message in messages:
        assert message in err, err
    return err


def tree_digest(folder) -> dict:
    """{relative path: (sha256, mode)} of every file under ``folder``: equal before and after means that nothing
    in it was written, removed, added or chmod-ed."""
    folder = Path(folder)
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode)
            for p in sorted(folder.rglob("*")) if p.is_file()}


def save_tiny_llama(folder, tokenizer, max_positions: int):
    """A tiny Llama decoder (2 layers of width 32, grouped-query attention, tied LM head) with ``tokenizer`` as an
    HF folder, the same weights for the same tokenizer: what the probe and the adaptation pipeline read like
    SmolLM2."""
    import torch
    import transformers

    config = transformers.LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=2, num_key_value_heads=1, head_dim=16, intermediate_size=64,
                                      max_position_embeddings=max_positions, tie_word_embeddings=True,
                                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
