"""tools/evaluate.py on a run continued from Qwen3: no Hugging Face encoder holds query/key norms, so the run is
exported as its causal Qwen3 model and evaluated by megamlm's own bidirectional model read back from it."""

import pytest
import torch
from decoder_families import QK_NORM_FAMILIES, build, word_ids

from megamlm.eval.finetune import Hyperparameters, run_finetuning
from megamlm.eval.megamlm_encoder import MegamlmEncoder, is_megamlm_encoder
from megamlm.eval.model_io import load_encoder, load_tokenizer
from megamlm.eval.model_source import resolve_model
from megamlm.eval.tasks import TaskSettings, build_task
from megamlm.hf.importer import import_hf
from megamlm.hf.megamlm_checkpoint import load_model, read_record

from .conftest import classification_task

pytest.importorskip("transformers")


def test_a_qwen3_run_is_evaluated_by_megamlm_s_own_bidirectional_model(tmp_path):
    family = QK_NORM_FAMILIES["qwen3"]
    build(family, tmp_path / "hf")
    import_hf(tmp_path / "hf", tmp_path / "run", log=lambda *_: None)  # a step-0 megamlm checkpoint
    lines = []
    entry = resolve_model("qwen3", tmp_path / "run", tmp_path / "exports", log=lines.append)
    assert is_megamlm_encoder(entry.hf_path) and any("query/key norms" in line for line in lines)
    # Issue 31, item 5: it says what it does, not the export's refusal advising the very command being run.
    said = "\n".join(lines)
    assert "evaluating it with megamlm's own bidirectional model" in said, said
    assert "tools/evaluate.py" not in said and "use the causal Qwen3 export" not in said, said
    encoder = load_encoder(entry.hf_path, log=lines.append)
    assert isinstance(encoder, MegamlmEncoder) and encoder.config.hidden_size == 64
    trained = load_model(read_record(tmp_path / "run"))
    ids = word_ids(family, 2, 12, seed=3)
    mask = torch.ones_like(ids)
    mask[1, 8:] = 0  # right padding: the tokens before it see only each other
    with torch.no_grad():
        hidden = encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        assert (hidden[0] - trained(ids[:1], causal=False)[0]).abs().max() < 1e-5
        assert (hidden[1, :8] - trained(ids[1:, :8], causal=False)[0]).abs().max() < 1e-5
    tokenizer = load_tokenizer(entry.hf_path)
    task = build_task(classification_task(), tokenizer, TaskSettings(max_length=32, eval_batch_size=4),
                      model_path=entry.hf_path)
    result = run_finetuning(task, lambda: load_encoder(entry.hf_path), Hyperparameters(lr=1e-3, seed=0, batch_size=4,
                                                                                       max_steps=1),
                            torch.device("cpu"))
    assert result["steps_done"] == 1 and result["first_loss"] > 0 and 0 <= result["test"]["accuracy"] <= 100
