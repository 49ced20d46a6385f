"""Where a run's data and tokenizer come from: ``--data-path`` (and the tokenizer its sidecar names), or the data
the recipe's phases name when the run gives none.

A phase inherits its data from the phase before, so when the first phase names data every phase does, and the
bundled corpus is no part of the run: nothing of it is read or tokenized (``phases_own_data``). Each phase's data
made by tools/preprocess_data.py names its tokenizer in a sidecar (megamlm/data/sidecar.py); without
``--tokenizer-model`` that tokenizer is the run's, once every phase's sidecar names the same one
(``adopt_sidecar_tokenizer``, the dry run and the launch alike). Phases are numbered from 1, as the log says.
"""

from __future__ import annotations

import dataclasses
import os

from megamlm.config.sections import Config
from megamlm.errors import ConfigError


def phases_own_data(cfg: Config) -> bool:
    """No run-level ``--data-path`` and the first phase names its data (so every phase does)."""
    phases = cfg.recipe.phases
    return not cfg.data.data_path and bool(phases) and bool(phases[0].data_path)


def phase_data_lists(cfg: Config) -> list[tuple[str, list[str]]]:
    """(``phase N`` or ``phase N's validation``, its --data-path list) of every data list the phases name."""
    named = []
    for number, phase in enumerate(cfg.recipe.phases, start=1):
        if phase.data_path:
            named.append((f"phase {number}", list(phase.data_path)))
        if phase.valid_data_path:
            named.append((f"phase {number}'s validation", list(phase.valid_data_path)))
    return named


def phase_corpora(cfg: Config) -> list[str]:
    """Every dataset prefix the phases' training data names, once each, in order of first use."""
    from megamlm.data.blending import parse_data_path  # the data package imports torch (the flag parser may not)

    prefixes: list[str] = []
    for data_path in (phase.data_path for phase in cfg.recipe.phases if phase.data_path):
        prefixes += [p for p in parse_data_path(data_path)[1] if p not in prefixes]
    return prefixes


def adopt_sidecar_tokenizer(cfg: Config) -> tuple[Config, str | None]:
    """Without ``--tokenizer-model``: the tokenizer the data's sidecar names (it made the data), when that file exists
    here, and the note saying so. For a recipe whose phases name their data, every phase's sidecar must name the same
    tokenizer (one line naming the two phases otherwise), and data whose tokenizer cannot be found is refused here, so
    that ``--dry-run`` and the launch agree. A given --tokenizer-model is kept (and checked against each sidecar
    before the run builds anything, megamlm/data/sidecar.py)."""
    if cfg.data.tokenizer_model:
        return cfg, None
    if cfg.data.data_path:
        # Imported here, not above: the data package imports torch, which the flag parser (pretrain.py --help, a
        # flag error) must start without (tests/unit/test_imports.py, DEFERRED).
        from megamlm.data.sidecar import sidecar_tokenizer

        found = sidecar_tokenizer(list(cfg.data.data_path))
    elif phases_own_data(cfg):
        found = _phases_tokenizer(cfg)
    else:
        return cfg, None
    if found is None:
        return cfg, None
    path, dataset = found
    return (dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, tokenizer_model=path)),
            f"--tokenizer-model {path}: the tokenizer that made {dataset} (its sidecar says so)")


def _phases_tokenizer(cfg: Config) -> tuple[str, str] | None:
    """(tokenizer path, the dataset whose sidecar names it) of the phases' data: the one tokenizer their sidecars
    name (None where no dataset has a sidecar: such data trains with the bundled tokenizer, checked by its largest
    token id). A ConfigError when two phases' data were made by different tokenizers, or the one that made them is
    not here."""
    from megamlm.data.sidecar import sidecar_tokenizers

    first = None
    for where, data_path in phase_data_lists(cfg):
        for dataset, tokenizer in sidecar_tokenizers(data_path):
            if first is None:
                first = (where, dataset, tokenizer)
            elif tokenizer.get("fingerprint") != first[2].get("fingerprint"):
                raise ConfigError(
                    f"{first[0]}'s data {first[1]} was made by {first[2].get('path')} ({first[2].get('vocab_size')} "
                    f"ids) and {where}'s data {dataset} by {tokenizer.get('path')} ({tokenizer.get('vocab_size')} "
                    "ids): their token ids mean other tokens; re-tokenize one with the other's tokenizer "
                    "(tools/preprocess_data.py --tokenizer-model), as one --tokenizer-model serves the whole run")
    if first is None:
        return None
    where, dataset, tokenizer = first
    path = tokenizer.get("path")
    if not path or not os.path.isfile(path):
        raise ConfigError(f"{where}'s data {dataset} was made by the tokenizer {path} (its sidecar says so), which "
                          "is not here; pass that tokenizer as --tokenizer-model")
    return path, dataset
