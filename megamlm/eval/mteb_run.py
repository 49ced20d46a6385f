"""``tools/evaluate.py --mteb TASKS``: an export scored as an embedder by mteb, through sentence-transformers.

Each model (a Hugging Face export, or a megamlm checkpoint or run folder, exported first as the fine-tuning path
does) is loaded in sentence-transformers with the pooling its model card states (megamlm's cards say "mean
pooling"; mean when a card names none). The encoder is read through its masked-LM (or causal-LM) class, which
holds every tensor of the export, and its base model is handed to sentence-transformers from a folder of its own
(``OUTPUT/mteb/encoders/NAME``): loading the export's folder as a bare encoder would leave the LM head unused (the
"lm_head.weight UNEXPECTED" line of transformers' load report).

Tasks are mteb's own names (``mteb.get_tasks``: the Hub datasets, downloaded on first use; offline with
``HF_HUB_OFFLINE=1`` once cached), or the bundled ``AustenNovelClustering``: the test paragraphs of the austen-novel
task (eval/austen_tasks.py) clustered by novel, built in-process from the packaged corpus, so the path runs offline.
mteb writes its result files under ``OUTPUT/mteb/results`` (its ``ResultCache`` layout, which ``mteb.ResultCache``
and ``mteb.load_results`` read); ``OUTPUT/mteb_results.md`` and ``.csv`` hold each model's main score per task,
beside the fine-tuning results. An MLM-trained encoder has not learnt sentence embeddings: its scores mean little
before contrastive training.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

from megamlm.eval.austen_tasks import austen_novel
from megamlm.eval.model_source import parse_model_specs, resolve_models
from megamlm.extras import require

MTEB_FOLDER = "mteb"
BUNDLED_TASK = "AustenNovelClustering"
POOLING_LINE = re.compile(r"SentenceTransformer\(path\)`?,\s*(\w+) pooling")


def card_pooling(export: Path) -> str:
    """The pooling an export's model card states for sentence-transformers (``mean`` when it names none)."""
    card = Path(export) / "README.md"
    found = POOLING_LINE.search(card.read_text()) if card.is_file() else None
    return found.group(1) if found else "mean"


def encoder_folder(export: Path, folder: Path) -> Path:
    """The export's base model (every tensor but its LM head, read through the LM class that uses them all) and its
    tokenizer, saved in ``folder`` for sentence-transformers."""
    import transformers

    try:
        model = transformers.AutoModelForMaskedLM.from_pretrained(str(export))
    except ValueError:  # a decoder export (llama, qwen2...) has no masked-LM class
        model = transformers.AutoModelForCausalLM.from_pretrained(str(export))
    getattr(model, model.base_model_prefix).save_pretrained(str(folder))
    transformers.AutoTokenizer.from_pretrained(str(export)).save_pretrained(str(folder))
    return folder


def sentence_transformer(export: Path, folder: Path, device: str = "cpu"):
    """The export as a sentence-transformers model: its encoder, then the card's pooling (a folder of
    ``convert_to_hf.py --sentence-transformers`` as it is: its bare encoder and its own pooling)."""
    require("sentence_transformers", "--mteb")
    from sentence_transformers import SentenceTransformer

    if (Path(export) / "modules.json").is_file():
        return SentenceTransformer(str(export), device=device)
    from sentence_transformers.base.modules.transformer import Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling

    encoder = Transformer(str(encoder_folder(export, folder)))
    pooling = Pooling(encoder.get_embedding_dimension(), pooling_mode=card_pooling(export))
    return SentenceTransformer(modules=[encoder, pooling], device=device)


def bundled_task():
    """AustenNovelClustering: austen-novel's test paragraphs, clustered by novel (v-measure), built in-process."""
    require("mteb", "--mteb")
    from datasets import Dataset, DatasetDict
    from mteb.abstasks import AbsTaskClustering
    from mteb.abstasks.task_metadata import TaskMetadata

    class AustenNovelClustering(AbsTaskClustering):
        metadata = TaskMetadata(
            name=BUNDLED_TASK, description="Paragraphs of Jane Austen's six novels, clustered by novel (megamlm's "
                                           "packaged corpus, the austen-novel task's test split).",
            dataset={"path": "megamlm/austen-novel", "revision": "packaged"}, type="Clustering", category="t2c",
            eval_splits=["test"], eval_langs=["eng-Latn"], main_score="v_measure", domains=["Fiction", "Written"],
            license="not specified", annotations_creators="derived", dialect=[], sample_creation="found",
            bibtex_citation="", modalities=["text"])
        max_fraction_of_documents_to_embed = None

        def load_data(self, num_proc: int | None = None, **kwargs) -> None:
            test = austen_novel().splits["test"]
            self.dataset = DatasetDict({"test": Dataset.from_dict(
                {"sentences": [e.text for e in test], "labels": [e.label for e in test]})})
            self.data_loaded = True

    return AustenNovelClustering()


def mteb_tasks(names: list[str]) -> list:
    """The bundled task and mteb's own tasks by name (an unknown name: mteb's one-line error)."""
    mteb = require("mteb", "--mteb")
    own = [name for name in names if name != BUNDLED_TASK]
    return ([bundled_task()] if BUNDLED_TASK in names else []) + (list(mteb.get_tasks(tasks=own)) if own else [])


def mteb_command(args) -> int:
    """tools/evaluate.py --mteb: the models of --model (exported when they are megamlm checkpoints or runs), each
    scored on --mteb's tasks; a missing mteb or sentence-transformers is one line before any work."""
    require("mteb", "--mteb")
    require("sentence_transformers", "--mteb")
    names = [name.strip() for name in args.mteb.split(",") if name.strip()]
    models = [entry for name, path in parse_model_specs(args.model)
              for entry in resolve_models(name, path, args.output / "hf_exports", args.export_arch, args.checkpoints)]
    device = (args.devices or "cpu").split(",")[0]
    for row in run_mteb(models, names, args.output, device):
        print(f"{row['model']}  {row['task']}  {100 * row['main_score']:.2f}")
    print(f"wrote {args.output / 'mteb_results.md'} and mteb's result files under {args.output / MTEB_FOLDER}")
    return 0


def run_mteb(models: list, names: list[str], output: Path, device: str = "cpu", log=print) -> list[dict]:
    """Score each model (``model_source.ModelEntry``) on the tasks ``names``; one row per model and task (name,
    task, main score), also written to OUTPUT/mteb_results.md and .csv."""
    mteb = require("mteb", "--mteb")
    tasks = mteb_tasks(names)
    cache = mteb.ResultCache(cache_path=Path(output) / MTEB_FOLDER)
    rows = []
    for entry in models:
        folder = Path(output) / MTEB_FOLDER / "encoders" / entry.name
        model = sentence_transformer(entry.hf_path, folder, device)
        model.model_card_data.model_name = entry.name
        task_names = ", ".join(t.metadata.name for t in tasks)
        log(f"mteb: {entry.name} ({card_pooling(entry.hf_path)} pooling) on {task_names}")
        result = mteb.evaluate(model, tasks, cache=cache, show_progress_bar=False, overwrite_strategy="always")
        for task_result in result.task_results:
            rows.append({"model": entry.name, "task": task_result.task_name,
                         "main_score": float(task_result.get_score())})
    write_tables(rows, Path(output))
    return rows


def write_tables(rows: list[dict], output: Path) -> None:
    output.mkdir(parents=True, exist_ok=True)
    with open(output / "mteb_results.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["model", "task", "main_score"])
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| model | task | main score |", "|---|---|---|"]
    lines += [f"| {r['model']} | {r['task']} | {100 * r['main_score']:.2f} |" for r in rows]
    (output / "mteb_results.md").write_text("\n".join(lines) + "\n\nScores x 100; the main score of each task as mteb "
                                            "defines it. An MLM-only encoder needs contrastive training before these "
                                            "mean much.\n")
