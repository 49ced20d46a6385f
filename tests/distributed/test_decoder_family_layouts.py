"""Decoders imported from Llama 3.2, Qwen2.5, Mistral, SmolLM2, Qwen3 and Gemma 3 (tiny random models shaped like
the real ones; Mistral and SmolLM2 in the slow suite) train MLM steps under TP=2, PP=2 and FSDP2 DP=2 with the
single-process losses and gradient norms: attention biases split with their heads (o_proj's bias added once),
head_dim apart from hidden / heads, scaled RoPE tables, and tied embeddings, kept one matrix across the pipeline
stages. Each layout's checkpoint loads in one process with the single-process weights (both copies of a tied matrix
equal), and the single-process checkpoint resumes on the pipeline with the same losses (the tied matrix's optimizer
state reaches the last stage).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from decoder_families import FAMILIES, QK_NORM_FAMILIES, WORDS, build
from family_layout_checks import FOUR_RANK_LAYOUTS, LAYOUTS, check_families, reference
from harness import spawn

pytestmark = pytest.mark.distributed
transformers = pytest.importorskip("transformers")


def _families_in_layouts(tmp_path, families: list[str], world: int, layouts: dict) -> list[tuple[str, str]]:
    """Trains every family in every layout and compares each with one process; returns the (family, layout)
    pairs compared."""
    from megamlm.checkpoint import load_model_weights
    from megamlm.hf.importer import import_hf
    from megamlm.hf.megamlm_checkpoint import load_model, read_record
    from megamlm.model.transformer import Transformer

    cases, expected_weights = [], {}
    for name in families:
        family, root = {**FAMILIES, **QK_NORM_FAMILIES}[name], tmp_path / name
        build(family, root / "hf")
        import_hf(root / "hf", root / "ckpt", log=lambda *_: None)
        ref = reference(str(root / "ckpt"), len(family.specials), len(WORDS), str(root / "resume"), world)
        expected_weights[name] = ref.pop("weights")
        cases.append((name, str(root / "ckpt"), len(family.specials), len(WORDS), ref, str(root / "resume"),
                      str(tmp_path / "layouts")))
    spawn(check_families, world, layouts, cases)

    compared = []
    for name in families:
        for layout in layouts:
            saved = tmp_path / "layouts" / f"{name}-{layout}"
            model = load_model(read_record(saved))
            if model.args.tie_word_embeddings:  # the copies saved as the embedding and as the LM head are equal
                untied = Transformer(replace(model.args, tie_word_embeddings=False))
                load_model_weights(saved, untied)
                assert torch.equal(untied.embed_tokens.weight, untied.lm_head.weight), (name, layout)
            for tensor_name, tensor in model.state_dict().items():
                # After 3 AdamW steps of lr 1e-3: within a fifth of one step (summation order moves AdamW's
                # normalised updates a little; a copy that missed an update would be a whole step off).
                diff = float((tensor - expected_weights[name][tensor_name]).abs().max())
                assert diff < 2e-4, (name, layout, tensor_name, diff)
            compared.append((name, layout))
    return compared


# Every feature the six families bring to a layout, in four of them: attention biases and YaRN (Qwen2.5), llama3
# RoPE scaling (Llama 3.2), tied embeddings (all four), a head_dim apart from hidden / heads (Qwen3, as Mistral's),
# q/k norms (Qwen3, Gemma 3), Gemma 3's block. Mistral (untied, as megamlm's own models in test_layouts.py) and
# SmolLM2 (Llama 3.2's architecture; its grown vocabulary is the importer's) are the slow suite's.
DEFAULT_FAMILIES = ["llama3.2", "qwen2.5", "qwen3", "gemma3"]


def test_imported_decoders_train_alike_in_every_layout(tmp_path):
    """TP=2, PP=2 and FSDP2 DP=2 for four families, in one 2-rank world. Qwen3: q/k norms, whose head_dim
    weights see a shard of the heads under TP. Gemma 3: four norms per block, GeGLU, scaled embeddings, sliding
    windows of 5 < 32 tokens with their own RoPE tables, which the pipeline stages carry."""
    compared = _families_in_layouts(tmp_path, DEFAULT_FAMILIES, 2, LAYOUTS)
    assert compared == [(name, layout) for name in DEFAULT_FAMILIES for layout in LAYOUTS]


@pytest.mark.slow
def test_mistral_and_smollm2_train_alike_in_every_layout(tmp_path):
    """The other two families in the 2-rank layouts."""
    families = [name for name in [*FAMILIES, *QK_NORM_FAMILIES] if name not in DEFAULT_FAMILIES]
    assert families == ["mistral", "smollm2"]
    compared = _families_in_layouts(tmp_path, families, 2, LAYOUTS)
    assert compared == [(name, layout) for name in families for layout in LAYOUTS]


@pytest.mark.slow
def test_imported_decoders_train_alike_with_tp_and_fsdp_under_a_pipeline(tmp_path):
    """TP=2 x PP=2 and PP=2 x FSDP2 DP=2 (the tied matrix sharded on both stages), in one 4-rank world."""
    families = ["llama3.2", "qwen2.5"]
    compared = _families_in_layouts(tmp_path, families, 4, FOUR_RANK_LAYOUTS)
    assert compared == [(name, layout) for name in families for layout in FOUR_RANK_LAYOUTS]


@pytest.mark.slow
def test_qwen3_and_gemma3_train_alike_with_tp_and_fsdp_under_a_pipeline(tmp_path):
    """The same 4-rank layouts for Qwen3 and Gemma 3: q/k norms under TP inside a pipeline stage, and Gemma 3's
    per-layer windows and local RoPE tables split across the stages."""
    compared = _families_in_layouts(tmp_path, list(QK_NORM_FAMILIES), 4, FOUR_RANK_LAYOUTS)
    assert compared == [(name, layout) for name in QK_NORM_FAMILIES for layout in FOUR_RANK_LAYOUTS]
