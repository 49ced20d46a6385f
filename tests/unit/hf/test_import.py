"""Import: megamlm reproduces the source model's logits; mask token and vocabulary growth; bad input refused."""

import json
from pathlib import Path

import pytest
import torch

from megamlm.checkpoint import load_model_weights
from megamlm.hf.errors import ConversionError
from megamlm.hf.export import export_checkpoint
from megamlm.hf.importer import import_hf, load_hf_weights, model_args_from_hf
from megamlm.model.transformer import Transformer

transformers = pytest.importorskip("transformers")
SHARED = Path(__file__).resolve().parents[3] / ".." / "shared"
QUIET = dict(log=lambda *_: None)


def _load_imported(ckpt: Path) -> Transformer:
    config = json.loads(next(ckpt.glob("iter_*/config.json")).read_text())
    from megamlm.model.config import ModelArgs

    model = Transformer(ModelArgs(**config["model_args"]))
    load_model_weights(ckpt, model)
    return model.eval()


@pytest.mark.parametrize("tie", [True, False])
def test_llama_import_matches_causal_logits(tmp_path, kit, tie):
    hf = kit.save_tiny_llama(tmp_path / "llama", tie=tie)
    import_hf(tmp_path / "llama", tmp_path / "ckpt", **QUIET)
    model = _load_imported(tmp_path / "ckpt")
    vocab = hf.config.vocab_size
    ids = torch.randint(0, vocab, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))
        theirs = hf(input_ids=ids).logits
    assert (ours[..., :vocab] - theirs).abs().max() < 1e-4
    # The tokenizer had no mask token: one was added, and the vocabulary grew to a multiple of 128
    # with the new rows set to the mean row.
    assert model.args.vocab_size == 128
    for name in ("embed_tokens", "lm_head"):
        weight = getattr(model, name).weight.detach()
        assert torch.allclose(weight[vocab:], weight[:vocab].mean(0).expand(128 - vocab, -1))
    assert model.embed_tokens.weight.data_ptr() != model.lm_head.weight.data_ptr()
    from megamlm.data import load_tokenizer

    tokenizer = load_tokenizer(tmp_path / "ckpt" / "tokenizer")
    assert tokenizer.mask_id == vocab and tokenizer.decode([tokenizer.mask_id]) == "<|mask|>"
    record = json.loads(next((tmp_path / "ckpt").glob("iter_*/config.json")).read_text())
    assert record["tokenizer"]["mask_id"] == vocab and record["imported_from"]["mask_added"] is True


def test_load_hf_weights_for_init_from(tmp_path, kit):
    hf = kit.save_tiny_llama(tmp_path / "llama", tie=False, model_type="mistral", sliding_window=None)
    args = model_args_from_hf(tmp_path / "llama", max_seq_length=32)
    assert (args.num_layers, args.hidden_size, args.num_query_groups, args.rope_theta, args.max_seq_length) == \
        (2, 64, 2, 500.0, 32)
    model = Transformer(args)
    load_hf_weights(tmp_path / "llama", model)
    assert torch.equal(model.layers["1"].mlp.down_proj.weight, hf.model.layers[1].mlp.down_proj.weight)
    with pytest.raises(ConversionError, match="build it with model_args_from_hf"):
        load_hf_weights(tmp_path / "llama", Transformer(kit.TINY))


def test_existing_mask_token_is_kept_without_growth(tmp_path, kit):
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = kit.word_tokenizer(with_mask=True)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=32)
    LlamaForCausalLM(config).save_pretrained(str(tmp_path / "m"))
    tokenizer.save_pretrained(str(tmp_path / "m"))
    import_hf(tmp_path / "m", tmp_path / "ckpt", **QUIET)
    record = json.loads(next((tmp_path / "ckpt").glob("iter_*/config.json")).read_text())
    assert record["model_args"]["vocab_size"] == len(tokenizer)
    assert record["tokenizer"]["mask_id"] == tokenizer.convert_tokens_to_ids("<mask>")


def test_llama3_vocabulary_uses_its_first_reserved_token():
    folder = SHARED / "tokenizers" / "llama3"
    if not (folder / "tokenizer.json").is_file():
        pytest.skip(f"Llama 3 tokenizer not found in {folder}")
    from megamlm.hf.tokenizer_files import choose_mask_token

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert choose_mask_token(tokenizer) == ("<|reserved_special_token_0|>", False)
    assert tokenizer.convert_tokens_to_ids("<|reserved_special_token_0|>") == 128002


def test_eurobert_round_trip_keeps_every_weight(tiny_checkpoint, tmp_path):
    save_dir, model = tiny_checkpoint
    export_checkpoint(save_dir, tmp_path / "hf", **QUIET)
    import_hf(tmp_path / "hf", tmp_path / "ckpt", **QUIET)
    back = _load_imported(tmp_path / "ckpt")
    assert back.args == model.args
    for (name, ours), theirs in zip(model.state_dict().items(), back.state_dict().values()):
        assert torch.equal(ours, theirs), name
    # ...and the re-imported checkpoint exports again.
    export_checkpoint(tmp_path / "ckpt", tmp_path / "hf2", **QUIET)
    assert (tmp_path / "hf2" / "model.safetensors").is_file()


def test_tools_round_trip_and_report_errors(tmp_path, kit, capsys):
    import importlib.util

    def tool(name):
        path = Path(__file__).resolve().parents[3] / "tools" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.main

    kit.save_tiny_llama(tmp_path / "llama")
    assert tool("convert_from_hf")(["--input", str(tmp_path / "llama"), "--output", str(tmp_path / "ckpt")]) == 0
    assert tool("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "hf"),
                                  "--dtype", "bf16"]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["mask_token_id"] == 33
    assert tool("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "hf")]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert tool("convert_from_hf")(["--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "c2")]) == 2
    assert "does not exist" in capsys.readouterr().err


# --- bad input: one clear error, nothing written ------------------------------------------------------


def _refused(source: Path, out: Path, match: str) -> None:
    with pytest.raises(ConversionError, match=match):
        import_hf(source, out, **QUIET)
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.tmp*"))


@pytest.mark.parametrize("model_type, overrides, match", [
    ("qwen2", {}, "Qwen2 models carry biases on q_proj/k_proj/v_proj.*add attention biases"),
    ("llama", {"attention_bias": True}, "attention_bias=true"),
    ("llama", {"rope_parameters": {"rope_type": "linear", "rope_theta": 500.0, "factor": 2.0}}, "RoPE type 'linear'"),
    ("llama", {"hidden_act": "gelu"}, "hidden_act='gelu'"),
])
def test_architectures_megamlm_cannot_express(tmp_path, kit, model_type, overrides, match):
    kit.save_tiny_llama(tmp_path / "m", model_type=model_type, **overrides)
    _refused(tmp_path / "m", tmp_path / "ckpt", match)


@pytest.mark.parametrize("weights", ["model.safetensors", "pytorch_model.bin"])
def test_truncated_weights_are_one_line_and_nothing_is_written(tmp_path, kit, capsys, weights):
    import hashlib
    import importlib.util

    spec = importlib.util.spec_from_file_location("convert_from_hf", Path(__file__).resolve().parents[3] / "tools" /
                                                  "convert_from_hf.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    model = kit.save_tiny_llama(tmp_path / "llama")
    if weights == "pytorch_model.bin":
        (tmp_path / "llama" / "model.safetensors").unlink()
        torch.save(model.state_dict(), tmp_path / "llama" / weights)
    path = tmp_path / "llama" / weights
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "llama").iterdir()}
    capsys.readouterr()
    assert tool.main(["--input", str(tmp_path / "llama"), "--output", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read the weights in {path}") and err.count("\n") == 1
    assert "truncated or damaged: download or copy it again" in err
    assert before == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "llama").iterdir()}
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.glob(".ckpt*"))


def test_unsupported_model_type_names_the_supported(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)).save_pretrained(str(tmp_path / "g"))
    _refused(tmp_path / "g", tmp_path / "ckpt", "model_type='gpt2'.*eurobert, llama, mistral, qwen2")


def test_missing_files(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "m")
    (tmp_path / "m" / "model.safetensors").unlink()
    _refused(tmp_path / "m", tmp_path / "ckpt", "config.json but no weights")
    (tmp_path / "empty").mkdir()
    _refused(tmp_path / "empty", tmp_path / "ckpt", "no config.json and no .gguf")


def test_missing_tensor_is_named(tmp_path, kit):
    from safetensors.torch import load_file, save_file

    kit.save_tiny_llama(tmp_path / "m", tie=False)
    weights = load_file(str(tmp_path / "m" / "model.safetensors"))
    del weights["model.layers.1.mlp.up_proj.weight"]
    save_file(weights, str(tmp_path / "m" / "model.safetensors"), metadata={"format": "pt"})
    _refused(tmp_path / "m", tmp_path / "ckpt", r"lacks tensor 'model\.layers\.1\.mlp\.up_proj\.weight'")


def test_config_weights_mismatch_names_the_tensor(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "m")
    config = json.loads((tmp_path / "m" / "config.json").read_text())
    config["intermediate_size"] = 128
    (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    _refused(tmp_path / "m", tmp_path / "ckpt", r"tensor 'model\.layers\.0\.mlp\.\w+_proj\.weight'.* has shape .* but its config implies")


def test_tokenizer_larger_than_the_embedding(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "m", vocab_size=20)
    _refused(tmp_path / "m", tmp_path / "ckpt", "33 ids but the model's embedding has 20 rows")


def test_existing_output_needs_force(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "m")
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(ConversionError, match="already exists; pass --force"):
        import_hf(tmp_path / "m", tmp_path / "ckpt", **QUIET)
    import_hf(tmp_path / "m", tmp_path / "ckpt", force=True, **QUIET)
    assert (tmp_path / "ckpt" / "tokenizer" / "tokenizer.json").is_file()


def test_tensors_already_in_memory_import_the_same(tmp_path, kit):
    hf = kit.save_tiny_llama(tmp_path / "llama")
    import_hf(tmp_path / "llama", tmp_path / "from_files", **QUIET)
    import_hf(tmp_path / "llama", tmp_path / "from_memory", hf_state=hf.state_dict(), **QUIET)
    a, b = _load_imported(tmp_path / "from_files"), _load_imported(tmp_path / "from_memory")
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(x, y), name


def test_gguf_sources_are_located_before_loading(tmp_path):
    from megamlm.hf.hf_source import open_source

    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "m.Q4.gguf").write_bytes(b"GGUF")
    assert open_source(tmp_path / "one").gguf_file == "m.Q4.gguf"
    assert open_source(tmp_path / "one" / "m.Q4.gguf").folder == tmp_path / "one"
    (tmp_path / "one" / "m.Q8.gguf").write_bytes(b"GGUF")
    with pytest.raises(ConversionError, match="several GGUF files.*pass one of them"):
        open_source(tmp_path / "one")
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ConversionError, match="not a .gguf"):
        open_source(tmp_path / "weights.bin")
