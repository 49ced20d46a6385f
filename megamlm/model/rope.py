"""Rotary embedding tables, with the frequency scalings of the decoders people continue from.

``RopeScaling`` (megamlm/model/rope_scaling.py, torch-free) holds the parameters Hugging Face keeps in
``rope_parameters`` (the same key names), for
the scalings these models use: ``linear`` (position interpolation), ``llama3`` (Llama 3.1/3.2) and
``yarn`` (Qwen2.5's long-context setting). Scaling changes only the tables: the inverse frequencies, and
for YaRN a factor on cos and sin, so every rotary kernel takes the scaled tables unchanged.
Scalings that depend on the running sequence length (``dynamic``, ``longrope``) are refused.
"""

from __future__ import annotations

import math

import torch

from megamlm.model.rope_scaling import RopeScaling


def _llama3(inv_freq: torch.Tensor, s: RopeScaling) -> torch.Tensor:
    # Long wavelengths (beyond original context / low_freq_factor) are slowed by `factor`, short ones
    # (below original context / high_freq_factor) kept, and the band in between interpolated smoothly.
    wavelength = 2 * math.pi / inv_freq
    context = s.original_max_position_embeddings
    slowed = inv_freq / s.factor
    smooth = (context / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)
    between = (1 - smooth) * slowed + smooth * inv_freq
    out = torch.where(wavelength > context / s.low_freq_factor, slowed, inv_freq)
    in_band = (wavelength >= context / s.high_freq_factor) & (wavelength <= context / s.low_freq_factor)
    return torch.where(in_band, between, out)


def _yarn(inv_freq: torch.Tensor, head_dim: int, theta: float, s: RopeScaling) -> tuple[torch.Tensor, float]:
    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    if s.attention_factor is not None:
        attention_factor = s.attention_factor
    elif s.mscale and s.mscale_all_dim:
        attention_factor = mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim)
    else:
        attention_factor = mscale(s.factor)
    context = s.original_max_position_embeddings

    def dimension_of(rotations: float) -> float:  # the dimension that turns `rotations` times over the context
        return head_dim * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = dimension_of(s.beta_fast or 32), dimension_of(s.beta_slow or 1)
    if s.truncate is None or s.truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    # ramp 0: keep the original frequency (extrapolate); ramp 1: divide it by `factor` (interpolate).
    return inv_freq / s.factor * ramp + inv_freq * (1 - ramp), attention_factor


def inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling | None = None) -> tuple[torch.Tensor, float]:
    """(inverse frequencies (head_dim / 2,) in float64, the factor on cos and sin)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    if scaling is None:
        return inv_freq, 1.0
    if scaling.rope_type == "linear":
        return inv_freq / scaling.factor, 1.0
    if scaling.rope_type == "llama3":
        return _llama3(inv_freq, scaling), 1.0
    return _yarn(inv_freq, head_dim, theta, scaling)


def rotary_tables(head_dim: int, max_seq_length: int, theta: float,
                  scaling: RopeScaling | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin of shape (max_seq_length, head_dim), frequencies repeated twice (rotate-half layout), float32."""
    inv_freq, factor = inverse_frequencies(head_dim, theta, scaling)
    angles = torch.outer(torch.arange(max_seq_length, dtype=torch.float64), inv_freq)
    angles = torch.cat((angles, angles), dim=-1)
    return (angles.cos() * factor).float(), (angles.sin() * factor).float()


def set_rotary_bases(model: torch.nn.Module, theta: float, local_theta: float | None) -> bool:
    """Rebuild the rotary tables of every part of ``model`` that holds them (a Transformer, or each pipeline stage)
    for the RoPE base ``theta`` (with the model's scaling) and the sliding-window layers' ``local_theta`` (None:
    ``theta``'s tables), at the tables' length, in place: a recipe's context-extension phase. Returns whether any
    table changed. The tables are computed as at construction, so a model rebuilt this way is bitwise one built with
    these bases."""
    changed = False
    for module in model.modules():
        args = getattr(module, "args", None)
        if args is None or not hasattr(module, "rope_cos"):
            continue
        length = module.rope_cos.shape[0]
        tables = {"": rotary_tables(args.head_dim, length, theta, args.rope_scaling)}
        tables["_local"] = rotary_tables(args.head_dim, length, local_theta) if local_theta is not None \
            else tables[""]
        for suffix, (cos, sin) in tables.items():
            for name, new in ((f"rope_cos{suffix}", cos), (f"rope_sin{suffix}", sin)):
                held = getattr(module, name)
                local = held.to_local() if hasattr(held, "to_local") else held
                new = new.to(device=local.device, dtype=local.dtype)
                if not torch.equal(local, new):
                    with torch.no_grad():
                        local.copy_(new)
                    changed = True
    return changed
