"""`pretrain --init-from <Hugging Face folder>`: imported once, shape and tokenizer adopted, weights loaded."""

import json
import random

import pytest
import torch
from step_recorder import StepRecorder

from megamlm.cli import load_config
from megamlm.config import ConfigError
from megamlm.training.trainer import pretrain

transformers = pytest.importorskip("transformers")


def _word_corpus(prefix, kit, documents=40):
    from helpers import write_dataset

    tokenizer = kit.word_tokenizer()
    rng = random.Random(0)
    texts = [" ".join(rng.choice(kit.WORDS) for _ in range(rng.randint(10, 30))) for _ in range(documents)]
    write_dataset(prefix, [tokenizer(text)["input_ids"] + [tokenizer.eos_token_id] for text in texts], "int32")


def test_pretrain_init_from_hf_folder(tmp_path, kit):
    hf = kit.save_tiny_llama(tmp_path / "llama", tie=True)
    _word_corpus(tmp_path / "words_text_document", kit)
    flags = ["--init-from", str(tmp_path / "llama"), "--data-path", str(tmp_path / "words_text_document"),
             "--data-cache-path", str(tmp_path / "cache"), "--seq-length", "32", "--objective", "mlm",
             "--train-iters", "2", "--micro-batch-size", "2", "--global-batch-size", "2", "--lr", "1e-9",
             "--weight-decay", "0", "--lr-warmup-iters", "0", "--lr-wsd-decay-iters", "0", "--device", "cpu",
             "--save", str(tmp_path / "run")]
    cfg = load_config(flags)
    recorder = StepRecorder()
    pretrain(cfg, on_step=recorder)
    assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.model.vocab_size) == (2, 64, 128)
    assert "hf-imports" in cfg.checkpoint.init_from and cfg.data.tokenizer_model.endswith("tokenizer.json")
    assert all(loss == loss for loss in recorder.losses.values()) and len(recorder.losses) == 2
    # The run started from the Hugging Face weights (an lr of 1e-9 leaves them where they were).
    from megamlm.checkpoint import load_model_weights
    from megamlm.hf.megamlm_checkpoint import read_record
    from megamlm.model.transformer import Transformer

    model = Transformer(read_record(tmp_path / "run").model_args)
    load_model_weights(tmp_path / "run", model)
    assert torch.allclose(model.layers["0"].self_attn.q_proj.weight, hf.model.layers[0].self_attn.q_proj.weight,
                          atol=1e-6)
    from megamlm.hf.export import export_checkpoint

    export_checkpoint(tmp_path / "run", tmp_path / "hf", log=lambda *_: None)
    card = (tmp_path / "hf" / "README.md").read_text()
    assert f"Continued pretraining from: {cfg.checkpoint.init_from}" in card and "Steps: 2" in card
    # A second run reuses the import instead of converting again.
    again = load_config(flags[:-2] + ["--save", str(tmp_path / "run2")])
    pretrain(again)
    assert again.checkpoint.init_from == cfg.checkpoint.init_from
    assert len(list((tmp_path / "cache" / "hf-imports").iterdir())) == 1


def test_init_from_hf_needs_data_and_a_consistent_shape(tmp_path, kit):
    kit.save_tiny_llama(tmp_path / "llama")
    with pytest.raises(ConfigError, match="bundled corpus is tokenized with megamlm's own tokenizer"):
        pretrain(load_config(["--init-from", str(tmp_path / "llama"), "--train-iters", "2"]))
    _word_corpus(tmp_path / "w_text_document", kit)
    with pytest.raises(ConfigError, match="--num-layers 3 contradicts the --init-from model, which has 2"):
        pretrain(load_config(["--init-from", str(tmp_path / "llama"), "--num-layers", "3", "--train-iters", "2",
                             "--data-path", str(tmp_path / "w_text_document"),
                             "--data-cache-path", str(tmp_path / "cache")]))


def test_hf_models_are_told_apart_from_megamlm_checkpoints(tmp_path, kit, tiny_checkpoint):
    from megamlm.hf.hf_source import is_hf_model

    save_dir, _ = tiny_checkpoint
    kit.save_tiny_llama(tmp_path / "llama")
    (tmp_path / "q.gguf").write_bytes(b"GGUF")
    assert is_hf_model(tmp_path / "llama") and is_hf_model(tmp_path / "q.gguf")
    assert not is_hf_model(save_dir) and not is_hf_model(save_dir / "iter_0000007")
    assert not is_hf_model(tmp_path / "missing")


def test_pretrain_init_from_a_qwen2_folder_keeps_its_features_and_exports_as_eurobert(tmp_path, kit):
    """Qwen2.5-shaped (q/k/v biases, tied embeddings, YaRN): imported by --init-from, trained with MLM, exported as
    native EuroBERT whose bidirectional logits are the trained model's."""
    from decoder_families import FAMILIES, build, word_ids
    from helpers import write_dataset

    from megamlm.hf.export import export_checkpoint
    from megamlm.hf.megamlm_checkpoint import load_model, read_record

    family = FAMILIES["qwen2.5"]
    build(family, tmp_path / "qwen")
    write_dataset(tmp_path / "words_text_document", [word_ids(family, 1, 30, seed=k)[0].tolist() + [0]
                                                     for k in range(40)], "int32")
    cfg = load_config(["--init-from", str(tmp_path / "qwen"), "--data-path", str(tmp_path / "words_text_document"),
                      "--data-cache-path", str(tmp_path / "cache"), "--seq-length", "32", "--objective", "mlm",
                      "--train-iters", "2", "--micro-batch-size", "2", "--global-batch-size", "2", "--lr", "1e-3",
                      "--lr-warmup-iters", "0", "--lr-wsd-decay-iters", "0", "--device", "cpu",
                      "--save", str(tmp_path / "run")])
    pretrain(cfg)
    assert (cfg.model.attention_bias, cfg.model.tie_word_embeddings) == (True, True)
    assert json.loads(cfg.model.rope_scaling)["rope_type"] == "yarn"
    trained = load_model(read_record(tmp_path / "run"))
    assert trained.args.attention_bias and trained.args.tie_word_embeddings and trained.args.rope_scaling
    out = export_checkpoint(tmp_path / "run", tmp_path / "eurobert", log=lambda *_: None)
    hf, info = transformers.AutoModelForMaskedLM.from_pretrained(str(out), output_loading_info=True)
    assert (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    ids = word_ids(family, 2, 24, seed=99)
    with torch.no_grad():
        assert (hf.eval()(input_ids=ids).logits - trained.logits(trained(ids, causal=False))).abs().max() < 1e-4


def test_init_from_a_model_made_for_fewer_positions_than_seq_length_warns(tmp_path, kit, capsys):
    kit.save_tiny_llama(tmp_path / "llama")  # max_position_embeddings 64
    _word_corpus(tmp_path / "words_text_document", kit, documents=80)
    flags = ["--init-from", str(tmp_path / "llama"), "--data-path", str(tmp_path / "words_text_document"),
             "--data-cache-path", str(tmp_path / "cache"), "--train-iters", "1", "--micro-batch-size", "1",
             "--global-batch-size", "1", "--device", "cpu"]
    pretrain(load_config([*flags, "--seq-length", "64"]))
    assert "positions beyond" not in capsys.readouterr().out
    pretrain(load_config([*flags, "--seq-length", "128"]))
    out = capsys.readouterr().out
    assert "warning: the --init-from model" in out and "made for at most 64 positions (max_position_embeddings) " \
                                                       "and --seq-length is 128" in out
    assert "pass --seq-length 64" in out


def test_pretrain_init_from_a_gemma3_folder_with_document_masks_exports_a_bidirectional_gemma3(tmp_path):
    """Gemma 3-shaped (sliding windows of 5 < 32 tokens beside full layers, four norms, GeGLU, scaled embeddings):
    imported by --init-from, trained with MLM under --document-mask, exported by default as a bidirectional Gemma 3
    whose hidden states are the trained model's."""
    from decoder_families import QK_NORM_FAMILIES, build, word_ids
    from helpers import write_dataset

    from megamlm.hf.export import export_checkpoint
    from megamlm.hf.megamlm_checkpoint import load_model, read_record

    family = QK_NORM_FAMILIES["gemma3"]
    build(family, tmp_path / "gemma")
    write_dataset(tmp_path / "words_text_document", [word_ids(family, 1, 12, seed=k)[0].tolist() + [1]
                                                     for k in range(60)], "int32")  # several documents a sample
    cfg = load_config(["--init-from", str(tmp_path / "gemma"), "--data-path", str(tmp_path / "words_text_document"),
                      "--data-cache-path", str(tmp_path / "cache"), "--seq-length", "32", "--objective", "mlm",
                      "--document-mask", "--train-iters", "2", "--micro-batch-size", "2", "--global-batch-size", "2",
                      "--lr", "1e-3", "--lr-warmup-iters", "0", "--lr-wsd-decay-iters", "0", "--device", "cpu",
                      "--save", str(tmp_path / "run")])
    recorder = StepRecorder()
    pretrain(cfg, on_step=recorder)
    assert all(loss == loss for loss in recorder.losses.values()) and len(recorder.losses) == 2
    assert (cfg.model.sliding_window, cfg.model.layer_types) == (5, "sliding,sliding,full,sliding")
    assert cfg.model.qk_norm and cfg.model.sublayer_output_norms and cfg.model.mlp_activation == "geglu"
    trained = load_model(read_record(tmp_path / "run"))
    out = export_checkpoint(tmp_path / "run", tmp_path / "encoder", log=lambda *_: None)
    hf, info = transformers.AutoModel.from_pretrained(str(out), output_loading_info=True)
    assert type(hf).__name__ == "Gemma3TextModel" and (info["missing_keys"], info["unexpected_keys"]) == (set(), set())
    ids = word_ids(family, 2, 24, seed=99)
    with torch.no_grad():
        assert (hf.eval()(input_ids=ids).last_hidden_state - trained(ids, causal=False)).abs().max() < 1e-4


def test_init_from_a_megamlm_checkpoint_adopts_its_shape_and_tokenizer(tmp_path, kit, capsys):
    """Issue 42: README's recipe `pretrain.py --init-from /ckpt/smollm2 --objective mntp ...` without the model flags
    convert_from_hf.py printed trained the default shape and ended in DCP's size-mismatch traceback. The shape (and
    the import's tokenizer) now come from the checkpoint, as for a Hugging Face folder; a flag that contradicts it is
    one line, exit 2, before any work."""
    from helpers import expect_one_line

    from megamlm.cli import main
    from megamlm.hf.importer import import_hf

    hf = kit.save_tiny_llama(tmp_path / "llama", tie=True)
    import_hf(tmp_path / "llama", tmp_path / "imported", log=lambda *_: None)
    _word_corpus(tmp_path / "words_text_document", kit)
    flags = ["--init-from", str(tmp_path / "imported"), "--data-path", str(tmp_path / "words_text_document"),
             "--data-cache-path", str(tmp_path / "cache"), "--seq-length", "32", "--objective", "mntp",
             "--train-iters", "2", "--micro-batch-size", "2", "--global-batch-size", "2", "--lr", "1e-9",
             "--weight-decay", "0", "--lr-warmup-iters", "0", "--lr-wsd-decay-iters", "0", "--device", "cpu"]
    cfg = load_config([*flags, "--save", str(tmp_path / "run")])
    assert (cfg.model.num_layers, cfg.model.hidden_size, cfg.model.vocab_size, cfg.model.tie_word_embeddings) == \
        (2, 64, 128, True)
    assert cfg.data.tokenizer_model == str(tmp_path / "imported" / "tokenizer" / "tokenizer.json")
    pretrain(cfg)
    from megamlm.checkpoint import load_model_weights
    from megamlm.hf.megamlm_checkpoint import read_record
    from megamlm.model.transformer import Transformer

    model = Transformer(read_record(tmp_path / "run").model_args)
    load_model_weights(tmp_path / "run", model)
    assert torch.allclose(model.layers["0"].self_attn.q_proj.weight, hf.model.layers[0].self_attn.q_proj.weight,
                          atol=1e-6)
    # a run's own checkpoint lends its shape the same way, and a contradicting shape flag is one line
    assert load_config(["--init-from", str(tmp_path / "run"), *flags[2:]]).model.hidden_size == 64
    capsys.readouterr()
    status = main(["--init-from", str(tmp_path / "run"), "--hidden-size", "32", *flags[2:]])
    expect_one_line(capsys, status, "--hidden-size 32 contradicts the --init-from checkpoint", "which has 64",
                    "drop the flag")
