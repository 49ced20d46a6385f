"""Issue 23, item 5: --help a person can read (pretrain.py, tools/evaluate.py), and a one-seed result's n/a."""

from __future__ import annotations

import re

from megamlm.config import build_parser, parse_args
from megamlm.eval.aggregate import TaskSummary
from megamlm.eval.paper_datasets import PAPER_DATASETS
from megamlm.eval.registry import LOCAL_TASKS
from megamlm.eval.report import markdown_table


def _evaluate_parser():
    from helpers import load_tool

    return load_tool("evaluate").build_parser()


def _entries(text: str) -> dict[str, str]:
    entries, current = {}, None
    for line in text.splitlines():
        match = re.match(r"^  (-[-a-z0-9]+)", line)
        if match:
            current = match.group(1)
            entries[current] = line[len(match.group(0)):]
        elif current and line.startswith("     "):
            entries[current] += " " + line.strip()
        else:
            current = None
    return {flag: " ".join(text.split()) for flag, text in entries.items()}


def test_pretrain_help_has_a_one_line_usage_then_the_groups_and_lists_no_compile():
    text = build_parser().format_help()
    lines = text.splitlines()
    assert lines[0].startswith("usage: pretrain.py [--config run.yaml] [flags]") and lines[1] == ""
    assert "--no-compile" in _entries(text) and "the same as --compile none" in _entries(text)["--no-compile"]


def test_save_at_takes_the_comma_list_of_its_example_and_spaces(capsys):
    given = ["--save", "x", "--train-iters", "42000", "--save-at"]
    assert parse_args([*given, "10000,21000"]).checkpoint.save_at == [10000, 21000]
    assert parse_args([*given, "10000", "21000"]).checkpoint.save_at == [10000, 21000]


def test_evaluate_help_lists_the_tasks_describes_every_flag_and_names_each_default_once():
    text = _evaluate_parser().format_help()
    lines = text.splitlines()
    assert lines[0].startswith("usage: evaluate.py --model NAME=PATH") and lines[1] == ""
    flat = " ".join(text.split()).replace("- ", "-")
    for name in [*LOCAL_TASKS, *PAPER_DATASETS]:
        assert name in flat, name
    entries = _entries(text)
    assert len(entries) > 30
    for flag, entry in entries.items():
        description = re.sub(r"^[A-Z_]+|^\{[^}]*\}", "", entry.strip()).strip()
        assert description, flag
        assert entry.count("default") <= 1, (flag, entry)
    for flag in ("--beta1", "--beta2", "--eps", "--eval-batch-size"):
        assert "(default: " in entries[flag], flag
    for flag in ("--doc-stride", "--data-dir", "--hf-datasets-dir", "--devices"):
        assert entries[flag].count("default") == 1, flag


def test_a_one_seed_result_prints_n_a_not_a_zero_interval():
    one = TaskSummary("m", "sst2", "classification", "accuracy", 1e-4, 1, 80.0, 71.2, 0.0, 1, 1, 0)
    five = TaskSummary("m", "qqp", "classification", "accuracy", 1e-4, 5, 80.0, 71.2, 1.05, 5, 5, 0)
    table = markdown_table([one, five])
    assert "71.20 ± n/a" in table and "± 0.00" not in table and "71.20 ± 1.05" in table
