"""Every config field, changed alone, changes the start decision and the planner's prefix sharing the same way, and
the way its role says (megamlm/config/roles.py): the two readers of "are these the same steps?" agree on all fields.

A saved run is synthetic (a run record and train state as a checkpoint at step 4 of 8 holds them; no model, no
data): ``decide_start`` (training/resume.py) compares it with a launch whose config differs in one field, and the
planner (study/planning/prefixes.py) compares the two configs as runs. Each answers one of:

- ``same``: the launch is the saved run's straight continuation (resume, no note); the planner shares every step;
- ``branch``: the launch continues the checkpoint, its schedule differing only after step 4; the planner shares at
  least the first 4 steps;
- ``other``: refused, overridden or noted; the planner shares fewer than 4 steps, or none.

An ignored role must give ``same``; refused and noted roles ``other``. A field whose role one reader ignores fails
here. In this synthetic world each tokenizer file holds its own vocabulary and each data path its own corpus (the
trainer compares a tokenizer by its ids and data by content; the planner, which has neither, by their names).
"""

import dataclasses
import json
import typing
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from megamlm.checkpoint.saved_run import SavedRun
from megamlm.config import ALTERNATIVES as ALTERNATIVE_FLAGS
from megamlm.config import SECTION_CLASSES, model_args_for, parse_args, resolve
from megamlm.config.phase_fields import PhaseConfig
from megamlm.config.roles import ROLES
from megamlm.errors import ResumeError, UserError
from megamlm.objectives import ObjectiveSchedule
from megamlm.study.planning.prefixes import settings_key, shared_steps, step_settings
from megamlm.training import run_record
from megamlm.training.lineage import History, Segment
from megamlm.training.resolved_run import masking_spec_for
from megamlm.training.resume import LaunchPlan, decide_start

STEP, ITERS = 4, 8
BASE = parse_args(["--train-iters", str(ITERS), "--global-batch-size", "16", "--micro-batch-size", "16",
                   "--lr-wsd-decay-iters", "3", "--save", "/runs/a"])  # steps 1-5 warm and stable, 6-8 decay
TOKENIZER_VOCAB = 200  # padded to 256 by --make-vocab-size-divisible-by 128

# A changed value for every field whose change the rules in ``changed`` cannot make (a valid shape, a schedule that
# differs early or late, JSON text).
ALTERNATIVES = {
    ("model", "model"): "210m",
    ("model", "vocab_size"): 512,
    ("model", "num_layers"): 2,
    ("model", "hidden_size"): 64,
    ("model", "ffn_hidden_size"): 192,
    ("model", "num_attention_heads"): 4,
    ("model", "num_query_groups"): 2,
    ("model", "seq_length"): 64,
    ("model", "head_dim"): 32,
    ("model", "rope_scaling"): '{"rope_type": "linear", "factor": 2.0}',
    ("model", "query_pre_attn_scalar"): 8,
    ("model", "sliding_window"): 16,
    ("model", "layer_types"): "full,full,full,full",
    ("model", "make_vocab_size_divisible_by"): 384,
    ("model", "global_attn_every_n_layers"): 1,  # every layer global: the layer pattern full,full,full,full
    ("logging", "tracker_project"): "another-project",
    ("logging", "profile_steps"): [2, 3],
    ("objective", "objective"): "mlm_then_clm",  # switch 0.25 x 8 = step 2: differs before step 4
    ("objective", "switch_step"): 6,  # with the base's one objective: nothing to switch, the same steps
    ("objective", "switch"): 0.75,
    ("data", "data_path"): ["/data/other_text_document"],
    ("data", "split"): "969,30,1",
    ("training", "train_iters"): 9,  # the decay moves from step 8 to 9: a branch after step 4
    ("training", "lr_warmup_iters"): 2,  # step 1's learning rate changes: refused
    ("training", "lr_wsd_decay_iters"): 2,  # the decay starts at step 7: a branch
    ("training", "lr_wsd_decay_fraction"): 0.5,  # 4 decay steps: step 5 decays, a branch
    ("training", "train_tokens"): 3 * 16 * 128,  # 3 steps of 16 samples of 128 tokens: shorter than the checkpoint
    ("training", "rampup_batch_size"): [8, 8, 64],
    ("training", "micro_batch_size"): 8,
    ("training", "global_batch_size"): 32,
    ("training", "min_lr"): 1e-4,  # the last step's learning rate: a branch
    ("training", "device"): "cpu",
    ("checkpoint", "save"): "/runs/b",
    ("parallel", "dp_shard"): 1,
    ("parallel", "pipeline_schedule"): "interleaved_1f1b",
    ("performance", "attention_backend"): "flex",
    ("recipe", "phases"): [PhaseConfig(steps=4, objective="mlm"), PhaseConfig(objective="clm")],  # a branch at 4
}
EXPECTED_HISTORY = {("objective", "switch_step"): "same", ("objective", "switch"): "same"}
"""History fields whose alternative value changes no step of the base (one objective: nothing switches)."""


def changed(section: str, name: str):
    """Another valid value of one field than the base config's."""
    if (section, name) in ALTERNATIVES:
        return ALTERNATIVES[section, name]
    value, hint = getattr(getattr(BASE, section), name), typing.get_type_hints(SECTION_CLASSES[section])[name]
    choices = [c for arg in (hint, *typing.get_args(hint)) if typing.get_origin(arg) is typing.Literal
               for c in typing.get_args(arg)]
    if choices:
        return next(c for c in choices if c != value)
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value / 2 if value else 0.25
    kinds = typing.get_args(hint) if typing.get_origin(hint) is not list else (hint,)
    if value is None and int in kinds:
        return 3
    if value is None and float in kinds:
        return 0.5
    if value is None and str in kinds or value == [] and list[str] in kinds:
        return "/elsewhere" if value is None else ["/elsewhere"]
    if value == [] and list[int] in kinds:
        return [2]
    raise AssertionError(f"give {section}.{name} a changed value in ALTERNATIVES")


def variant(section: str, name: str, value):
    """The base with one field changed, resolved as a launch resolves it (a length in tokens becomes one in steps);
    left as given where resolving needs what this test has not (data files)."""
    values = {name: value}
    values.update((pair[1] if name == pair[0] else pair[0], None) for pair_section, *pair in ALTERNATIVE_FLAGS
                  if pair_section == section and name in pair)  # --lr-warmup-fraction replaces --lr-warmup-iters
    cfg = dataclasses.replace(BASE, **{section: dataclasses.replace(getattr(BASE, section), **values)})
    try:
        return resolve(cfg)
    except UserError:
        return cfg


@pytest.fixture(scope="module", autouse=True)
def quick_records():
    """Run records without hashing data or asking git: the data's fingerprint is its paths here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(run_record, "data_fingerprint", lambda paths: repr(paths))
        patch.setattr(run_record, "git_state", lambda: None)
        patch.setattr(run_record, "software_versions", lambda: {"torch": torch.__version__})
        yield


@pytest.fixture(scope="module")
def base_saved(quick_records) -> SavedRun:
    return saved_run(BASE)


def record(cfg) -> dict:
    """The run record a launch of ``cfg`` writes (training/run_record.py), from a synthetic resolved run."""
    vocab = TOKENIZER_VOCAB + (0 if cfg.data.tokenizer_model is None else 37)
    tokenizer = SimpleNamespace(vocab_size=vocab, mask_id=vocab - 1, bos_id=0, eos_id=1, pad_id=2,
                                special_ids=(0, 1, 2, vocab - 1))
    segment = Segment.of_config(cfg)
    resolved = SimpleNamespace(
        tokenizer=tokenizer, tokenizer_path=cfg.data.tokenizer_model or "bundled", device=torch.device("cpu"),
        model_args=model_args_for(cfg, vocab), data_path=list(cfg.data.data_path) or ["bundled"],
        objective_schedule=ObjectiveSchedule(**segment.objective_schedule, masking=masking_spec_for(cfg, tokenizer),
                                             seed=cfg.training.seed),
        lr_schedule=segment.lr_schedule_object())
    return run_record.build_run_record(cfg, resolved, 1)


def saved_run(cfg, step: int = STEP) -> SavedRun:
    """A checkpoint of ``cfg``'s run at ``step`` (4), as checkpoint/saved_run.py reads one."""
    state = {"progress": {"step": step, "consumed_samples": 16 * step},
             "history": History([Segment.of_config(cfg)]).state_dict()}
    return SavedRun.of(Path(cfg.checkpoint.save) / f"iter_{step:07d}", "--save",
                       {"format": 2, "step": step, "state": state}, record(cfg))


def start_answer(saved: SavedRun, cfg) -> str:
    try:
        decision = decide_start(saved, LaunchPlan.of(cfg, record(cfg)))
    except ResumeError:
        return "other"
    if decision.kind == "resume" and not decision.notes:
        return "same"
    if decision.kind == "branch":  # (one field changed: its notes are the branch's own)
        return "branch"
    return "other"


def planner_answer(base, cfg) -> str:
    if settings_key(base) != settings_key(cfg):
        return "other"
    a, b = step_settings(base), step_settings(cfg)
    shared = shared_steps(a, b)
    if len(a) == len(b) == shared:
        return "same"
    return "branch" if shared >= STEP else "other"


FIELDS = [(section, f.name) for section, cls in SECTION_CLASSES.items() for f in dataclasses.fields(cls)]


def test_the_base_continues_itself(base_saved):
    assert start_answer(base_saved, BASE) == "same" and planner_answer(BASE, BASE) == "same"


@pytest.mark.parametrize("section,name", FIELDS, ids=[f"{s}.{n}" for s, n in FIELDS])
def test_a_field_changes_the_start_and_the_prefix_sharing_alike_and_as_its_role_says(base_saved, section, name):
    role = SECTION_CLASSES[section].__dataclass_fields__[name].metadata["role"]
    value = changed(section, name)
    assert value != getattr(getattr(BASE, section), name)
    cfg = variant(section, name, value)
    start, planner = start_answer(base_saved, cfg), planner_answer(BASE, cfg)
    assert start == planner, f"{section}.{name} (role {role}): the start says {start}, the planner {planner}"
    rule = ROLES[role].on_resume
    expected = {"ignore": {"same"}, "refuse": {"other"}, "note": {"other"}}.get(rule, {"branch", "other"})
    expected = {EXPECTED_HISTORY[section, name]} if (section, name) in EXPECTED_HISTORY else expected
    assert start in expected, f"{section}.{name} has role {role} ({rule} on resume) but the start says {start}"


def test_a_field_whose_role_a_reader_ignores_fails_here(base_saved, monkeypatch):
    """A schedule setting the LR schedule does not read: role ``schedule`` says both must see it, neither does."""
    fields = dict(SECTION_CLASSES["training"].__dataclass_fields__)
    fake = dataclasses.field(default=10, metadata={"role": "schedule"})
    fake.name = "max_skipped_steps"
    monkeypatch.setitem(SECTION_CLASSES["training"].__dataclass_fields__, "max_skipped_steps", fake)
    with pytest.raises(AssertionError, match="has role schedule"):
        test_a_field_changes_the_start_and_the_prefix_sharing_alike_and_as_its_role_says(base_saved, "training",
                                                                                          "max_skipped_steps")
    assert fields["max_skipped_steps"].metadata["role"] == "output"


def test_another_precision_is_honoured_and_noted_in_the_lineage(base_saved):
    """The numerics role: the run continues from the checkpoint's state, and its lineage says it is no longer the
    straight run of one command (the planner does not share a prefix across precisions either)."""
    cfg = variant("training", "precision", "fp32")
    decision = decide_start(base_saved, LaunchPlan.of(cfg, record(cfg)))
    assert decision.kind == "resume" and decision.restores_state
    assert decision.notes == ["--precision is 'auto' in the checkpoint and 'fp32' here: the run continues from the "
                              "checkpoint's state, its steps from 5 computed with this launch's (the arithmetic the "
                              "steps are computed in)"]
    [event] = decision.lineage
    assert event["kind"] == "resume" and event["changes"] == decision.notes


def test_a_history_that_predates_an_optimizer_setting_reads_it_as_its_default(base_saved):
    """A checkpoint written before --optimizer existed (its segments and record lack it) continues into the default
    optimizer, and is refused with another one, naming the setting."""
    old_state = json.loads(json.dumps(base_saved.train_state))
    for segment in old_state["state"]["history"]["segments"]:
        del segment["optimizer"]["optimizer"]
    old_record = json.loads(json.dumps(base_saved.record))
    del old_record["config"]["training"]["optimizer"]
    old = SavedRun.of(base_saved.path, "--save", old_state, old_record)
    assert start_answer(old, BASE) == "same"
    with pytest.raises(ResumeError, match="--optimizer is 'adamw' in the checkpoint and 'stableadamw' here"):
        decide_start(old, LaunchPlan.of(variant("training", "optimizer", "stableadamw"),
                                        record(variant("training", "optimizer", "stableadamw"))))


# ---- a recipe's phases: every kind of phase change, after a phase boundary ------------------------------------

PHASE_CHANGES = {
    "mask": {"mask_ratio": 0.15},
    "data": {"data_path": ["/data/other_text_document"]},
    "seq_length": {"seq_length": 64},
    "objective": {"objective": "clm"},
    "rope": {"rope_theta": 80000.0},
    "batch": {"global_batch_size": 32},
}
"""One change of each kind a phase can make to its steps (config/phase_fields.py), made to a later phase."""


def with_phases(*phases: dict, decay: int = 3):
    """The base run with these ``phases:`` (each a PhaseConfig's fields) and a WSD decay over its last ``decay``
    steps, resolved as a launch resolves it."""
    return resolve(dataclasses.replace(
        BASE, training=dataclasses.replace(BASE.training, lr_wsd_decay_iters=decay),
        recipe=dataclasses.replace(BASE.recipe, phases=[PhaseConfig(**phase) for phase in phases])))


@pytest.mark.parametrize("kind", PHASE_CHANGES)
def test_a_later_phase_changed_branches_at_its_start_for_the_start_and_the_planner_alike(kind):
    """Phases 1-4 and 5-8; the second phase changed: the launch branches from the checkpoint at step 4, the
    phase boundary, and the planner shares exactly steps 1-4 (it compared only objectives and learning rates,
    and shared all 8 steps of runs differing in a later phase's mask rate, data, length, RoPE base or batch)."""
    base = with_phases({"steps": 4}, {})
    cfg = with_phases({"steps": 4}, PHASE_CHANGES[kind])
    assert start_answer(saved_run(base), cfg) == "branch"
    assert planner_answer(base, cfg) == "branch"
    assert shared_steps(step_settings(base), step_settings(cfg)) == 4


@pytest.mark.parametrize("kind", PHASE_CHANGES)
def test_inside_a_phase_a_later_change_is_refused_and_the_planner_branches_at_the_next_boundary(kind):
    """Phases 1-2, 3-6, 7-8, the third changed: a checkpoint at step 4, inside the second phase, is refused (the
    resume's rule; an objective is the history's, which branches at any step, as at an objective switch), one at
    step 6 is a branch, and the planner shares exactly steps 1-6."""
    base = with_phases({"steps": 2}, {"steps": 4}, {})
    cfg = with_phases({"steps": 2}, {"steps": 4}, PHASE_CHANGES[kind])
    assert start_answer(saved_run(base, 4), cfg) == ("branch" if kind == "objective" else "other")
    assert start_answer(saved_run(base, 6), cfg) == "branch"
    assert shared_steps(step_settings(base), step_settings(cfg)) == 6


def test_a_parent_phase_boundary_is_a_branch_point_too():
    """The parent decays from step 5, the child from step 7 (a longer stable phase, the same budget): both train
    steps 1-4 alike, the parent's phase boundary; the child continues its own first phase from there."""
    parent = with_phases({"steps": 4}, {"mask_ratio": 0.15})
    child = with_phases({"steps": 6}, {"mask_ratio": 0.15})
    assert start_answer(saved_run(parent), child) == "branch"
    assert shared_steps(step_settings(parent), step_settings(child)) == 4


def test_the_planner_branches_only_where_the_resume_accepts():
    """Phases 1-2, 3-6, 7-8; the child decays over 2 steps instead of 3 (its learning rate differs from step 6) and
    masks less in the last phase: the steps agree up to 5, inside the second phase, where the resume refuses a
    launch whose later phase differs; the planner falls back to the phase boundary at step 2."""
    parent = with_phases({"steps": 2}, {"steps": 4}, {})
    child = with_phases({"steps": 2}, {"steps": 4}, {"mask_ratio": 0.15}, decay=2)
    assert int(np.flatnonzero(step_settings(parent).table["lr"] != step_settings(child).table["lr"])[0]) + 1 == 6
    assert start_answer(saved_run(parent, 5), child) == "other"
    assert shared_steps(step_settings(parent), step_settings(child)) == 2
    assert start_answer(saved_run(parent, 2), child) == "branch"
