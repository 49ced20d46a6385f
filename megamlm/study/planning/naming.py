"""Run names, one readable scheme: ``{size}-{phases}-m{mask %}[-s{seed}]``.

``610m-clm42k-m40`` (CLM for 42,000 steps), ``610m-clm10k-mlm32k-m40`` (CLM then MLM, switching after step
10,000), ``610m-mlm42k-m20`` (MLM at 20% masking), ``tiny-mlm300-clm150-mlm50-m40`` (the CLM detour: each phase
and its length, in order), ``tiny-mntp250-mlm250-m40``, ``610m-clm42k-m40-cpt-mlm2k`` (2,000 steps of continued
MLM pretraining from ``610m-clm42k-m40``). The phases and their lengths name the schedule exactly, so two arms of
one size, mask ratio and seed never share a name. The seed is added only when the study has several.
"""

from __future__ import annotations

from megamlm.config import objective_stages


def steps_label(steps: int) -> str:
    """12000 -> 12k, 10500 -> 10.5k, 150 -> 150."""
    if steps >= 1000 and steps % 100 == 0:
        return f"{steps / 1000:g}k"
    return str(steps)


def mask_label(mask_ratio: float) -> str:
    return f"m{round(mask_ratio * 100)}"


def phases_label(objective: str, train_iters: int, switch_steps: tuple[int, ...]) -> str:
    """Each phase and the steps it trains: ``clm10k-mlm32k``, ``mlm300-clm150-mlm50``, ``mntp500``."""
    bounds = (0, *switch_steps, train_iters)
    return "-".join(f"{phase}{steps_label(bounds[k + 1] - bounds[k])}"
                    for k, phase in enumerate(objective_stages(objective)))


def arm_label(objective: str, train_iters: int, switch_steps: tuple[int, ...], mask_ratio: float) -> str:
    """The name of an arm without size and seed, as study files refer to it: ``clm10k-mlm32k-m40``."""
    return f"{phases_label(objective, train_iters, switch_steps)}-{mask_label(mask_ratio)}"


def continuation_label(parent_label: str, objective: str, steps: int) -> str:
    return f"{parent_label}-cpt-{objective}{steps_label(steps)}"


def run_name(size: str, label: str, seed: int, several_seeds: bool) -> str:
    return f"{size}-{label}" + (f"-s{seed}" if several_seeds else "")
