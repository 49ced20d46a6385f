"""The trivial baselines on tiny hand-made tasks, each against a score computed by hand, and tools/evaluate.py's
--random-init-baseline: a random model of the evaluated model's shape fine-tuned beside it, and the baselines' rows."""

import json
import re
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from megamlm.eval import baselines
from megamlm.eval.examples import QAExample, RetrievalSplit, TaggedSentence, TaskData, TextExample


def _classification(train, test):
    make = lambda labels: [TextExample(f"text {i}", label) for i, label in enumerate(labels)]  # noqa: E731
    return TaskData("cls", "sequence_classification", {"train": make(train), "validation": make(test),
                                                       "test": make(test)})


def test_majority_class_predicts_the_most_frequent_train_label():
    b = baselines.majority_class(_classification(["pos", "pos", "neg"], ["pos", "neg", "neg", "neg", "pos"]))
    assert (b.name, b.metric) == ("majority", "accuracy")
    assert b.test["score"] == pytest.approx(40.0)  # "pos" everywhere: 2 of 5
    tie = baselines.majority_class(_classification(["b", "a"], ["a", "b", "b"]))
    assert tie.test["score"] == pytest.approx(100 / 3)  # a tie goes to the first label in sorted order: "a"


def test_per_word_tag_learns_each_words_tag_and_backs_off_to_the_most_frequent():
    rows = [("the cat", "DET NOUN"), ("the run", "DET NOUN"), ("I run", "PRON VERB"), ("we run", "PRON VERB"),
            ("a dog", "DET NOUN"), ("dog", "NOUN")]
    train = [TaggedSentence(words.split(), tags.split()) for words, tags in rows]
    test = [TaggedSentence(["the", "fox", "run"], ["DET", "NOUN", "VERB"]), TaggedSentence(["they", "run"],
                                                                                         ["PRON", "NOUN"])]
    b = baselines.per_word_tag(TaskData("pos", "token_classification", {"train": train, "validation": test,
                                                                        "test": test}))
    # run -> VERB (2 of 3); unseen words (fox, they) -> NOUN (4 of 11 train tags): the, fox, run right; they, run
    # wrong.
    assert b.metric == "accuracy" and b.test["score"] == pytest.approx(60.0)


def _qa(qid, question, context, answer=None):
    return QAExample(qid, question, context, [(answer, context.index(answer))] if answer else [])


def test_the_best_rule_is_chosen_on_train_and_scored_on_test():
    train = [_qa("t1", 'Who said "So am I"?', '"I am tired," said Elinor. "So am I," cried Marianne.', "Marianne"),
             _qa("t2", 'Who said "hello there"?', "She walked home.")]
    test = [_qa("s1", 'Who said "Come here"?', '"Come here," replied Mr. Darcy, "and sit."', "Mr. Darcy"),
            _qa("s2", 'Who said "No way"?', '"Yes," said Jane.'),
            _qa("s3", 'Who said "Go"?', "Lady Catherine spoke first.", "Lady Catherine")]
    data = TaskData("austen-qa", "question_answering", {"train": train, "validation": test, "test": test})
    rule = baselines.best_rule(data)
    # On train only the quoted-words rule finds Marianne (100 + 100 for the no-answer); the others answer Elinor.
    assert rule.description.startswith("speaker-of-quoted-words:")
    assert rule.test["score"] == pytest.approx(200 / 3)  # s1 right, s2 rightly unanswered, s3 missed
    assert baselines.no_answer(data).test["score"] == pytest.approx(100 / 3)  # only s2
    assert [b.name for b in baselines.trivial_baselines(data)] == ["no-answer", "rule"]
    data.name = "other-qa"  # every QA task is measured against the rules, not only austen-qa
    assert [b.name for b in baselines.trivial_baselines(data)] == ["no-answer", "rule"]


def test_the_two_case_rule_answers_both_halves_of_an_interrupted_speech():
    context = '"I am tired," said Elinor, "and so is Marianne." "Come," cried Edward.'
    first = _qa("a", 'Who said "I am tired"?', context, "Elinor")
    second = _qa("b", 'Who said "and so is Marianne"?', context, "Elinor")
    for example in (first, second):
        assert baselines._speaker_around_quoted_words(example) == "Elinor"
    assert baselines._speaker_before_quoted_words(first) == ""  # no speech verb before the first half
    assert baselines._speaker_of_quoted_words(second) == "Edward"  # the next speech verb is another speaker's


def _figures(text: str) -> dict[str, float]:
    return {name: float(value) for name, value in re.findall(r"`([\w-]+)` (\d+\.\d)", text)}


def test_the_docs_figures_for_the_austen_qa_rules_are_what_the_code_computes():
    """The eval README's table (the `rule` baseline of each Austen QA task on test) and austen_tasks.py's
    figures for every rule on austen-qa-speakers equal what baselines.py computes."""
    from megamlm.eval.austen_tasks import __doc__ as tasks_doc
    from megamlm.eval.austen_tasks import austen_qa, austen_qa_speakers

    readme = (Path(__file__).resolve().parents[3] / "megamlm" / "eval" / "README.md").read_text()
    for data in (austen_qa(), austen_qa_speakers()):
        row = re.search(rf"^\| `{data.name}` \|.*\| rule `([\w-]+)` (\d+\.\d) F1(.*)\|$", readme, re.M)
        rule = baselines.best_rule(data)
        assert row and rule.description.startswith(row.group(1) + ":"), (data.name, rule.description)
        assert f"{rule.test['score']:.1f}" == row.group(2), (data.name, rule.test["score"])
        test = data.splits["test"]
        one_case = {name: baselines._qa_scores(test, fn)["score"] for name, (_, fn) in baselines.QA_RULES.items()
                    if name != "speaker-around-quoted-words"}
        if "one-case rules: at most" in row.group(3):
            assert f"at most {max(one_case.values()):.1f}" in row.group(3)
    sentence = tasks_doc.split("A one-case rule answers one kind well")[1].split("the last is the task's")[0]
    figures = _figures(sentence)
    assert len(figures) == 4
    test = austen_qa_speakers().splits["test"]
    for name, value in figures.items():
        assert f"{baselines._qa_scores(test, baselines.QA_RULES[name][1])['score']:.1f}" == f"{value:.1f}", name


def test_lexical_ranking_ranks_by_tfidf_cosine():
    corpus = {"d1": "apple banana", "d2": "cherry date", "d3": "apple cherry"}
    split = RetrievalSplit({"q1": "banana", "q2": "date"}, corpus, {"q1": {"d1": 1}, "q2": {"d3": 1}})
    assert baselines.lexical_rankings(split)["q2"] == ["d2", "d1", "d3"]  # d1 and d3 score 0: corpus order
    b = baselines.lexical_ranking(TaskData("ret", "retrieval", {"train": split, "validation": split, "test": split}))
    # q1: d1 first (nDCG 1, RR 1); q2: its document third (nDCG 1/log2(4) = 0.5, RR 1/3).
    assert b.metric == "ndcg@10" and b.test["score"] == pytest.approx(75.0)
    assert b.test["mrr@10"] == pytest.approx(200 / 3)


def _cls_folder(folder: Path) -> Path:
    folder.mkdir(parents=True)
    rows = [("good film", "pos"), ("great movie", "pos"), ("bad film", "neg"), ("boring movie", "neg"),
            ("good movie", "pos")]
    for split in ("train", "validation", "test"):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t, "label": la}) + "\n" for t, la in rows))
    return folder


def test_evaluate_adds_the_random_init_model_and_the_trivial_baselines(tiny_models, tmp_path, capsys):
    from helpers import tool_main

    main = tool_main("evaluate")
    task = f"sequence_classification:{_cls_folder(tmp_path / 'reviews')}"
    out, model = tmp_path / "out", tmp_path / "trained"
    shutil.copytree(tiny_models["bert"], model)  # "trained": the tiny model is itself a seed-0 initialisation
    save_file({k: v + 0.5 for k, v in load_file(str(model / "model.safetensors")).items()},
              str(model / "model.safetensors"), metadata={"format": "pt"})
    args = ["--model", f"tiny={model}", "--tasks", task, "--output", str(out), "--lrs", "1e-3",
            "--seeds", "0,1", "--max-steps", "1", "--batch-size", "2", "--max-length", "32", "--no-plots",
            "--random-init-baseline"]
    assert main(args) == 0
    results = [p for p in (out / "runs").rglob("*.json") if not p.name.endswith(".predictions.json")]
    assert sorted(p.parent.parent.name for p in results) == ["random-init"] * 2 + ["tiny"] * 2
    table = (out / "results.md").read_text()
    assert "| random-init | sequence classification | reviews | accuracy | 0.001 |" in table
    assert "| baseline:majority | sequence classification | reviews | accuracy | – | 60.00 | 60.00 (no training) |" \
        in table  # 3 of 5 are "pos"
    assert (out / "baselines.csv").read_text().startswith("model,task,family,metric,validation,test,")
    assert (out / "results.csv").read_text().count("\n") == 3  # header, tiny, random-init: its columns unchanged

    random_folder = out / "hf_exports" / "random-init"
    assert json.loads((random_folder / "random_init.json").read_text())["seed"] == 0
    trained, fresh = (load_file(str(f / "model.safetensors")) for f in (model, random_folder))
    assert trained.keys() == fresh.keys()
    assert all(not (trained[k] == fresh[k]).all() for k in trained)
    assert (random_folder / "tokenizer.json").read_text() == (model / "tokenizer.json").read_text()

    capsys.readouterr()
    assert main(args) == 0  # a rerun reuses the random model and the stored baselines
    assert "4 runs planned, 4 already finished, 0 to run" in capsys.readouterr().out
    # More fine-tuning seeds for the random-init model only: its third seed is the one run left.
    assert main([*args, "--random-init-seeds", "0,1,2"]) == 0
    assert "5 runs planned, 4 already finished, 1 to run" in capsys.readouterr().out
    assert sorted(p.stem.split("seed")[-1] for p in (out / "runs" / "random-init").rglob("*.json")
                  if not p.name.endswith(".predictions.json")) == ["0", "1", "2"]


def test_random_init_seeds_without_the_baseline_are_refused(tiny_models, tmp_path, capsys):
    from helpers import expect_one_line, tool_main

    args = ["--model", f"bert={tiny_models['bert']}", "--tasks", "rt-sentiment", "--output", str(tmp_path / "out"),
            "--random-init-seeds", "0,1,2"]
    expect_one_line(capsys, tool_main("evaluate")(args), "--random-init-seeds", "--random-init-baseline")
    assert not (tmp_path / "out").exists()


def test_random_init_refuses_models_of_two_shapes(tiny_models, tmp_path, capsys):
    from helpers import expect_one_line, tool_main

    args = ["--model", f"bert={tiny_models['bert']},llama={tiny_models['llama']}", "--tasks", "rt-sentiment",
            "--output", str(tmp_path / "out"), "--random-init-baseline"]
    expect_one_line(capsys, tool_main("evaluate")(args), "differ in shape or tokenizer")
    assert not (tmp_path / "out" / "hf_exports" / "random-init").exists()
