"""Run configuration: typed, frozen sections; the flag parser and YAML loader; one check per section; the values
derived from settings; and ``resolve``, the one place that completes and validates a Config.

    sections.py  the dataclasses and Literal choices (the model section generated from ModelArgs)
    docs.py      field docstrings (help texts) and Literal choices of a dataclass
    loader.py    YAML files and mappings -> Config
    flags.py     the command line (one flag per field)
    derived.py   phases and switch steps, warmup/decay lengths, split weights, the resolved model shape
    batches.py   batch sizes fitted to the layout
    checks.py    validation, one function per section
    resolve.py   adopt -> fit -> validate -> frozen
"""

from megamlm.config.batches import RECIPE_BATCH, BatchChoice, batch_start, fit_batch, fit_batch_sizes
from megamlm.config.checks import validate
from megamlm.config.derived import (
    DEFAULT_EVAL_INTERVAL,
    DEFAULT_EVAL_ITERS,
    DEFAULT_SWITCH,
    FEATURE_FIELDS,
    SHAPE_FIELDS,
    as_tuple,
    eval_interval,
    eval_iters,
    model_args_for,
    model_args_values,
    model_features,
    model_section_values,
    objective_name,
    objective_phases,
    resolved_shape,
    split_weights,
    switch_fraction,
    switch_step,
    switch_steps,
    unused_lr_settings,
    validation_enabled,
    warmup_iters,
    wsd_decay_iters,
)
from megamlm.config.docs import choices_of, field_docs
from megamlm.config.flags import build_parser, parse_flags
from megamlm.config.loader import (
    ALTERNATIVES,
    FORMER_SWITCHES,
    config_from_settings,
    load_yaml,
    read_yaml,
    settings_of,
    yaml_problem,
)
from megamlm.config.resolve import Adopter, given_config, launch_world_size, parse_args, resolve
from megamlm.config.sections import (
    MODEL_FLAG_NAMES,
    OBJECTIVE_PHASES,
    PHASE_OBJECTIVES,
    SECTION_CLASSES,
    CheckpointConfig,
    CompileMode,
    Config,
    DataConfig,
    DataParallelImpl,
    Device,
    LoggingConfig,
    LRDecayStyle,
    ModelConfig,
    Objective,
    ObjectiveConfig,
    OptimizerImpl,
    ParallelConfig,
    PerformanceConfig,
    PipelineSchedule,
    Precision,
    TrainingConfig,
    ValidationConfig,
)
from megamlm.errors import ConfigError


