"""Declarative parameter-name maps between megamlm and Hugging Face, one per architecture.

megamlm names its modules like Hugging Face's Llama/EuroBERT without the ``model.`` prefix of the
base model, so every map is a table of templates where ``{i}`` is the layer index. Tools and tests
share these tables; nothing else in megamlm spells a Hugging Face parameter name.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import torch

from megamlm.hf.errors import ConversionError

_GLOBAL_KEYS = {
    "embed_tokens.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "lm_head.weight": "lm_head.weight",
}

_LAYER_KEYS = {
    "layers.{i}.input_layernorm.weight": "model.layers.{i}.input_layernorm.weight",
    "layers.{i}.self_attn.q_proj.weight": "model.layers.{i}.self_attn.q_proj.weight",
    "layers.{i}.self_attn.k_proj.weight": "model.layers.{i}.self_attn.k_proj.weight",
    "layers.{i}.self_attn.v_proj.weight": "model.layers.{i}.self_attn.v_proj.weight",
    "layers.{i}.self_attn.o_proj.weight": "model.layers.{i}.self_attn.o_proj.weight",
    "layers.{i}.self_attn.q_proj.bias": "model.layers.{i}.self_attn.q_proj.bias",
    "layers.{i}.self_attn.k_proj.bias": "model.layers.{i}.self_attn.k_proj.bias",
    "layers.{i}.self_attn.v_proj.bias": "model.layers.{i}.self_attn.v_proj.bias",
    "layers.{i}.self_attn.o_proj.bias": "model.layers.{i}.self_attn.o_proj.bias",
    "layers.{i}.post_attention_layernorm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.mlp.gate_proj.weight": "model.layers.{i}.mlp.gate_proj.weight",
    "layers.{i}.mlp.up_proj.weight": "model.layers.{i}.mlp.up_proj.weight",
    "layers.{i}.mlp.down_proj.weight": "model.layers.{i}.mlp.down_proj.weight",
}


_QK_NORM_KEYS = {
    "layers.{i}.self_attn.q_norm.weight": "model.layers.{i}.self_attn.q_norm.weight",
    "layers.{i}.self_attn.k_norm.weight": "model.layers.{i}.self_attn.k_norm.weight",
}
# Gemma 3 names its four norms by place: megamlm's MLP input norm (Llama's post_attention_layernorm) is Gemma's
# pre_feedforward_layernorm, and Gemma's post_attention_layernorm normalises the attention output.
_GEMMA3_LAYER_KEYS = {
    **{ours: hf for ours, hf in _LAYER_KEYS.items() if "post_attention_layernorm" not in ours},
    **_QK_NORM_KEYS,
    "layers.{i}.attn_output_layernorm.weight": "model.layers.{i}.post_attention_layernorm.weight",
    "layers.{i}.post_attention_layernorm.weight": "model.layers.{i}.pre_feedforward_layernorm.weight",
    "layers.{i}.mlp_output_layernorm.weight": "model.layers.{i}.post_feedforward_layernorm.weight",
}
# Gemma 3's multimodal checkpoints hold the text tower under these prefixes (older and newer transformers naming).
_GEMMA3_TEXT_TOWER = {"language_model.model.": "model.", "model.language_model.": "model.",
                      "language_model.lm_head.": "lm_head."}
_GEMMA3_VISION = ("vision_tower.", "multi_modal_projector.", "model.vision_tower.", "model.multi_modal_projector.")


@dataclass(frozen=True)
class KeyMap:
    """How one Hugging Face architecture names megamlm's parameters."""

    name: str
    """The --arch name (eurobert, llama)."""
    model_types: tuple[str, ...]
    """Hugging Face `model_type` values this map imports."""
    architecture: str
    """The Hugging Face class an export is loaded as."""
    global_keys: dict[str, str]
    layer_keys: dict[str, str]
    norm_offset: float = 0.0
    """What the architecture's norms add to their stored weight: Gemma's (1 + weight) RMSNorm has 1, so an
    import adds 1 to every norm weight (in float32, exact) and an export subtracts it."""
    renamed_prefixes: dict[str, str] = dataclasses.field(default_factory=dict)
    """Prefixes of a larger checkpoint's tensors -> the text model's (Gemma 3's multimodal text tower)."""
    skipped_prefixes: tuple[str, ...] = ()
    """Tensors of parts megamlm does not import (vision towers), named in the import log."""
    families: str = ""
    """The model families this map imports, as people name them (tools/convert_from_hf.py --help and the import
    errors list them); empty for an export-only map."""
    fused_keys: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    """Hugging Face tensors that hold several of megamlm's concatenated along dim 0, as templates like layer_keys
    (ModernBERT's ``attn.Wqkv`` = q, k, v projections; ``mlp.Wi`` = gate, up: the first half is activated)."""

    def source_name(self, hf_name: str) -> str | None:
        """A checkpoint's tensor name as the text model's, or None for a part that is skipped."""
        if hf_name.startswith(self.skipped_prefixes):
            return None
        for prefix, replacement in self.renamed_prefixes.items():
            if hf_name.startswith(prefix):
                return replacement + hf_name[len(prefix):]
        return hf_name

    def to_hf(self, name: str) -> str:
        fused = self._fused_part(name)
        if fused is not None:
            return fused[0]
        return _translate(name, self.global_keys, self.layer_keys, self.name)

    def _fused_part(self, name: str) -> tuple[str, int] | None:
        """(the fused Hugging Face tensor holding megamlm's ``name``, its place among the parts), or None."""
        template, index = _layer_template(name)
        for hf_template, parts in self.fused_keys.items():
            if template in parts:
                return hf_template.format(i=index), parts.index(template)
        return None

    def from_hf_tensors(self, hf_name: str, tensor):
        """megamlm's (name, tensor) pairs held by the Hugging Face tensor ``hf_name``: one, or the parts of a fused
        tensor (each its own contiguous copy, so no two share storage)."""
        template, index = _layer_template(hf_name)
        parts = self.fused_keys.get(template)
        if parts is None:
            return [(self.from_hf(hf_name), tensor)]
        if tensor.shape[0] % len(parts):
            raise ConversionError(f"tensor {hf_name!r} has {tensor.shape[0]} rows, which do not split into its "
                                  f"{len(parts)} parts ({', '.join(p.split('.')[-2] for p in parts)})")
        return [(part.format(i=index), chunk.clone())
                for part, chunk in zip(parts, tensor.chunk(len(parts), dim=0))]

    def to_hf_tensors(self, state: dict) -> dict:
        """megamlm's state dict under Hugging Face names, the parts of each fused tensor concatenated in order."""
        out, pending = {}, {}
        for name, tensor in state.items():
            fused = self._fused_part(name)
            if fused is None:
                out[self.to_hf(name)] = tensor
            else:
                pending.setdefault(fused[0], {})[fused[1]] = tensor
        for hf_name, parts in pending.items():
            template, _ = _layer_template(hf_name)
            if len(parts) != len(self.fused_keys[template]):
                raise ConversionError(f"the model holds only some parts of {hf_name!r}; it cannot be exported as "
                                      f"{self.architecture}")
            out[hf_name] = torch.cat([parts[k] for k in range(len(parts))], dim=0)
        return out

    def from_hf(self, name: str) -> str:
        inverse_global = {hf: ours for ours, hf in self.global_keys.items()}
        inverse_layer = {hf: ours for ours, hf in self.layer_keys.items()}
        return _translate(name, inverse_global, inverse_layer, self.name)

    def hf_names(self, num_layers: int) -> list[str]:
        """Every Hugging Face parameter name a model with ``num_layers`` blocks can have (biases included)."""
        names = list(self.global_keys.values())
        for i in range(num_layers):
            names += [template.format(i=i) for template in self.layer_keys.values()]
        return names


def _layer_template(name: str) -> tuple[str, str | None]:
    """(``name`` with its layer index as ``{i}``, the index), or (name, None) outside the layers."""
    match = re.search(r"\.(\d+)\.", name)
    if not match:
        return name, None
    return name[: match.start()] + ".{i}." + name[match.end():], match.group(1)


def _translate(name: str, global_keys: dict[str, str], layer_keys: dict[str, str], arch: str) -> str:
    if name in global_keys:
        return global_keys[name]
    template, index = _layer_template(name)
    if index is not None and template in layer_keys:
        return layer_keys[template].format(i=index)
    raise ConversionError(f"tensor {name!r} has no counterpart in the {arch} key map; it belongs to a layer "
                          "megamlm's model does not have (check the architecture of the checkpoint)")


EUROBERT = KeyMap("eurobert", ("eurobert",), "EuroBertForMaskedLM", _GLOBAL_KEYS, _LAYER_KEYS, families="EuroBERT")
# The decoders share Llama's names; their attention biases differ (megamlm.hf.hf_config).
LLAMA = KeyMap("llama", ("llama",), "LlamaForCausalLM", _GLOBAL_KEYS, _LAYER_KEYS,
               families="Llama 1-3.2, SmolLM, TinyLlama")
QWEN2 = KeyMap("qwen2", ("qwen2",), "Qwen2ForCausalLM", _GLOBAL_KEYS, _LAYER_KEYS, families="Qwen2/2.5")
MISTRAL = KeyMap("mistral", ("mistral",), "MistralForCausalLM", _GLOBAL_KEYS, _LAYER_KEYS, families="Mistral")

QWEN3 = KeyMap("qwen3", ("qwen3",), "Qwen3ForCausalLM", _GLOBAL_KEYS, {**_LAYER_KEYS, **_QK_NORM_KEYS},
               families="Qwen3")
GEMMA3 = KeyMap("gemma3", ("gemma3_text", "gemma3"), "Gemma3ForCausalLM", _GLOBAL_KEYS, _GEMMA3_LAYER_KEYS,
                norm_offset=1.0, renamed_prefixes=_GEMMA3_TEXT_TOWER, skipped_prefixes=_GEMMA3_VISION,
                families="Gemma 3 (text models, and the text tower of multimodal ones)")
# The encoder export of a Gemma 3 decoder: the same tensors, a bidirectional config (use_bidirectional_attention).
# Its config names the causal-LM class: transformers has no masked-LM class for Gemma 3, and pipeline("fill-mask")
# loads the class config.json names, whose LM head gives the MLM logits on this bidirectional config (AutoModel and
# the sequence classifier load by model_type, unchanged).
GEMMA3_ENCODER = dataclasses.replace(GEMMA3, name="gemma3_encoder", model_types=(), architecture="Gemma3ForCausalLM",
                                     families="")



def _with_biases(keys: dict[str, str]) -> dict[str, str]:
    """``keys`` and their ``.bias`` twins (ModernBERT's norm_bias, attention_bias, mlp_bias, decoder_bias...)."""
    return {**keys, **{ours[: -len("weight")] + "bias": hf[: -len("weight")] + "bias" for ours, hf in keys.items()}}


# ModernBERT (and Ettin's, mmBERT's encoders): LayerNorms, an embedding norm, no input norm in layer 0 (absent on
# both sides), fused q/k/v and gate/up projections, and the prediction head before the tied decoder.
_MODERNBERT_GLOBAL = {"embed_tokens.weight": "model.embeddings.tok_embeddings.weight", **_with_biases({
    "embed_norm.weight": "model.embeddings.norm.weight",
    "norm.weight": "model.final_norm.weight",
    "head.dense.weight": "head.dense.weight",
    "head.norm.weight": "head.norm.weight",
    "lm_head.weight": "decoder.weight",
})}
_MODERNBERT_LAYER = _with_biases({
    "layers.{i}.input_layernorm.weight": "model.layers.{i}.attn_norm.weight",
    "layers.{i}.self_attn.o_proj.weight": "model.layers.{i}.attn.Wo.weight",
    "layers.{i}.post_attention_layernorm.weight": "model.layers.{i}.mlp_norm.weight",
    "layers.{i}.mlp.down_proj.weight": "model.layers.{i}.mlp.Wo.weight",
})
_MODERNBERT_MLP = {f"model.layers.{{i}}.mlp.Wi.{kind}": (f"layers.{{i}}.mlp.gate_proj.{kind}",
                                                         f"layers.{{i}}.mlp.up_proj.{kind}")
                   for kind in ("weight", "bias")}
_MODERNBERT_FUSED = {**_MODERNBERT_MLP,
                     **{f"model.layers.{{i}}.attn.Wqkv.{kind}": tuple(f"layers.{{i}}.self_attn.{p}_proj.{kind}"
                                                                      for p in "qkv")
                        for kind in ("weight", "bias")}}
MODERNBERT = KeyMap("modernbert", ("modernbert",), "ModernBertForMaskedLM", _MODERNBERT_GLOBAL, _MODERNBERT_LAYER,
                    families="ModernBERT, Ettin encoders, mmBERT", fused_keys=_MODERNBERT_FUSED)
# Ettin's decoders: the same block with separate q/k/v projections and the prediction head named lm_head.
MODERNBERT_DECODER = KeyMap(
    "modernbert-decoder", ("modernbert-decoder",), "ModernBertDecoderForCausalLM",
    {**{ours: hf.replace("head.", "lm_head.", 1) if ours.startswith("head.") else hf
        for ours, hf in _MODERNBERT_GLOBAL.items()}},
    {**_MODERNBERT_LAYER, **_with_biases({f"layers.{{i}}.self_attn.{p}_proj.weight":
                                          f"model.layers.{{i}}.attn.{p}_proj.weight" for p in "qkv"})},
    families="Ettin decoders (ModernBERT decoder)", fused_keys=_MODERNBERT_MLP)
MODERNBERT_ARCHS = (MODERNBERT.name, MODERNBERT_DECODER.name)

EXPORT_ARCHS = {m.name: m for m in (EUROBERT, LLAMA, QWEN2, MISTRAL, QWEN3, GEMMA3, GEMMA3_ENCODER, MODERNBERT,
                                    MODERNBERT_DECODER)}


def imported_families() -> str:
    """The families tools/convert_from_hf.py imports, from the maps' own declarations (``KeyMap.families``)."""
    return ", ".join(m.families for m in EXPORT_ARCHS.values() if m.model_types)


def keymap_for_model_type(model_type: str) -> KeyMap:
    for keymap in EXPORT_ARCHS.values():
        if model_type in keymap.model_types:
            return keymap
    supported = sorted(t for m in EXPORT_ARCHS.values() for t in m.model_types)
    raise ConversionError(f"unsupported architecture model_type={model_type!r}; megamlm imports "
                          f"{', '.join(supported)} ({imported_families()})")
