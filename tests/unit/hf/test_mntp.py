"""MNTP (masked next-token prediction) equals a direct computation with transformers' own models of the same
weights in bidirectional mode: EuroBERT (bidirectional by design) and a Llama decoder given an all-ones (non-causal)
4-D attention mask. The direct computation takes the MLM mask of each sample and scores every masked token i >= 1
from the logits at position i - 1; megamlm's is its training path (the MNTP batch through forward_backward)."""

import numpy as np
import pytest
import torch

from megamlm.hf.export import export_checkpoint
from megamlm.objectives import IGNORE_INDEX, MaskingSpec, mlm_mask
from megamlm.objectives.schedule import make_batch
from megamlm.parallel.dims import ParallelDims
from megamlm.parallel.parallelize import parallelize
from megamlm.training.step import StepSetup, forward_backward

transformers = pytest.importorskip("transformers")
SEED, IDS = 11, [5, 6, 7]


@pytest.fixture(scope="module")
def exported(tiny_checkpoint, tmp_path_factory):
    save_dir, model = tiny_checkpoint
    out = tmp_path_factory.mktemp("mntp")
    return model, {arch: export_checkpoint(save_dir, out / arch, arch=arch, log=lambda *_: None)
                   for arch in ("eurobert", "llama")}


def spec_of(model) -> MaskingSpec:
    return MaskingSpec(0.4, 1.0, 0.0, 0.0, mask_id=3, special_ids=(0, 1, 2, 3), random_vocab_size=model.args.vocab_size)


def tokens_of(model) -> np.ndarray:
    return np.random.default_rng(3).integers(4, model.args.vocab_size, (len(IDS), 48)).astype(np.int64)


def direct_mntp_loss(logits_of, tokens: np.ndarray, spec: MaskingSpec) -> float:
    """Mean over the masked tokens i >= 1 of -log p(token i | logits at i - 1), on the MLM-masked input."""
    pairs = [mlm_mask(row, sample, SEED, spec) for row, sample in zip(tokens, IDS)]
    inputs = torch.from_numpy(np.stack([p[0] for p in pairs]))
    masked = torch.from_numpy(np.stack([p[1] for p in pairs])) != IGNORE_INDEX
    masked[:, 0] = False  # no predecessor
    inputs[:, 0] = torch.from_numpy(tokens[:, 0])  # so never masked either
    with torch.no_grad():
        logits = logits_of(inputs).double()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    target = torch.from_numpy(tokens[:, 1:])
    picked = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    return float(-picked[masked[:, 1:]].mean())


def megamlm_mntp_loss(model, tokens: np.ndarray, spec: MaskingSpec, objective: str = "mntp") -> float:
    pm = parallelize(model, ParallelDims(world_size=1), None, torch.device("cpu"))
    batch = make_batch(objective, tokens, IDS, SEED, spec)
    loss, _ = forward_backward(StepSetup.of(pm, torch.device("cpu"), 0.0), [batch])
    model.zero_grad(set_to_none=True)
    return loss


def test_mntp_equals_transformers_eurobert(exported):
    model, folders = exported
    hf = transformers.AutoModelForMaskedLM.from_pretrained(str(folders["eurobert"]), dtype=torch.float32).eval()
    tokens, spec = tokens_of(model), spec_of(model)
    theirs = direct_mntp_loss(lambda ids: hf(input_ids=ids).logits, tokens, spec)
    assert megamlm_mntp_loss(model, tokens, spec) == pytest.approx(theirs, rel=1e-5, abs=1e-5)
    # The comparison can fail: MLM's targets (unshifted) give another loss.
    assert abs(megamlm_mntp_loss(model, tokens, spec, "mlm") - theirs) > 1e-3


def test_mntp_equals_transformers_llama_decoder_with_a_non_causal_mask(exported):
    model, folders = exported
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folders["llama"]), dtype=torch.float32,
                                                           attn_implementation="sdpa").eval()
    tokens, spec = tokens_of(model), spec_of(model)

    def bidirectional(ids):
        everything = torch.ones(ids.shape[0], 1, ids.shape[1], ids.shape[1], dtype=torch.bool)  # a custom 4-D mask
        return hf(input_ids=ids, attention_mask=everything).logits

    theirs = direct_mntp_loss(bidirectional, tokens, spec)
    assert megamlm_mntp_loss(model, tokens, spec) == pytest.approx(theirs, rel=1e-5, abs=1e-5)
    causal = direct_mntp_loss(lambda ids: hf(input_ids=ids).logits, tokens, spec)
    assert abs(causal - theirs) > 1e-3  # the mask did make the decoder bidirectional (near-uniform random logits)
