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
    # with the new rows set to the mean row. Tied embeddings stay one parameter.
    assert model.args.vocab_size == 128
    for name in ("embed_tokens", "lm_head"):
        weight = getattr(model, name).weight.detach()
        assert torch.allclose(weight[vocab:], weight[:vocab].mean(0).expand(128 - vocab, -1))
    assert model.args.tie_word_embeddings == tie
    assert (model.embed_tokens.weight is model.lm_head.weight) == tie
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
    from helpers import tool_main as tool

    kit.save_tiny_llama(tmp_path / "llama")
    assert tool("convert_from_hf")(["--input", str(tmp_path / "llama"), "--output", str(tmp_path / "ckpt")]) == 0
    assert tool("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "hf"),
                                  "--dtype", "bf16"]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["mask_token_id"] == 33
    assert tool("convert_to_hf")(["--input", str(tmp_path / "ckpt"), "--output", str(tmp_path / "hf")]) == 2
    assert "already exists; pass --force" in capsys.readouterr().err
    assert tool("convert_from_hf")(["--input", str(tmp_path / "nothing"), "--output", str(tmp_path / "c2")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "blocker").write_text("a file")  # an output it cannot write (issue 22): one line naming the path
    assert tool("convert_from_hf")(["--input", str(tmp_path / "llama"),
                                    "--output", str(tmp_path / "blocker" / "c")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "blocker") in err and err.count("\n") == 1, err
    assert tool("convert_from_hf")(["--input", str(tmp_path / "llama"), "--output", str(tmp_path / "c3"),
                                    "--untie-embeddings", "--mask-token", "sister"]) == 0
    record = json.loads(next((tmp_path / "c3").glob("iter_*/config.json")).read_text())
    assert record["model_args"]["tie_word_embeddings"] is False and record["imported_from"]["mask_token"] == "sister"
    assert tool("convert_from_hf")(["--input", str(tmp_path / "llama"), "--output", str(tmp_path / "c4"),
                                    "--mask-token", "</s>"]) == 2
    assert "is also the tokenizer's eos token" in capsys.readouterr().err


# --- bad input: one clear error, nothing written ------------------------------------------------------


def _refused(source: Path, out: Path, match: str, **kwargs) -> None:
    with pytest.raises(ConversionError, match=match):
        import_hf(source, out, **QUIET, **kwargs)
    assert not out.exists() and not list(out.parent.glob(f".{out.name}.tmp*"))


@pytest.mark.parametrize("model_type, overrides, match", [
    ("qwen3_moe", {"head_dim": 16}, "model_type='qwen3_moe' uses a mixture-of-experts MLP"),
    ("gemma2", {"head_dim": 16, "hidden_activation": "gelu_pytorch_tanh"}, "model_type='gemma2' uses attention and "
                                                                           "final logit soft-capping"),
    ("mixtral", {}, "model_type='mixtral' uses a mixture-of-experts MLP"),
    ("llama", {"mlp_bias": True}, "mlp_bias=true"),
    ("llama", {"rope_parameters": {"rope_type": "dynamic", "rope_theta": 500.0, "factor": 2.0}}, "RoPE type 'dynamic'"),
    ("llama", {"rope_parameters": {"rope_type": "default", "rope_theta": 500.0, "partial_rotary_factor": 0.5}},
     "partial_rotary_factor=0.5"),
    ("llama", {"hidden_act": "gelu"}, "hidden_act='gelu'"),
])
def test_architectures_megamlm_cannot_express(tmp_path, kit, model_type, overrides, match):
    kit.save_tiny_llama(tmp_path / "m", model_type=model_type, **overrides)
    _refused(tmp_path / "m", tmp_path / "ckpt", match)


def test_sliding_window_longer_than_the_run_is_refused(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "m", model_type="mistral", sliding_window=16)
    with pytest.raises(ConversionError, match="sliding window of 16 tokens.*--seq-length 16 or less"):
        import_hf(tmp_path / "m", tmp_path / "ckpt", max_seq_length=32, **QUIET)
    import_hf(tmp_path / "m", tmp_path / "ckpt", **QUIET)  # the window caps the default context: same model
    assert json.loads(next((tmp_path / "ckpt").glob("iter_*/config.json")).read_text())["seq_length"] == 16


@pytest.mark.parametrize("weights,damage", [("model.safetensors", "truncated"), ("pytorch_model.bin", "truncated"),
                                            ("pytorch_model.bin", "garbage"), ("pytorch_model.bin", "pickle"),
                                            ("pytorch_model.bin", "crafted")])
def test_truncated_weights_are_one_line_and_nothing_is_written(tmp_path, kit, capsys, weights, damage):
    import hashlib

    from helpers import load_tool

    tool = load_tool("convert_from_hf")
    model = kit.save_tiny_llama(tmp_path / "llama")
    if weights == "pytorch_model.bin":
        (tmp_path / "llama" / "model.safetensors").unlink()
        torch.save(model.state_dict(), tmp_path / "llama" / weights)
    path = tmp_path / "llama" / weights
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "garbage":  # UnpicklingError, not a RuntimeError (issue 22)
        path.write_bytes(b"not a pickle at all" * 8)
    elif damage == "pickle":  # a plain pickle of something other than tensors: weights_only refuses it
        import pickle
        path.write_bytes(pickle.dumps({"model.embed_tokens.weight": Path("x")}))
    else:  # issue 31, item 11: torch.save's zip format asking to call a function; refused, and nothing runs
        torch.save({"model.embed_tokens.weight": _Crafted(tmp_path / "ran")}, path)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "llama").iterdir()}
    capsys.readouterr()
    assert tool.main(["--input", str(tmp_path / "llama"), "--output", str(tmp_path / "ckpt")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: cannot read the weights in {path}") and err.count("\n") == 1, err
    if damage == "crafted":
        assert "weights_only loading refused it" in err and "nothing in it was run" in err, err
        assert not (tmp_path / "ran").exists()
    else:
        assert "truncated, damaged or not plain tensors: download or copy it again" in err
    assert before == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "llama").iterdir()}
    assert not (tmp_path / "ckpt").exists() and not list(tmp_path.glob(".ckpt*"))


class _Crafted:
    """Pickles as a call to Path.touch: what a malicious checkpoint does, harmless here (and refused)."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (self.path,))


def test_unsupported_model_type_names_the_supported(tmp_path):
    from transformers import GPT2Config, GPT2LMHeadModel

    GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=50)).save_pretrained(str(tmp_path / "g"))
    _refused(tmp_path / "g", tmp_path / "ckpt", "model_type='gpt2'.*eurobert, gemma3, gemma3_text, llama, mistral, "
                                                "modernbert, modernbert-decoder, qwen2, qwen3")


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
    _refused(tmp_path / "m", tmp_path / "ckpt", r"tensor 'model\.layers\.0\.mlp\.\w+_proj\.weight'.* has shape .* but "
                                                r"its config implies")


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


def test_untie_embeddings_gives_the_head_its_own_copy(tmp_path, kit):
    hf = kit.save_tiny_llama(tmp_path / "llama", tie=True)
    import_hf(tmp_path / "llama", tmp_path / "ckpt", untie=True, **QUIET)
    model = _load_imported(tmp_path / "ckpt")
    assert not model.args.tie_word_embeddings and model.lm_head.weight is not model.embed_tokens.weight
    assert torch.equal(model.lm_head.weight, model.embed_tokens.weight)
    ids = torch.randint(3, hf.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))[..., :hf.config.vocab_size]
        assert (ours - hf(input_ids=ids).logits).abs().max() < 1e-4


def test_mask_token_choice_and_collisions(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "m")
    import_hf(tmp_path / "m", tmp_path / "chosen", mask_token="sister", **QUIET)  # --mask-token: an existing token
    record = json.loads(next((tmp_path / "chosen").glob("iter_*/config.json")).read_text())
    assert record["imported_from"]["mask_token"] == "sister" and record["model_args"]["vocab_size"] == 33
    _refused(tmp_path / "m", tmp_path / "ckpt", "mask token '</s>' .* is also the tokenizer's eos token.*--mask-token",
                  mask_token="</s>")
    tokenizer_config = tmp_path / "m" / "tokenizer_config.json"  # a tokenizer whose own mask token is its bos
    tokenizer_config.write_text(json.dumps({**json.loads(tokenizer_config.read_text()), "mask_token": "<s>"}))
    _refused(tmp_path / "m", tmp_path / "ckpt", "mask token '<s>' .* is also the tokenizer's bos token")


def _write_gguf(path: Path, quant: str = "F32", rope_freqs: bool = False, scaling: str | None = None) -> Path:
    import numpy as np

    gguf = pytest.importorskip("gguf")
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_context_length(32)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(2)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    if scaling:
        writer.add_string("llama.rope.scaling.type", scaling)
    writer.add_tensor("token_embd.weight", np.zeros((16, 32), dtype=np.float32))
    qtype = getattr(gguf.GGMLQuantizationType, quant)
    if quant == "F32":
        writer.add_tensor("blk.0.attn_q.weight", np.zeros((32, 32), dtype=np.float32))
    else:
        row_bytes = 32 // gguf.GGML_QUANT_SIZES[qtype][0] * gguf.GGML_QUANT_SIZES[qtype][1]
        writer.add_tensor("blk.0.attn_q.weight", np.zeros((32, row_bytes), dtype=np.uint8), raw_dtype=qtype)
    if rope_freqs:
        writer.add_tensor("rope_freqs.weight", np.ones(8, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("kind, match", [
    (dict(quant="Q8_1"), "tensor blk.0.attn_q.weight is quantized as Q8_1, which the gguf package cannot dequantize"),
    (dict(rope_freqs=True), "stores RoPE frequency factors .*rope_freqs.*import the model's safetensors folder"),
    (dict(scaling="linear"), "declares RoPE scaling 'linear' .*ignores"),
])
def test_gguf_that_would_load_wrongly_is_refused_before_loading(tmp_path, kind, match):
    source = _write_gguf(tmp_path / "m.gguf", **kind)
    _refused(source, tmp_path / "ckpt", match)
    from megamlm.hf.hf_source import check_gguf, open_source

    check_gguf(open_source(_write_gguf(tmp_path / "fine.gguf", quant="Q8_0")))  # a dequantizable file passes


@pytest.mark.parametrize("layout", ["safetensors_shards", "bin_shards", "base_model_names"])
def test_sharded_and_renamed_weights_import_the_same(tmp_path, kit, layout):
    hf = kit.save_tiny_llama(tmp_path / "one", tie=False)
    folder = tmp_path / layout
    if layout == "safetensors_shards":
        hf.save_pretrained(str(folder), max_shard_size="50KB")
    else:
        folder.mkdir()
        (tmp_path / "one" / "config.json").rename(folder / "config.json")
        state = {k: v.clone() for k, v in hf.state_dict().items()}
        if layout == "bin_shards":  # the older torch.save format, in two shards with an index
            names = sorted(state)
            halves = {"pytorch_model-00001-of-00002.bin": names[::2], "pytorch_model-00002-of-00002.bin": names[1::2]}
            for file, keys in halves.items():
                torch.save({k: state[k] for k in keys}, folder / file)
            weight_map = {k: file for file, keys in halves.items() for k in keys}
            (folder / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
        else:  # a base model's names, without the "model." prefix
            from safetensors.torch import save_file

            save_file({k.removeprefix("model."): v for k, v in state.items()}, str(folder / "model.safetensors"))
    kit.word_tokenizer().save_pretrained(str(folder))
    assert layout != "safetensors_shards" or len(list(folder.glob("model-*.safetensors"))) > 1
    import_hf(folder, tmp_path / "ckpt", **QUIET)
    model = _load_imported(tmp_path / "ckpt")
    ids = torch.randint(3, hf.config.vocab_size, (1, 12), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        ours = model.logits(model(ids, causal=True))[..., :hf.config.vocab_size]
        assert (ours - hf(input_ids=ids).logits).abs().max() < 1e-4


def test_the_printed_command_trains_what_was_imported(tmp_path, kit, capsys):
    """Issue 23, item 3: every shape and sequence flag, values as the source writes them (a GGUF's float32
    1e-05 read back as 9.999999747378752e-06 prints as 1e-05), and the printed command's dry run reports the
    imported shape and length."""
    import shlex

    import numpy as np

    from megamlm.cli import main as pretrain_main

    float32_eps = float(np.float32(1e-5))
    assert repr(float32_eps) == "9.999999747378752e-06"
    kit.save_tiny_llama(tmp_path / "llama", rms_norm_eps=float32_eps, max_position_embeddings=96)
    lines = []
    import_hf(tmp_path / "llama", tmp_path / "ckpt", log=lines.append)
    command = lines[-1].split("\n", 1)[1].split(" --data-path <")[0]
    words = shlex.split(command)[2:]  # after `python pretrain.py`
    assert words[words.index("--norm-epsilon") + 1] == "1e-05"
    assert words[words.index("--seq-length") + 1] == "96"
    for flag in ("--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads",
                 "--num-query-groups", "--vocab-size", "--rope-theta", "--tie-word-embeddings"):
        assert flag in words, flag
    record = json.loads(next((tmp_path / "ckpt").glob("iter_*/config.json")).read_text())
    assert record["model_args"]["norm_epsilon"] == 1e-05
    capsys.readouterr()
    assert pretrain_main([*words, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 layers, hidden 64" in out and "seq 96" in out, out


def test_convert_from_hf_help_names_every_imported_family_from_the_key_maps():
    """Issue 31, item 8: --help lists what the importer imports (Qwen3 and Gemma 3 included), read from the key
    maps' declaration, so the two cannot drift apart."""
    import importlib.util

    from megamlm.hf.keymaps import EXPORT_ARCHS

    spec = importlib.util.spec_from_file_location("convert_from_hf_help", Path(__file__).resolve().parents[3] /
                                                  "tools" / "convert_from_hf.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    flat = " ".join(tool.build_parser().format_help().split())
    imported = [m for m in EXPORT_ARCHS.values() if m.model_types]
    assert {"qwen3", "gemma3"} <= {m.name for m in imported}
    for keymap in imported:
        assert keymap.families and " ".join(keymap.families.split()) in flat, keymap.name
    assert "Qwen3" in flat and "Gemma 3" in flat and "GGUF" in flat


def test_the_printed_command_continues_pretraining_with_a_cpt_recipe(tmp_path, kit):
    """Issue 31, item 9: the printed command re-warms a small LR (the source named in the line), not the tiny
    preset's from-scratch 3e-3 without warmup."""
    import shlex

    from megamlm.config import parse_args, warmup_iters, wsd_decay_iters

    kit.save_tiny_llama(tmp_path / "llama")
    lines = []
    import_hf(tmp_path / "llama", tmp_path / "ckpt", log=lines.append)
    said, command = lines[-1].split("\n", 1)
    assert "arXiv 2403.08763" in said and "warmup" in said, said
    words = shlex.split(command.split(" --data-path <")[0])[2:]
    cfg = parse_args([*words, "--train-iters", "200"])
    assert cfg.training.lr <= 1e-4 and warmup_iters(cfg.training) == 20 and wsd_decay_iters(cfg.training) == 40
