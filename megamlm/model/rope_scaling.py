"""The RoPE scaling parameters (``RopeScaling``), apart from the tables they scale (megamlm/model/rope.py): the
config reads and checks them without importing torch, so ``pretrain.py --help`` starts in a moment."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal, get_args

RopeScalingType = Literal["linear", "llama3", "yarn"]

_REQUIRED = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings"),
}
_OPTIONAL = {
    "linear": (),
    "llama3": (),
    "yarn": ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim", "truncate"),
}


@dataclass(frozen=True)
class RopeScaling:
    """One RoPE frequency scaling; the field names are Hugging Face's ``rope_parameters`` keys."""

    rope_type: RopeScalingType
    factor: float
    original_max_position_embeddings: int | None = None
    """llama3, yarn: the context the model was pretrained with before the scaling."""
    low_freq_factor: float | None = None
    """llama3."""
    high_freq_factor: float | None = None
    """llama3."""
    beta_fast: float | None = None
    """yarn (default 32)."""
    beta_slow: float | None = None
    """yarn (default 1)."""
    attention_factor: float | None = None
    """yarn: the factor on cos/sin (default derived from ``factor``, ``mscale`` and ``mscale_all_dim``)."""
    mscale: float | None = None
    """yarn."""
    mscale_all_dim: float | None = None
    """yarn."""
    truncate: bool | None = None
    """yarn: round the correction range to whole dimensions (default true)."""

    @classmethod
    def from_dict(cls, params: dict) -> "RopeScaling | None":
        """Hugging Face's ``rope_parameters``/``rope_scaling`` dict (``rope_theta`` ignored) -> a scaling, or None
        for plain RoPE. Raises ValueError naming an unsupported type or a missing/unknown key."""
        params = dict(params)
        kind = params.pop("rope_type", None) or params.pop("type", None) or "default"
        params.pop("type", None)
        params.pop("rope_theta", None)
        partial = params.pop("partial_rotary_factor", None)
        if partial not in (None, 1, 1.0):
            raise ValueError(f"partial_rotary_factor={partial} (rotary embedding on part of each head) is not "
                             "supported; megamlm rotates the whole head")
        if kind == "default":  # transformers ignores scaling keys for the default type
            return None
        if kind not in get_args(RopeScalingType):
            raise ValueError(f"RoPE type {kind!r} is not supported (megamlm builds fixed rotary tables: default, "
                             f"{', '.join(get_args(RopeScalingType))})")
        missing = [k for k in _REQUIRED[kind] if params.get(k) is None]
        if missing:
            raise ValueError(f"RoPE type {kind!r} needs {', '.join(missing)}")
        unknown = sorted(set(params) - set(_REQUIRED[kind]) - set(_OPTIONAL[kind]))
        unknown = [k for k in unknown if params[k] is not None]
        if unknown:
            raise ValueError(f"RoPE type {kind!r} with {', '.join(unknown)} is not supported")
        types = {f.name: f.type for f in fields(cls)}
        values = {}
        for key, value in params.items():
            if value is None:
                continue
            if "bool" in types[key]:
                values[key] = bool(value)
            elif "int" in types[key]:
                values[key] = int(value)
            else:
                values[key] = float(value)
        return cls(rope_type=kind, **values)

    def to_dict(self) -> dict:
        """Only the keys that are set, as Hugging Face writes them."""
        return {k: v for k, v in asdict(self).items() if v is not None}
