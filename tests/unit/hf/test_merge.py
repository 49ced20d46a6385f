"""tools/merge_checkpoints.py: weighted linear merges of megamlm checkpoints and Hugging Face folders, checked
against a hand computation; a merge of a model with itself is bitwise that model; a megamlm merge starts a run
with --init-from; inputs that do not fit together are refused in one line before anything is written."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch

from megamlm.hf.megamlm_checkpoint import load_model, read_record

transformers = pytest.importorskip("transformers")
TOOL = Path(__file__).resolve().parents[3] / "tools" / "merge_checkpoints.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("merge_checkpoints", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


@pytest.fixture(scope="module")
def two(tmp_path_factory, kit):
    """Two megamlm checkpoints of one architecture with different weights: (folders, models)."""
    root = tmp_path_factory.mktemp("merge")
    models = [kit.random_model(seed=seed) for seed in (0, 1)]
    for name, model in zip("ab", models):
        kit.write_checkpoint(root / name, model)
    return [root / "a", root / "b"], models


def weights_of(folder) -> dict[str, torch.Tensor]:
    return load_model(read_record(folder)).state_dict()


def test_a_merge_is_the_hand_computed_weighted_sum(tool, two, tmp_path):
    (a, b), (model_a, model_b) = two
    assert tool(["--input", str(a), str(b), "--weights", "0.7,0.3", "--output", str(tmp_path / "m")]) == 0
    merged = weights_of(tmp_path / "m")
    state_a, state_b = model_a.state_dict(), model_b.state_dict()
    assert set(merged) == set(state_a)
    for name, tensor in merged.items():
        by_hand = (0.7 * state_a[name].double() + 0.3 * state_b[name].double()).float()
        assert torch.equal(tensor, by_hand), name
    q = "layers.0.self_attn.q_proj.weight"
    one = 0.7 * float(state_a[q][1, 2]) + 0.3 * float(state_b[q][1, 2])  # one entry, with plain floats
    assert float(merged[q][1, 2]) == pytest.approx(one, rel=1e-6) and not torch.equal(merged[q], state_a[q])
    record = json.loads(next((tmp_path / "m").glob("iter_*/config.json")).read_text())
    assert [{k: e[k] for k in ("path", "weight")} for e in record["merged_from"]] == [
        {"path": str(a / "iter_0000007"), "weight": 0.7}, {"path": str(b / "iter_0000007"), "weight": 0.3}]
    assert [(e["objective"], e["steps"]) for e in record["merged_from"]] == [("clm_then_mlm", 7)] * 2


def test_a_merge_of_a_checkpoint_with_itself_is_bitwise_the_input(tool, two, tmp_path):
    (a, _), (model_a, _) = two
    assert tool(["--input", str(a), str(a), "--weights", "0.7,0.3", "--output", str(tmp_path / "self")]) == 0
    merged, original = weights_of(tmp_path / "self"), model_a.state_dict()
    assert all(torch.equal(merged[name], original[name]) for name in original)
    assert tool(["--input", str(a), str(a), str(a), "--output", str(tmp_path / "thirds")]) == 0  # equal weights
    assert all(torch.equal(t, original[n]) for n, t in weights_of(tmp_path / "thirds").items())


def test_a_merged_checkpoint_starts_a_run_with_init_from(tool, two, tmp_path):
    from megamlm.cli import load_config
    from megamlm.hf.importer import model_flags
    from megamlm.training.trainer import pretrain

    (a, b), (model_a, _) = two
    assert tool(["--input", str(a), str(b), "--output", str(tmp_path / "m")]) == 0
    cfg = load_config([*model_flags(model_a.args), "--init-from", str(tmp_path / "m"), "--objective", "mntp",
                       "--train-iters", "2", "--micro-batch-size", "2", "--global-batch-size", "2",
                       "--lr-warmup-iters", "0", "--lr-wsd-decay-iters", "1", "--device", "cpu",
                       "--data-cache-path", str(tmp_path / "cache"), "--save", str(tmp_path / "run")])
    result = pretrain(cfg)
    assert result.start == "init" and result.last_step == 2


def test_a_merge_of_hf_folders_keeps_the_folder_and_merges_the_weights(tool, kit, tmp_path):
    from safetensors.torch import load_file

    first = kit.save_tiny_llama(tmp_path / "x", seed=0)
    second = kit.save_tiny_llama(tmp_path / "y", seed=1)
    assert tool(["--input", str(tmp_path / "x"), str(tmp_path / "x"), "--weights", "0.25,0.75", "--output",
                 str(tmp_path / "self")]) == 0
    source = load_file(str(tmp_path / "x" / "model.safetensors"))
    merged = load_file(str(tmp_path / "self" / "model.safetensors"))
    assert set(merged) == set(source) and all(torch.equal(merged[n], source[n]) for n in source)
    assert tool(["--input", str(tmp_path / "x"), str(tmp_path / "y"), "--weights", "0.25,0.75", "--output",
                 str(tmp_path / "m")]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "m"))
    a, b = first.state_dict(), second.state_dict()
    name = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(hf.state_dict()[name], (0.25 * a[name].double() + 0.75 * b[name].double()).float())
    assert (tmp_path / "m" / "tokenizer.json").is_file() and not (tmp_path / "m" / "README.md").exists()


def test_a_megamlm_merge_is_written_as_an_hf_folder_on_request(tool, two, tmp_path):
    (a, b), _ = two
    assert tool(["--input", str(a), str(b), "--to", "hf", "--output", str(tmp_path / "hf")]) == 0
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["EuroBertForMaskedLM"]


def _refusal(tool, capsys, argv) -> str:
    assert tool(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_inputs_that_do_not_fit_together_are_refused_in_one_line(tool, two, kit, tmp_path, capsys):
    (a, b), _ = two
    out = tmp_path / "never"
    wider = kit.TINY.__class__(**{**kit.TINY.to_dict(), "ffn_hidden_size": 96})
    kit.write_checkpoint(tmp_path / "wide", kit.random_model(wider))
    err = _refusal(tool, capsys, ["--input", str(a), str(tmp_path / "wide"), "--output", str(out)])
    assert "tensor 'layers.0.mlp.gate_proj.weight' differs between" in err and "(96, 64)" in err
    bigger = kit.TINY.__class__(**{**kit.TINY.to_dict(), "vocab_size": 8320})
    kit.write_checkpoint(tmp_path / "vocab", kit.random_model(bigger))
    err = _refusal(tool, capsys, ["--input", str(a), str(tmp_path / "vocab"), "--output", str(out)])
    assert "have different vocabularies (vocab_size 8320 and 8192)" in err
    other_tokenizer = tmp_path / "tok" / "tokenizer.json"
    other_tokenizer.parent.mkdir()
    other_tokenizer.write_text(kit.AUSTEN_TOKENIZER.read_text() + "\n")
    from megamlm.checkpoint import save_checkpoint
    from megamlm.config import config_from_settings

    record = {"config": config_from_settings({}).to_dict(), "model_args": kit.TINY.to_dict(), "switch_step": None,
              "data_path": [], "seq_length": kit.TINY.max_seq_length,
              "tokenizer": {"path": str(other_tokenizer), **kit.AUSTEN_IDS}}
    model = kit.random_model()
    save_checkpoint(tmp_path / "tok_run", 1, model, torch.optim.AdamW(model.parameters()), {"consumed_samples": 0},
                    record)
    err = _refusal(tool, capsys, ["--input", str(a), str(tmp_path / "tok_run"), "--output", str(out)])
    assert "have different tokenizers" in err
    kit.save_tiny_llama(tmp_path / "hf")
    capsys.readouterr()  # the save's progress bar
    assert "is a Hugging Face folder and" in _refusal(tool, capsys, ["--input", str(a), str(tmp_path / "hf"),
                                                                     "--output", str(out)])
    assert "gives 3 weights for 2 inputs" in _refusal(tool, capsys, ["--input", str(a), str(b), "--weights",
                                                                     "0.5,0.3,0.2", "--output", str(out)])
    assert "must be finite numbers that sum to 1 (they sum to 0.9)" in _refusal(
        tool, capsys, ["--input", str(a), str(b), "--weights", "0.6,0.3", "--output", str(out)])
    assert "two or more --input models, got 1" in _refusal(tool, capsys, ["--input", str(a), "--output", str(out)])
    assert f"--input {tmp_path / 'nope'} does not exist" in _refusal(
        tool, capsys, ["--input", str(a), str(tmp_path / "nope"), "--output", str(out)])
    assert not out.exists()
    out.mkdir()
    assert "already exists; pass --force" in _refusal(tool, capsys, ["--input", str(a), str(b), "--output", str(out)])
    shutil.rmtree(out)


def test_a_decoder_adapted_with_mntp_merges_with_its_source(tool, kit, tmp_path):
    """BidirLM's recipe at a tiny scale: import a decoder, adapt it with MNTP (at a shorter --seq-length than its
    context), merge the adapted model with the import."""
    import random

    from helpers import write_dataset

    from megamlm.cli import load_config
    from megamlm.hf.importer import import_hf, model_flags
    from megamlm.training.trainer import pretrain

    kit.save_tiny_llama(tmp_path / "llama")
    import_hf(tmp_path / "llama", tmp_path / "source", log=lambda *_: None)
    tokenizer, rng = kit.word_tokenizer(), random.Random(0)
    texts = [" ".join(rng.choice(kit.WORDS) for _ in range(rng.randint(10, 30))) for _ in range(40)]
    write_dataset(tmp_path / "words_text_document",
                  [tokenizer(text)["input_ids"] + [tokenizer.eos_token_id] for text in texts], "int32")
    flags = model_flags(read_record(tmp_path / "source").model_args)  # its context is 64: trained at 32 here
    cfg = load_config([*flags, "--init-from", str(tmp_path / "source"), "--objective", "mntp", "--seq-length", "32",
                       "--data-path", str(tmp_path / "words_text_document"), "--tokenizer-model",
                       str(tmp_path / "source" / "tokenizer" / "tokenizer.json"), "--train-iters", "2",
                       "--micro-batch-size", "2", "--global-batch-size", "2", "--lr-warmup-iters", "0",
                       "--lr-wsd-decay-iters", "1", "--device", "cpu", "--save", str(tmp_path / "mntp")])
    pretrain(cfg)
    assert tool(["--input", str(tmp_path / "mntp"), str(tmp_path / "source"), "--weights", "0.5,0.5", "--output",
                 str(tmp_path / "merged")]) == 0
    merged, adapted, source = (weights_of(tmp_path / name) for name in ("merged", "mntp", "source"))
    name = "layers.1.mlp.down_proj.weight"
    assert torch.equal(merged[name], (0.5 * adapted[name].double() + 0.5 * source[name].double()).float())
    # Issue 42: the exports' model cards say what trained the head (MNTP: shifted) and what the merge was made of
    from megamlm.hf.export import export_checkpoint

    export_checkpoint(tmp_path / "mntp", tmp_path / "hf-mntp", log=lambda *_: None)
    card = (tmp_path / "hf-mntp" / "README.md").read_text()
    assert "last trained by MNTP, which trains a shifted head" in card and "position i-1 predicts" in card
    assert "context 32 (max_position_embeddings: the 32 tokens per sample this model was trained at" in card
    export_checkpoint(tmp_path / "merged", tmp_path / "hf-merged", log=lambda *_: None)
    card = (tmp_path / "hf-merged" / "README.md").read_text()
    assert "Steps: 0" not in card and "Tokens seen: 0" not in card, card
    assert "A weighted linear merge (tools/merge_checkpoints.py)" in card
    assert f"0.5 x `{tmp_path / 'mntp'}" in card and "masked next-token prediction (MNTP), 2 steps" in card
    assert f"0.5 x `{tmp_path / 'source'}" in card and "no training of its own (imported from" in card
    assert "LM head of each input was last trained by CLM and MNTP, which train a shifted head" in card
    # the merge declares the source's 64 positions (RoPE has no position weights), not the adaptation's 32
    assert json.loads((tmp_path / "hf-merged" / "config.json").read_text())["max_position_embeddings"] == 64
    assert "context 64 (max_position_embeddings: the longest context among the merge's inputs; training of the " \
           "inputs used 32 tokens per sample)" in card


def test_hf_folders_that_read_their_weights_differently_or_are_truncated_are_refused(tool, kit, tmp_path, capsys):
    """Issue 42: two HF folders whose rope_theta differ merged into a silently wrong model (exit 0), and a truncated
    model.safetensors ended in safetensors' traceback. Both are one line; nothing is written."""
    kit.save_tiny_llama(tmp_path / "x", seed=0)
    kit.save_tiny_llama(tmp_path / "y", seed=1)
    config = json.loads((tmp_path / "y" / "config.json").read_text())
    rope = {"rope_parameters": {**config["rope_parameters"], "rope_theta": 500000.0}} if "rope_parameters" in config \
        else {"rope_theta": 500000.0}  # transformers 5 and 4
    (tmp_path / "y" / "config.json").write_text(json.dumps({**config, **rope}))
    capsys.readouterr()
    out = tmp_path / "never"
    err = _refusal(tool, capsys, ["--input", str(tmp_path / "x"), str(tmp_path / "y"), "--output", str(out)])
    assert "different architectures (rope_" in err and "500000.0" in err, err
    shutil.copytree(tmp_path / "x", tmp_path / "cut")
    weights = tmp_path / "cut" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    err = _refusal(tool, capsys, ["--input", str(tmp_path / "x"), str(tmp_path / "cut"), "--output", str(out)])
    assert f"cannot read {weights}: it is not a whole safetensors file" in err and "copy it again" in err
    assert not out.exists()
