"""The frozen-feature linear probe (tools/evaluate.py --probe linear) on tiny models built here."""

import json
import random

import numpy as np
import pytest
from helpers import expect_one_line, save_tiny_llama, tool_main

from megamlm.eval.examples import TaskData, TextExample
from megamlm.eval.frozen import ProbeModel, load_frozen
from megamlm.eval.probe import ProbePlan, ProbeSettings, SplitRows, fit_linear_probe, run_probe, with_random_baselines
from megamlm.eval.probe_features import pooled_features

from .conftest import classification_task, qa_task, tagging_task

pytest.importorskip("sklearn")
pytest.importorskip("transformers")

SETTINGS = ProbeSettings(max_length=32, batch_size=4)


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    """A tiny Llama decoder with its LM head (tied), as an HF folder: what the probe reads like SmolLM2."""
    from .conftest import _tokenizer

    folder = tmp_path_factory.mktemp("decoder")
    tokenizer = _tokenizer("none")
    return save_tiny_llama(folder, tokenizer, max_positions=256)


def marker_task(per_split: dict[str, int]) -> TaskData:
    """The label is which of two marker words opens the text, among three filler words: linearly decodable from
    the mean of any model's states, since the marker's embedding reaches every position's residual stream."""
    fillers = "the cat sat on a mat Elizabeth said that Jane smiled at Bingley".split()
    rng = random.Random(0)
    def examples(n):
        return [TextExample(" ".join([marker, *rng.sample(fillers, 3)]), label)
                for marker, label in [("good", "pos"), ("bad", "neg")] * (n // 2)]
    return TaskData("markers", "sequence_classification", {s: examples(n) for s, n in per_split.items()})


def test_a_separable_feature_set_is_probed_to_100_and_the_majority_class_is_reported():
    rng = np.random.default_rng(0)
    labels = {s: ["a", "b"] * n for s, n in (("train", 40), ("validation", 10), ("test", 20))}
    rows = {}
    for split, gold in labels.items():
        features = rng.normal(size=(len(gold), 8))
        features[:, 3] += np.array([4.0 if g == "a" else -4.0 for g in gold])
        rows[split] = SplitRows(features, gold, lambda p, g=gold: 100.0 * np.mean([x == y for x, y in zip(p, g)]),
                                len(gold), lambda p: {"predictions": list(p)})
    result = fit_linear_probe(rows, (0.01, 1.0))
    assert result["test"] == 100.0 and result["validation"] == 100.0
    assert result["c"] == 0.01  # ties go to the stronger regularisation
    assert result["majority"]["test"] == 50.0 and result["rows"]["train"] == 80


@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
def test_a_tiny_model_probes_a_marker_task_to_about_100(decoder, tmp_path, attention):
    data = marker_task({"train": 40, "validation": 20, "test": 20})
    plan = ProbePlan([ProbeModel("llama", decoder, attention)], {"markers": data}, tmp_path, SETTINGS)
    (row,) = run_probe(plan, log=lambda line: None)
    assert (row["model"], row["attention"], row["task"], row["metric"]) == ("llama", attention, "markers", "accuracy")
    assert row["test"] >= 95.0 and row["majority"]["test"] == 50.0, row
    assert row["rows"] == {"train": 40, "validation": 20, "test": 20} and row["hidden_size"] == 32


def test_a_test_label_that_train_lacks_is_scored_as_wrong_not_refused(decoder, tmp_path):
    data = marker_task({"train": 40, "validation": 20, "test": 20})
    data.splits["test"][:2] = [TextExample("cat cat cat", "other"), TextExample("mat mat mat", "other")]
    plan = ProbePlan([ProbeModel("llama", decoder)], {"markers": data}, tmp_path, SETTINGS)
    (row,) = run_probe(plan, log=lambda line: None)
    assert row["test"] <= 90.0 and row["validation"] >= 95.0, row


def test_rows_for_each_model_attention_and_task_with_the_random_init_baseline(decoder, tmp_path):
    models = with_random_baselines([ProbeModel("llama", decoder, a) for a in ("causal", "bidirectional")])
    assert [(m.name, m.attention, m.random_init) for m in models][2:] == [
        ("random-init", "causal", True), ("random-init", "bidirectional", True)]
    tasks = {"tiny-cls": classification_task(), "tiny-tags": tagging_task(bio=False),
             "tiny-ner": tagging_task(bio=True)}
    plan = ProbePlan(models, tasks, tmp_path, SETTINGS)
    results = run_probe(plan, log=lambda line: None)
    assert len(results) == 4 * 3
    assert {(r["model"], r["attention"], r["task"]) for r in results} == {
        (m, a, t) for m in ("llama", "random-init") for a in ("causal", "bidirectional") for t in tasks}
    ner = next(r for r in results if r["task"] == "tiny-ner")
    assert ner["metric"] == "span_f1" and ner["rows"]["test"] == 12  # one row per word
    table = (tmp_path / "probe_results.md").read_text()
    assert "| random-init | bidirectional | tiny-tags |" in table and "| majority class |" in table
    assert len((tmp_path / "probe_results.csv").read_text().splitlines()) == 1 + 12
    # A rerun skips the finished rows (their files are not rewritten).
    stamp = (tmp_path / "probe" / "llama" / "causal" / "tiny-cls.json").stat().st_mtime_ns
    assert run_probe(plan, log=lambda line: None) == results
    assert (tmp_path / "probe" / "llama" / "causal" / "tiny-cls.json").stat().st_mtime_ns == stamp


def test_each_row_keeps_its_per_example_predictions_and_two_rows_compare_on_the_same_examples(decoder, tmp_path):
    """Issue 45, item 5: a probe row's kept parts give its score back exactly, and two rows (a trained model and the
    random init) compare by McNemar on the same test examples; a word-level task keeps per-sentence parts."""
    from megamlm.eval.metrics import score_from_parts
    from megamlm.eval.paired import compare_runs, read_predictions
    from megamlm.eval.probe import ProbeError, kept_predictions, predictions_path

    tasks = {"markers": marker_task({"train": 40, "validation": 20, "test": 30}), "tiny-tags": tagging_task(bio=False)}
    plan = ProbePlan(with_random_baselines([ProbeModel("llama", decoder)]), tasks, tmp_path, SETTINGS)
    results = run_probe(plan, log=lambda line: None)
    kept = {}
    for row in results:
        path = tmp_path / "probe" / row["model"] / row["attention"] / f"{row['task']}.json"
        assert row["predictions_path"] == predictions_path(path).name
        kept[row["model"], row["task"]] = read_predictions(predictions_path(path))
        for split in ("validation", "test"):
            part = kept[row["model"], row["task"]][split]
            assert float(score_from_parts(part["aggregate"], part["parts"])) == pytest.approx(row[split], abs=1e-9)
    assert len(kept["llama", "markers"]["test"]["ids"]) == 30
    assert kept["llama", "tiny-tags"]["test"]["aggregate"] == "ratio"  # right words, words: per sentence
    paired = compare_runs(kept["llama", "markers"], kept["random-init", "markers"])
    assert paired.test == "McNemar exact" and paired.examples == 30
    llama_markers = next(r for r in results if r["model"] == "llama" and r["task"] == "markers")
    assert kept_predictions(tmp_path, llama_markers) == kept["llama", "markers"]
    # Predictions written under other settings (a rerun stopped between its two files) are not this row's.
    with pytest.raises(ProbeError, match="other settings than its row's result"):
        kept_predictions(tmp_path, {**llama_markers, "fingerprint": "another"})
    assert paired.difference == pytest.approx(
        next(r["test"] for r in results if r["model"] == "llama" and r["task"] == "markers")
        - next(r["test"] for r in results if r["model"] == "random-init" and r["task"] == "markers"))


def test_causal_features_of_a_text_do_not_see_its_later_tokens_and_bidirectional_ones_do(decoder):
    frozen = load_frozen(ProbeModel("llama", decoder))
    ids = frozen.tokenizer(["the cat sat", "the cat mat"])["input_ids"]
    assert ids[0][0] == ids[1][0] and ids[0] != ids[1]  # the same first token, then other tokens
    for causal, same in ((True, True), (False, False)):  # the first token's states
        states = [frozen.hidden_states(*_batch(x), causal)[0, 0] for x in ids]
        assert bool(np.allclose(states[0].numpy(), states[1].numpy(), atol=1e-6)) is same
    # Padding changes nothing: a text pooled alone or beside a longer one gives the same features.
    alone = pooled_features(frozen, [ids[0]], causal=False)
    padded = pooled_features(frozen, [ids[0], ids[0] + ids[1]], causal=False)
    assert np.allclose(alone[0], padded[0], atol=1e-5)


def _batch(ids):
    import torch

    return torch.tensor([ids]), torch.ones(1, len(ids), dtype=torch.long)


def test_a_random_init_model_has_the_shape_and_is_the_same_for_the_same_seed(decoder):
    a = load_frozen(ProbeModel("r", decoder, random_init=True)).model.state_dict()
    b = load_frozen(ProbeModel("r", decoder, random_init=True)).model.state_dict()
    trained = load_frozen(ProbeModel("m", decoder)).model.state_dict()
    assert a.keys() == trained.keys() and all(a[k].shape == trained[k].shape for k in a)
    assert all(bool((a[k] == b[k]).all()) for k in a)
    assert not bool((a["layers.0.mlp.up_proj.weight"] == trained["layers.0.mlp.up_proj.weight"]).all())


def test_the_command_writes_the_tables_of_a_local_task(decoder, tmp_path, capsys):
    status = tool_main("evaluate")(["--probe", "linear", "--probe-attention", "causal,bidirectional", "--model",
                                    f"tiny={decoder}", "--tasks", "austen-novel", "--max-length", "32",
                                    "--max-train-examples", "60", "--max-eval-examples", "12", "--output",
                                    str(tmp_path / "out")])
    assert status == 0, capsys.readouterr().err
    rows = [json.loads(p.read_text()) for p in sorted((tmp_path / "out" / "probe").rglob("*.json"))
            if not p.name.endswith(".predictions.json")]
    assert sorted((r["model"], r["attention"]) for r in rows) == [
        ("random-init", "bidirectional"), ("random-init", "causal"), ("tiny", "bidirectional"), ("tiny", "causal")]
    assert all(r["rows"] == {"train": 60, "validation": 12, "test": 12} for r in rows)
    assert "austen-novel" in (tmp_path / "out" / "probe_results.md").read_text()


@pytest.mark.parametrize("extra,message", [
    (["--tasks", "austen-qa"], "question answering, which the linear probe does not score"),
    (["--tasks", "austen-novel", "--lrs", "1e-4"], "--lrs is a fine-tuning setting"),
    (["--tasks", "austen-novel", "--probe-attention", "sideways"], "attention sideways"),
    (["--tasks", "austen-novel", "--probe-c-grid", "0,1"], "--probe-c-grid"),
    (["--tasks", "austen-novel", "--probe-c-grid", "1,nan"], "--probe-c-grid"),  # issue 42: sklearn's traceback
    (["--tasks", "austen-novel", "--probe-c-grid", "inf"], "--probe-c-grid"),
])
def test_bad_probe_input_is_one_line(decoder, tmp_path, capsys, extra, message):
    status = tool_main("evaluate")(["--probe", "linear", "--model", f"tiny={decoder}", "--output",
                                    str(tmp_path / "out"), *extra])
    expect_one_line(capsys, status, message)
    assert not (tmp_path / "out" / "probe").exists()


def test_probe_flags_without_probe_and_models_megamlm_cannot_hold_are_refused(decoder, tiny_models, tmp_path,
                                                                             capsys):
    status = tool_main("evaluate")(["--model", f"tiny={decoder}", "--tasks", "austen-novel",
                                    "--probe-attention", "causal", "--output", str(tmp_path / "a")])
    expect_one_line(capsys, status, "--probe-attention sets the linear probe; add --probe linear")
    bert = tiny_models["bert"]
    capsys.readouterr()  # building it prints a progress bar
    status = tool_main("evaluate")(["--probe", "linear", "--model", f"bert={bert}", "--tasks",
                                    "austen-novel", "--output", str(tmp_path / "b")])
    expect_one_line(capsys, status, "fine-tune this one without --probe")


def test_a_question_answering_task_is_refused_by_the_plan(decoder, tmp_path):
    from megamlm.eval.probe import ProbeError

    plan = ProbePlan([ProbeModel("llama", decoder)], {"tiny-qa": qa_task()}, tmp_path, SETTINGS)
    with pytest.raises(ProbeError, match="spans of each input"):
        run_probe(plan, log=lambda line: None)


def bundled_tokenizer_checkpoint(folder):
    """A megamlm checkpoint of a tiny model trained (as the Quickstart's) with the bundled tokenizer, whose bare
    tokenizer.json names no special token to transformers: the run's record holds their ids."""
    import torch
    from helpers import tiny_args

    from megamlm.checkpoint import save_checkpoint
    from megamlm.config import Config
    from megamlm.data.embedded import TOKENIZER_FILE
    from megamlm.model.transformer import Transformer

    args = tiny_args(vocab_size=8192, num_layers=1, num_attention_heads=2, max_seq_length=64)
    torch.manual_seed(0)
    model = Transformer(args)
    record = {"config": Config().to_dict(), "model_args": args.to_dict(), "switch_step": None, "seq_length": 64,
              "tokenizer": {"path": str(TOKENIZER_FILE), "vocab_size": 8192, "bos_id": 0, "eos_id": 1, "pad_id": 2,
                            "mask_id": 3}}
    save_checkpoint(folder, 1, model, torch.optim.AdamW(model.parameters()), {}, record)
    return folder


def test_the_probe_scores_a_checkpoint_trained_with_the_bundled_tokenizer(tmp_path, capsys):
    """Issue 42: the Quickstart's own model was refused ("no pad, eos, sep or unk token"): its pad is the run's."""
    ckpt = bundled_tokenizer_checkpoint(tmp_path / "ckpt")
    frozen = load_frozen(ProbeModel("tiny", ckpt))
    assert frozen.tokenizer.convert_tokens_to_ids(frozen.tokenizer.pad_token) == 2
    status = tool_main("evaluate")(["--probe", "linear", "--model", f"tiny={ckpt}", "--tasks", "austen-novel",
                                    "--max-length", "32", "--max-train-examples", "40", "--max-eval-examples", "8",
                                    "--output", str(tmp_path / "out")])
    assert status == 0, capsys.readouterr().err
    assert len(list((tmp_path / "out" / "probe").rglob("*.json"))) == 4  # 2 rows, 2 predictions


@pytest.mark.parametrize("name", ["../evil", ".."])
def test_a_bad_random_init_name_is_refused_before_anything_is_exported(tmp_path, capsys, name):
    """Issue 42: --random-init-baseline ../evil was refused only after the run folder's exports were written."""
    ckpt = bundled_tokenizer_checkpoint(tmp_path / "run")
    status = tool_main("evaluate")(["--model", f"tiny={ckpt}", "--tasks", "austen-novel", "--output",
                                    str(tmp_path / "out"), "--random-init-baseline", name])
    expect_one_line(capsys, status, f"--random-init-baseline {name!r}")
    assert not (tmp_path / "out" / "hf_exports").exists() and not (tmp_path / "evil").exists()


def test_a_task_is_informative_on_validation_scores_and_no_test_score_decides_it():
    """The probe's informative mark (the adaptation report's too) reads validation scores only: a row far ahead on
    test but not on validation leaves its task uninformative, and the reverse marks it informative."""
    from megamlm.eval.probe import informative

    def row(model, random_init, validation, test):
        return {"task": "t", "model": model, "random_init": random_init, "validation": validation, "test": test,
                "majority": {"validation": 50.0, "test": 50.0}, "rows": {"validation": 400, "test": 400}}

    behind_on_validation = [row("m", False, 52.0, 95.0), row("random-init", True, 51.0, 50.0)]
    ahead_on_validation = [row("m", False, 80.0, 50.0), row("random-init", True, 51.0, 90.0)]
    assert informative(behind_on_validation) == {"t": False}
    assert informative(ahead_on_validation) == {"t": True}
