"""Model presets for the sparse-prefix-caching cost model.

A checkpoint stores every recurrent layer's state at one position, so it costs
``recurrent layers x state bytes per layer``; the attention layers of a hybrid
keep dense KV, ``attention layers x 2 (K and V) x KV heads x head dim x dtype
bytes`` per token, whatever the placement.  Each preset below is computed from
the model's published configuration (nothing is downloaded; every value is
cited beside it).  States are counted in the checkpoint's own dtype (bf16, the
``torch_dtype`` of both configs); a server that keeps SSM states in float32
doubles ``state_bytes``.

A recurrent layer's state is its SSM / delta-rule state plus the short
convolution's last ``kernel - 1`` inputs, both needed to resume exactly.

``positions`` is the unit preset: a checkpoint costs 1 and KV nothing, so
"checkpoint bytes" read as checkpoint counts.
"""
from __future__ import annotations

from dataclasses import dataclass

from prefixbench.errors import ConfigError

__all__ = ["MODELS", "ModelPreset", "get_model"]


@dataclass(frozen=True)
class ModelPreset:
    name: str
    summary: str
    recurrent_layers: int
    state_elems_per_layer: int      # recurrent state + conv state, elements
    attention_layers: int
    kv_elems_per_token_per_layer: int   # K and V, elements
    dtype_bytes: int
    source: str

    @property
    def state_bytes(self) -> int:
        """Bytes of one checkpoint (every recurrent layer's state at one position)."""
        return self.recurrent_layers * self.state_elems_per_layer * self.dtype_bytes

    @property
    def kv_bytes_per_token(self) -> int:
        """Dense attention KV bytes per token (zero for a purely recurrent model)."""
        return self.attention_layers * self.kv_elems_per_token_per_layer * self.dtype_bytes


# -- NVIDIA Nemotron-H-8B (Mamba-2 hybrid) ------------------------------------
# https://huggingface.co/nvidia/Nemotron-H-8B-Base-8K/blob/main/config.json and
# https://docs.nvidia.com/nemo/megatron-bridge/latest/models/llm/nemotronh.html
_NH_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"  # hybrid_override_pattern
_NH_MAMBA_LAYERS = _NH_PATTERN.count("M")      # 24 Mamba-2 layers ("M")
_NH_ATTN_LAYERS = _NH_PATTERN.count("*")       # 4 attention layers ("*")
_NH_HEADS = 128          # mamba_num_heads
_NH_HEAD_DIM = 64        # mamba_head_dim
_NH_STATE = 128          # ssm_state_size
_NH_GROUPS = 8           # n_groups
_NH_CONV = 4             # conv_kernel
_NH_KV_HEADS = 8         # num_key_value_heads
_NH_ATT_HEAD_DIM = 128   # hidden_size 4096 / num_attention_heads 32 (attention_head_dim)
_NH_CONV_DIM = _NH_HEADS * _NH_HEAD_DIM + 2 * _NH_GROUPS * _NH_STATE   # x, B and C channels

NEMOTRON_H_8B = ModelPreset(
    name="nemotron-h-8b",
    summary="NVIDIA Nemotron-H-8B: 24 Mamba-2 + 4 attention layers (of 52)",
    recurrent_layers=_NH_MAMBA_LAYERS,
    state_elems_per_layer=_NH_HEADS * _NH_HEAD_DIM * _NH_STATE + _NH_CONV_DIM * (_NH_CONV - 1),
    attention_layers=_NH_ATTN_LAYERS,
    kv_elems_per_token_per_layer=2 * _NH_KV_HEADS * _NH_ATT_HEAD_DIM,
    dtype_bytes=2,       # torch_dtype bfloat16
    source="huggingface.co/nvidia/Nemotron-H-8B-Base-8K config.json",
)

# -- Qwen3-Next-80B-A3B (gated DeltaNet hybrid) -------------------------------
# https://huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct/blob/main/config.json
_QN_LAYERS = 48          # num_hidden_layers
_QN_INTERVAL = 4         # full_attention_interval: every 4th layer is full attention
_QN_ATTN_LAYERS = _QN_LAYERS // _QN_INTERVAL          # 12
_QN_LINEAR_LAYERS = _QN_LAYERS - _QN_ATTN_LAYERS      # 36 gated DeltaNet layers
_QN_K_HEADS = 16         # linear_num_key_heads
_QN_V_HEADS = 32         # linear_num_value_heads
_QN_K_DIM = 128          # linear_key_head_dim
_QN_V_DIM = 128          # linear_value_head_dim
_QN_CONV = 4             # linear_conv_kernel_dim
_QN_KV_HEADS = 2         # num_key_value_heads
_QN_HEAD_DIM = 256       # head_dim
_QN_CONV_DIM = 2 * _QN_K_HEADS * _QN_K_DIM + _QN_V_HEADS * _QN_V_DIM   # q, k and v channels

QWEN3_NEXT_80B = ModelPreset(
    name="qwen3-next-80b",
    summary="Qwen3-Next-80B-A3B: 36 gated DeltaNet + 12 full attention layers",
    recurrent_layers=_QN_LINEAR_LAYERS,
    state_elems_per_layer=_QN_V_HEADS * _QN_K_DIM * _QN_V_DIM + _QN_CONV_DIM * (_QN_CONV - 1),
    attention_layers=_QN_ATTN_LAYERS,
    kv_elems_per_token_per_layer=2 * _QN_KV_HEADS * _QN_HEAD_DIM,
    dtype_bytes=2,       # torch_dtype bfloat16
    source="huggingface.co/Qwen/Qwen3-Next-80B-A3B-Instruct config.json",
)

POSITIONS = ModelPreset(
    name="positions", summary="unit cost: a checkpoint costs 1, KV nothing",
    recurrent_layers=1, state_elems_per_layer=1, attention_layers=0,
    kv_elems_per_token_per_layer=0, dtype_bytes=1, source="-")

#: preset name -> preset
MODELS: dict[str, ModelPreset] = {m.name: m for m in (POSITIONS, NEMOTRON_H_8B, QWEN3_NEXT_80B)}


def get_model(name: str) -> ModelPreset:
    """The preset ``name``, or one :class:`ConfigError` line listing the presets."""
    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown model preset {name!r}; available: "
                          f"{', '.join(sorted(MODELS))}") from None
