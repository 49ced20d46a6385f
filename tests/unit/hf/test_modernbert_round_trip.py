"""A ModernBERT-family folder through the tools: convert_from_hf.py, pretrain --init-from, convert_to_hf.py --arch
modernbert / modernbert-decoder, loaded back by transformers, fill-mask and sentence-transformers; import then
export is bitwise the input; bad inputs are one line with exit status 2."""

from __future__ import annotations

import random

import pytest
import torch
from helpers import expect_one_line, tool_main, write_dataset
from modernbert_folders import BIASES, RELEASED, SMALL_WINDOW, save_modernbert, word_tokenizer
from step_recorder import StepRecorder

from megamlm.cli import load_config
from megamlm.hf.export import export_checkpoint
from megamlm.hf.megamlm_checkpoint import load_model, read_record
from megamlm.hf.modernbert import modernbert_fields
from megamlm.training.trainer import pretrain

transformers = pytest.importorskip("transformers")
TOKEN_IDS = ("pad_token_id", "bos_token_id", "eos_token_id", "cls_token_id", "sep_token_id")


def _auto(decoder: bool):
    return transformers.AutoModelForCausalLM if decoder else transformers.AutoModelForMaskedLM


def _loads_cleanly(folder, decoder: bool):
    model, info = _auto(decoder).from_pretrained(str(folder), output_loading_info=True)
    assert not any(info.values()), info  # no missing, unexpected or mismatched weights
    assert type(model).__name__ == ("ModernBertDecoderForCausalLM" if decoder else "ModernBertForMaskedLM")
    return model.eval()


def _same_model(source, exported):
    """Assert that every safetensors tensor is bitwise the same (dtype included) and the configs read as the same
    megamlm model; returns both configs."""
    from safetensors.torch import load_file

    before, after = (load_file(folder / "model.safetensors") for folder in (source, exported))
    assert sorted(before) == sorted(after)
    for name, tensor in before.items():
        assert tensor.dtype == after[name].dtype and torch.equal(tensor, after[name]), name
    configs = [transformers.AutoConfig.from_pretrained(folder) for folder in (source, exported)]
    assert modernbert_fields(configs[1]) == modernbert_fields(configs[0])
    return configs


@pytest.mark.parametrize("name", ["mmbert-small", "ettin-decoder"])
def test_the_released_shapes_round_trip_bitwise(tmp_path, capsys, name):
    """mmBERT-small's (vocabulary 256,000, RoPE 160k on every layer) and an Ettin decoder's released config files
    (tiny in width and depth), imported and exported without training."""
    settings = RELEASED[name]
    decoder = settings.get("decoder", False)
    save_modernbert(tmp_path / "hf", settings, legacy=True)
    assert tool_main("convert_from_hf")(["--input", str(tmp_path / "hf"), "--output", str(tmp_path / "ckpt")]) == 0
    printed = capsys.readouterr().out
    for flag in (f"--vocab-size {settings['vocab_size']}", "--rope-theta 160000.0", "--seq-length 8192",
                 f"--sliding-window {64 if decoder else 65}", "--layer-types full,sliding,sliding,full"):
        assert flag in printed, printed
    assert ("--local-rope-theta 10000.0" in printed) == decoder  # mmBERT's local base is its global one
    arch = "modernbert-decoder" if decoder else "modernbert"
    assert tool_main("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "out"),
                                       "--arch", arch]) == 0
    _, after = _same_model(tmp_path / "hf", tmp_path / "out")
    assert after.local_attention == 128 and after.layer_types[:3] == ["full_attention", *["sliding_attention"] * 2]
    _loads_cleanly(tmp_path / "out", decoder)


@pytest.mark.parametrize("kind", ["encoder-released-keys", "encoder", "decoder"])
def test_import_then_export_is_bitwise_the_input(tmp_path, capsys, kind):
    decoder = kind == "decoder"
    settings = {**SMALL_WINDOW, **BIASES, "decoder": decoder, "classifier_dropout": 0.1,
                **({} if decoder else {"classifier_pooling": "cls"})}
    source = save_modernbert(tmp_path / "hf", settings, legacy=kind == "encoder-released-keys")
    assert tool_main("convert_from_hf")(["--input", str(tmp_path / "hf"), "--output", str(tmp_path / "ckpt")]) == 0
    printed = capsys.readouterr().out
    imported = load_model(read_record(tmp_path / "ckpt")).eval()  # the import's logits are transformers'
    ids = torch.randint(5, 35, (2, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        difference = imported.logits(imported(ids, causal=decoder)) - source(input_ids=ids).logits
    assert difference.abs().max().item() < 1e-5
    for flag in ("--norm-type layernorm", "--norm-bias", "--embedding-norm", "--prediction-head", "--decoder-bias",
                 "--mlp-bias", "--mlp-activation geglu_erf", f"--sliding-window {4 if decoder else 5}",
                 "--layer-types full,sliding,sliding,full", "--local-rope-theta 100.0", "--init-method modernbert"):
        assert flag in printed, printed
    arch = "modernbert-decoder" if decoder else "modernbert"
    assert tool_main("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "out"),
                                       "--arch", arch]) == 0
    before, after = _same_model(tmp_path / "hf", tmp_path / "out")
    for name in (*TOKEN_IDS, "classifier_dropout", *(() if decoder else ("classifier_pooling",))):
        assert getattr(after, name) == getattr(before, name), name
    _loads_cleanly(tmp_path / "out", decoder)
    card = (tmp_path / "out" / "README.md").read_text()
    assert "## Use" in card and "`local_attention: 8`" in card
    assert decoder or "The LM head was last trained by MLM" in card  # the imported encoder's own MLM head


def _corpus(prefix, documents=60):
    tokenizer, rng = word_tokenizer(), random.Random(0)
    words = [w for w in tokenizer.get_vocab() if not w.startswith("[")]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(documents)]
    write_dataset(prefix, [tokenizer(text)["input_ids"] for text in texts], "int32")


@pytest.mark.parametrize("source_kind,objective", [("encoder", "mlm"), ("decoder", "clm"), ("decoder", "mlm")])
def test_init_from_trains_ten_steps_and_exports_what_it_trained(tmp_path, source_kind, objective):
    """pretrain --init-from a ModernBERT (or Ettin decoder) folder adopts the block (window 8 in 32 tokens), trains
    10 steps, and the export loads in transformers with no weight warning and computes the trained model's logits.
    A decoder continued with MLM (the paper's claim (d) on an Ettin pair) exports as ModernBertForMaskedLM, its
    causal window W = 4 written as the encoder's local_attention 2(W - 1) = 6."""
    decoder = objective == "clm"
    source = save_modernbert(tmp_path / "hf", {**SMALL_WINDOW, "decoder": source_kind == "decoder"})
    _corpus(tmp_path / "words_text_document")
    cfg = load_config(["--init-from", str(tmp_path / "hf"), "--data-path", str(tmp_path / "words_text_document"),
                      "--data-cache-path", str(tmp_path / "cache"), "--seq-length", "32",
                      "--objective", objective, "--train-iters", "10", "--micro-batch-size", "2",
                      "--global-batch-size", "2", "--lr", "1e-3", "--lr-warmup-iters", "0", "--lr-wsd-decay-iters",
                      "0", "--device", "cpu", "--save", str(tmp_path / "run")])
    recorder = StepRecorder()
    pretrain(cfg, on_step=recorder)
    assert sorted(recorder.losses) == list(range(1, 11)) and all(v == v for v in recorder.losses.values())
    assert (cfg.model.norm_type, cfg.model.embedding_norm, cfg.model.prediction_head) == ("layernorm", True, True)
    window = 4 if source_kind == "decoder" else 5
    assert cfg.model.sliding_window == window and cfg.model.layer_types == "full,sliding,sliding,full"
    trained = load_model(read_record(tmp_path / "run")).eval()
    out = export_checkpoint(tmp_path / "run", tmp_path / "out", arch="modernbert-decoder" if decoder else None,
                            log=lambda *_: None)
    exported = _loads_cleanly(out, decoder)
    assert exported.config.local_attention == (2 * window if decoder else 2 * (window - 1))
    moved = exported.model.embeddings.tok_embeddings.weight - source.model.embeddings.tok_embeddings.weight
    assert moved.abs().max() > 0  # trained, not the source
    ids = torch.randint(5, 35, (2, 32), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        difference = exported(input_ids=ids).logits - trained.logits(trained(ids, causal=decoder))
    assert difference.abs().max().item() < 1e-5
    card = (out / "README.md").read_text()
    assert "Steps: 10" in card and f"Continued pretraining from: {cfg.checkpoint.init_from}" in card
    if not decoder:
        assert len(transformers.pipeline("fill-mask", model=str(out))("she [MASK] that")) == 5
        from sentence_transformers import SentenceTransformer  # a test dependency (pyproject's [test] extra)

        embedder = SentenceTransformer(str(out), device="cpu")  # the hidden states' mean over the tokens
        embedding = embedder.encode(["Elinor said that"], convert_to_tensor=True)
        batch = transformers.AutoTokenizer.from_pretrained(str(out))(["Elinor said that"], return_tensors="pt")
        with torch.no_grad():
            hidden = transformers.AutoModel.from_pretrained(str(out)).eval()(**batch).last_hidden_state
        assert embedding.shape == (1, 32) and (embedding - hidden.mean(dim=1)).abs().max() < 1e-5


@pytest.mark.parametrize("field,value", [("hidden_activation", "relu"), ("classifier_activation", "silu"),
                                         ("sparse_prediction", True)])
def test_a_folder_megamlm_cannot_hold_is_one_line_exit_2(tmp_path, capsys, field, value):
    save_modernbert(tmp_path / "hf", {**SMALL_WINDOW, field: value})
    capsys.readouterr()  # transformers' progress bar of the save
    status = tool_main("convert_from_hf")(["--input", str(tmp_path / "hf"), "--output", str(tmp_path / "ckpt")])
    expect_one_line(capsys, status, f"{field}=")
    assert not (tmp_path / "ckpt").exists()


def test_arch_modernbert_on_a_model_without_the_block_names_what_is_missing(tmp_path, capsys, tiny_checkpoint):
    save_dir, _ = tiny_checkpoint
    for arch in ("modernbert", "modernbert-decoder"):
        status = tool_main("convert_to_hf")(["--input", str(save_dir), "--output", str(tmp_path / arch),
                                             "--arch", arch])
        expect_one_line(capsys, status, "norm_type layernorm", "embedding_norm", "prediction_head")
        assert not (tmp_path / arch).exists()


def test_an_embedder_without_the_mlm_head_imports_with_a_fresh_head(tmp_path, capsys):
    """A ModernBertModel folder (how embedders built on ModernBERT ship: no head.*, no decoder.bias, names without
    ``model.``) imports with its hidden states kept, the MLM head started by the ModernBERT init, and exports as a
    ModernBertForMaskedLM whose encoder computes the source's hidden states."""
    source = save_modernbert(tmp_path / "full", SMALL_WINDOW)
    encoder = source.model
    encoder.config.architectures = ["ModernBertModel"]
    encoder.save_pretrained(tmp_path / "embedder")
    word_tokenizer().save_pretrained(tmp_path / "embedder")
    from safetensors import safe_open

    with safe_open(tmp_path / "embedder" / "model.safetensors", framework="pt") as stored:
        assert "embeddings.tok_embeddings.weight" in stored.keys()  # a base model's names
    convert = tool_main("convert_from_hf")
    assert convert(["--input", str(tmp_path / "embedder"), "--output", str(tmp_path / "ckpt")]) == 0
    assert "holds no MLM head" in capsys.readouterr().out
    imported = load_model(read_record(tmp_path / "ckpt")).eval()
    assert torch.equal(imported.head.norm.weight, torch.ones(32))
    assert torch.equal(imported.lm_head.bias, torch.zeros(64))
    ids = torch.randint(5, 35, (2, 32), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert (imported(ids, causal=False) - encoder(input_ids=ids).last_hidden_state).abs().max() < 1e-5
    assert tool_main("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "out")]) == 0
    exported = _loads_cleanly(tmp_path / "out", decoder=False)
    with torch.no_grad():
        hidden = exported.model(input_ids=ids).last_hidden_state
    assert (hidden - encoder(input_ids=ids).last_hidden_state).abs().max() < 1e-5


@pytest.mark.parametrize("dry_run", [True, False])
def test_init_from_keeps_the_settings_a_recipe_gives(tmp_path, dry_run):
    """A recipe's own values for settings that do not decide the tensors (an Ettin phase's local RoPE base, their
    attention dropout) are kept over the imported model's, as for a megamlm checkpoint; the ones it leaves out are
    the model's; a given tensor setting that contradicts the model is refused in one line."""
    save_modernbert(tmp_path / "hf", SMALL_WINDOW)
    _corpus(tmp_path / "words_text_document")
    flags = ["--init-from", str(tmp_path / "hf"), "--data-path", str(tmp_path / "words_text_document"),
             "--data-cache-path", str(tmp_path / "cache"), "--seq-length", "32", "--device", "cpu",
             "--local-rope-theta", "160000", "--attention-dropout", "0.1"] + (["--dry-run"] if dry_run else [])
    cfg = load_config(flags)
    assert (cfg.model.local_rope_theta, cfg.model.attention_dropout) == (160_000.0, 0.1)
    assert (cfg.model.norm_type, cfg.model.sliding_window, cfg.model.prediction_head) == ("layernorm", 5, True)
    from megamlm.config import ConfigError

    with pytest.raises(ConfigError, match="--mlp-bias True contradicts the --init-from"):
        load_config(flags + ["--mlp-bias"])
