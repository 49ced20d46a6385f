"""Every task type on a tiny model: one training step, then the metric on validation and test."""

import pytest
import torch

from megamlm.eval.finetune import Hyperparameters, run_finetuning
from megamlm.eval.model_io import load_encoder, load_tokenizer
from megamlm.eval.tasks import TaskSettings, build_task
from megamlm.eval.tasks.token_classification import IGNORE, subtoken_words

from .conftest import classification_task, qa_task, retrieval_task, tagging_task

ONE_STEP = Hyperparameters(lr=1e-3, seed=0, batch_size=4, max_steps=1)
SETTINGS = TaskSettings(max_length=64, max_query_length=16, doc_stride=16, eval_batch_size=4)


def _run(model_dir, data, settings=SETTINGS):
    tokenizer = load_tokenizer(model_dir)
    task = build_task(data, tokenizer, settings)
    result = run_finetuning(task, lambda: load_encoder(model_dir), ONE_STEP, torch.device("cpu"))
    assert result["steps"] == result["steps_done"] == 1 and result["diverged_at_step"] is None
    assert result["first_loss"] > 0
    return task, result


@pytest.mark.parametrize("arch", ["bert", "eurobert", "llama", "gemma3"])
@pytest.mark.parametrize("pairs", [False, True])
def test_sequence_classification(tiny_models, arch, pairs):
    task, result = _run(tiny_models[arch], classification_task(pairs))
    assert task.labels == ["neg", "pos"]
    for split in ("validation", "test"):
        # 6 examples: accuracy is a multiple of 1/6.
        assert result[split]["score"] == result[split]["accuracy"]
        assert round(result[split]["accuracy"] / (100 / 6), 6) == round(result[split]["accuracy"] / (100 / 6))


@pytest.mark.parametrize("arch", ["bert", "llama"])
def test_token_classification_uses_span_f1_for_bio_and_accuracy_otherwise(tiny_models, arch):
    task, result = _run(tiny_models[arch], tagging_task(bio=True))
    assert task.metric == "span_f1" and result["test"]["score"] == result["test"]["span_f1"]
    assert 0 <= result["test"]["span_f1"] <= 100 and result["test"]["words_not_reached"] == 0
    task, result = _run(tiny_models[arch], tagging_task(bio=False))
    assert task.metric == "accuracy" and "span_f1" not in result["test"]
    assert round(result["test"]["accuracy"] / (100 / 11), 6) == round(result["test"]["accuracy"] / (100 / 11))


@pytest.mark.parametrize("arch", ["bert", "llama"])
def test_every_subtoken_carries_its_words_label(tiny_models, arch):
    tokenizer = load_tokenizer(tiny_models[arch])
    words = ["Netherfield", "Park", "xyzzyq"]  # the last word is split into several byte-level pieces
    ids, owners = subtoken_words(words, tokenizer, max_length=64)
    assert sorted({w for w in owners if w >= 0}) == [0, 1, 2]
    assert owners.count(2) > 1 and len(ids) > len(words)
    assert [w for w in owners if w >= 0] == sorted(w for w in owners if w >= 0)  # words in order
    task = build_task(tagging_task(bio=True), tokenizer, SETTINGS)
    (ids, labels), sentence = task.train_features()[0], task.data.splits["train"][0]
    _, owners = task.encode_split("train")[0]
    assert [label for label, w in zip(labels, owners) if w < 0] == [IGNORE] * sum(w < 0 for w in owners)
    assert all(task.labels[label] == sentence.tags[w] for label, w in zip(labels, owners) if w >= 0)
    # Truncation: the words that do not fit get no position.
    _, short = subtoken_words(words * 20, tokenizer, max_length=8)
    assert 0 < len({w for w in short if w >= 0}) < 60


def test_eurobert_inputs_are_text_and_eos_without_template(tiny_models):
    tokenizer = load_tokenizer(tiny_models["eurobert"])
    task = build_task(classification_task(), tokenizer, SETTINGS, model_path=tiny_models["eurobert"])
    assert task.settings.eurobert_inputs and task.settings.max_length == 64
    ids = task.encode_split("train")[0]
    assert ids[-1] == tokenizer.eos_token_id and ids[0] != tokenizer.bos_token_id
    assert ids == tokenizer("good film", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    bos = build_task(classification_task(), tokenizer, TaskSettings(max_length=64, classifier_pooling="bos"),
                     model_path=tiny_models["eurobert"])
    assert bos.encode_split("train")[0] == [tokenizer.bos_token_id] + ids
    protocol = build_task(classification_task(), tokenizer, TaskSettings(), model_path=tiny_models["eurobert"])
    assert protocol.settings.max_length == round(0.99 * 256)  # 99% of max_position_embeddings


@pytest.mark.parametrize("arch", ["bert", "eurobert", "llama"])
def test_question_answering_spans_and_no_answer(tiny_models, arch):
    # doc_stride/max_length small enough that the context is split into several windows.
    task, result = _run(tiny_models[arch], qa_task(), TaskSettings(max_length=24, max_query_length=8, doc_stride=8))
    windows = task._windows_of("train")
    assert len(windows) > 3
    context = task.data.splits["train"][0].context
    for w in windows:
        answers = task.data.splits["train"][w.example].answers
        if w.start:  # target span text equals the answer text
            text = context[w.offsets[w.start][0]:w.offsets[w.end][1]].strip()
            assert text == answers[0][0]
        else:
            assert w.end == 0
    # Every answerable question is labelled in at least one window; the no-answer one in none.
    labelled = {w.example for w in windows if w.start}
    assert labelled == {0, 1}
    scores = result["test"]
    assert scores["score"] == scores["f1"] and "no_ans_exact" in scores and "has_ans_f1" in scores


def test_qa_decoding_respects_max_answer_length(tiny_models):
    tokenizer = load_tokenizer(tiny_models["bert"])
    task = build_task(qa_task(), tokenizer,
                      TaskSettings(max_length=64, max_query_length=16, doc_stride=16, max_answer_length=2))
    window = task._windows_of("test")[0]
    context = [k for k, o in enumerate(window.offsets) if o is not None]
    start = [-100.0] * len(window.input_ids)
    end = [0.0] * len(window.input_ids)
    start[context[0]], end[context[5]], end[context[1]] = 10.0, 20.0, 5.0
    score, s, e = task._best_span(window, start, end)
    assert (s, e) == (context[0], context[1]) and score == 15.0


@pytest.mark.parametrize("arch", ["bert", "eurobert"])
def test_retrieval(tiny_models, arch):
    task, result = _run(tiny_models[arch], retrieval_task())
    scores = result["test"]
    assert scores["score"] == scores["ndcg@10"] and scores["queries"] == 3 and scores["documents"] == 4
    # With 4 documents every relevant one is in the top 10: MRR >= 1/4 and NDCG > 0 for each query.
    assert scores["mrr@10"] >= 25.0 and scores["ndcg@10"] > 0



def test_the_default_doc_stride_fits_short_windows(tiny_models):
    """The protocol's 128-token overlap where a window has room for it, half the room left for context otherwise;
    a stride given that leaves no room is refused."""
    from megamlm.eval.readers import TaskDataError

    tokenizer = load_tokenizer(tiny_models["bert"])
    special = tokenizer.num_special_tokens_to_add(pair=True)
    short = build_task(qa_task(), tokenizer, TaskSettings(max_length=64, max_query_length=16))
    assert short.doc_stride == (64 - 16 - 1 - special) // 2
    assert short._windows_of("test")
    long = build_task(qa_task(), tokenizer, TaskSettings(max_length=512, max_query_length=64))
    assert long.doc_stride == 128
    with pytest.raises(TaskDataError, match="use --doc-stride below"):
        build_task(qa_task(), tokenizer, TaskSettings(max_length=64, max_query_length=16, doc_stride=60))
