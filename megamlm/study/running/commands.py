"""The commands of a planned run, as lists of arguments: its pretraining (pretrain.py), the export of each
evaluated checkpoint (tools/convert_to_hf.py) and its fine-tuning (tools/evaluate.py). The SLURM scripts and the
local runner launch exactly these, from the folder the plan was made in (the repository root by default).

Layout under the study's root: ``ROOT/RUN`` (checkpoints, metrics.jsonl), ``ROOT/hf/MODEL`` (exports),
``ROOT/eval`` (fine-tuning results, one file per model, task, LR and seed; the trivial baselines in
``ROOT/eval/baselines``), ``ROOT/status`` (the local runner's
record of finished runs) and ``ROOT/logs``. An evaluated intermediate checkpoint is the model ``RUN-stepN``.

Baselines: the evaluation of one run per model size (the first of that size in the plan) passes
``--random-init-baseline random-init-SIZE``, so each size's random-init model is fine-tuned once with the study's
protocol (as the model ``random-init-SIZE``, its weights under ``ROOT/eval/hf_exports``) and every task's trivial
baselines are computed.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from pathlib import Path

from megamlm.checkpoint.catalog import iteration_dir
from megamlm.eval.results import write_text_atomic
from megamlm.study.planning.phase_arms import config_text
from megamlm.study.planning.plan import Plan
from megamlm.study.planning.runs import Run
from megamlm.study.planning.schema import EVALUATE_OWN_SETTINGS

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class EvaluatedModel:
    name: str
    """Model name in the results (``RUN`` for the last checkpoint, ``RUN-stepN`` for an intermediate one)."""
    run: str
    step: int
    checkpoint: str
    hf_path: str


def evaluated_models(plan: Plan, run: Run) -> list[EvaluatedModel]:
    models = []
    for step in plan.evaluated_steps(run):
        name = run.name if step == run.train_iters else f"{run.name}-step{step}"
        models.append(EvaluatedModel(name, run.name, step, str(iteration_dir(plan.save_dir(run), step)),
                                     str(Path(plan.root) / "hf" / name)))
    return models


def all_evaluated_models(plan: Plan) -> list[EvaluatedModel]:
    return [m for run in plan.runs for m in evaluated_models(plan, run)]


def random_init_name(size: str) -> str:
    return f"random-init-{size}"


def random_init_models(plan: Plan) -> dict[str, str]:
    """The run whose evaluation also evaluates its size's random-init model -> that model's name."""
    chosen: dict[str, str] = {}
    for run in plan.runs:
        name = random_init_name(run.size)
        if name not in chosen.values() and evaluated_models(plan, run):
            chosen[run.name] = name
    return chosen


def _script(repo: str, name: str) -> str:
    return f"{repo}/{name}" if repo else name


def pretrain_command(plan: Plan, run: Run, python: str = "python", nproc_per_node: int = 1,
                     repo: str = "") -> list[str]:
    """``repo``: the folder holding pretrain.py and tools/ when commands do not run from the repository root."""
    script = _script(repo, "pretrain.py")
    launcher = [python, script] if nproc_per_node == 1 else \
        ["torchrun", "--standalone", "--nproc-per-node", str(nproc_per_node), script]
    return launcher + plan.flags(run)


def write_config_file(plan: Plan, run: Run) -> None:
    """Write the --config file of a run with phases (``Plan.config_file``) where the local runner launches it."""
    path = plan.config_file(run)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, config_text(run.settings, run.name))


def config_file_lines(plan: Plan, run: Run) -> list[str]:
    """Shell lines that write the run's --config file (a run with phases) before it is launched, so that an emitted
    script holds everything it runs; none for a run given by flags alone."""
    path = plan.config_file(run)
    if path is None:
        return []
    quoted = shlex.quote(str(path))
    return [f"mkdir -p {shlex.quote(str(path.parent))}", f"cat > {quoted} <<'MEGAMLM_CONFIG'",
            config_text(run.settings, run.name).rstrip("\n"), "MEGAMLM_CONFIG"]


def export_command(plan: Plan, model: EvaluatedModel, python: str = "python", repo: str = "") -> list[str]:
    arch = plan.study.evaluation.export_arch
    return [python, _script(repo, "tools/convert_to_hf.py"), "--input", model.checkpoint, "--output", model.hf_path,
            "--arch", arch]


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _set_fields(settings) -> list[tuple[str, object]]:
    """The fields of a settings dataclass that differ from its defaults (tools/evaluate.py's flags default to them),
    but those the grid sets per run (lr, seed)."""
    default = type(settings)()
    return [(f.name, getattr(settings, f.name)) for f in dataclasses.fields(settings)
            if f.name not in EVALUATE_OWN_SETTINGS and getattr(settings, f.name) != getattr(default, f.name)]


def evaluate_command(plan: Plan, run: Run, python: str = "python", num_workers: int = 1,
                     devices: str | None = None, repo: str = "") -> list[str]:
    """Fine-tune every evaluated checkpoint of ``run`` (exported first) with the study's protocol."""
    e = plan.study.evaluation
    models = ",".join(f"{m.name}={m.hf_path}" for m in evaluated_models(plan, run))
    command = [python, _script(repo, "tools/evaluate.py"), "--model", models, "--tasks", ",".join(e.tasks),
               "--output", str(Path(plan.root) / "eval"), "--lrs", ",".join(f"{lr:g}" for lr in e.lrs),
               "--seeds", ",".join(map(str, e.seeds)), "--retrieval-corpus", e.retrieval_corpus, "--no-plots"]
    for key, value in _set_fields(e.hyperparameters) + _set_fields(e.task_settings):
        command += [_flag(key), str(value)]
    for key in ("max_train_examples", "max_eval_examples"):
        if getattr(e, key):
            command += [_flag(key), str(getattr(e, key))]
    for key in ("data_dir", "hf_datasets_dir"):
        if getattr(e, key):
            command += [_flag(key), str(plan.study.resolve(getattr(e, key)))]
    random_init = random_init_models(plan).get(run.name)
    if random_init:
        command += ["--random-init-baseline", random_init]
        if e.random_init_seeds:
            command += ["--random-init-seeds", ",".join(map(str, e.random_init_seeds))]
    if num_workers > 1:
        command += ["--num-workers", str(num_workers)]
    if devices:
        command += ["--devices", devices]
    return command


def status_file(plan: Plan, run: Run) -> Path:
    return Path(plan.root) / "status" / f"{run.name}.json"


def log_file(plan: Plan, run: Run, stage: str) -> Path:
    return Path(plan.root) / "logs" / f"{run.name}.{stage}.log"
