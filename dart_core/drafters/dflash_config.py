"""DFlash's ``config.json`` (the published layout: the drafter's own fields plus ``dflash_config``) and the tensors
its checkpoint must hold: what the loader, the launch check and the trainer read before any weight."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dart_core.drafters.layers import Rotary
from dart_core.loading.errors import LoadError


def default_target_layer_ids(num_target_layers: int, num_draft_layers: int) -> tuple[int, ...]:
    """The spec's default decoder-layer OUTPUT ids: ``[L // 2]`` for one draft layer, else evenly from layer 1
    to layer L−3, ``round(1 + i·(L−4)/(k−1))`` with Python's round (half to even), as upstream computes them."""
    L, k = num_target_layers, num_draft_layers
    if k == 1:
        return (L // 2,)
    return tuple(round(1 + i * (L - 4) / (k - 1)) for i in range(k))


@dataclass(frozen=True)
class DFlashConfig:
    """The validated ``config.json`` of a DFlash drafter (Qwen3-style, plus ``block_size``,
    ``num_target_layers`` and ``dflash_config``)."""

    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    attention_bias: bool
    num_target_layers: int
    block_size: int
    mask_token_id: int
    target_layer_ids: tuple[int, ...]
    # ``dflash_config.context_window``: most context rows a block attends to (ours: what training showed it; a
    # block given far more predicts worse; null = all rows)
    context_window: int | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str = "config.json") -> DFlashConfig:
        """Parse and check (a LoadError of ``source`` naming the field): a bad config must not load as garbage."""
        def need(key: str, where: dict[str, Any] = raw) -> Any:
            if key not in where:
                raise LoadError(source, f"missing required field {key!r}")
            return where[key]

        def positive(key: str, value: Any, minimum: int = 1) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise LoadError(source, f"{key} must be an integer >= {minimum}, got {value!r}")
            return value

        hidden = positive("hidden_size", need("hidden_size"))
        heads = positive("num_attention_heads", need("num_attention_heads"))
        kv = positive("num_key_value_heads", raw.get("num_key_value_heads") or heads)
        if heads % kv:
            raise LoadError(source, f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
        layers = positive("num_hidden_layers", need("num_hidden_layers"))
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise LoadError(source, f"hidden_act {act!r} is not supported (DFlash uses silu)")
        types = raw.get("layer_types")
        if types is not None:
            if not isinstance(types, list) or len(types) != layers:
                raise LoadError(source, f"layer_types must list {layers} layer types, got {types!r}")
            odd = sorted({t for t in types if t != "full_attention"})
            if odd:
                raise LoadError(source, f"layer_types {odd} are not supported (only full_attention: a "
                                        "sliding_attention window is not implemented)")
        dflash = raw.get("dflash_config")
        if not isinstance(dflash, dict):
            raise LoadError(source, f"missing or invalid 'dflash_config' (got {dflash!r}): not a DFlash config?")
        mask_id = positive("dflash_config.mask_token_id", need("mask_token_id", dflash), minimum=0)
        n_target = positive("num_target_layers", need("num_target_layers"))
        block = positive("block_size", need("block_size"), minimum=2)
        ids = dflash.get("target_layer_ids")
        if ids is None:
            ids = default_target_layer_ids(n_target, layers)
        elif (not isinstance(ids, list) or not ids
              or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids)):
            raise LoadError(source, f"dflash_config.target_layer_ids must be a non-empty list of integers, "
                                    f"got {ids!r}")
        bad = [i for i in ids if not 0 <= i < n_target]
        if bad:
            raise LoadError(source, f"dflash_config.target_layer_ids {list(ids)}: {bad} outside the "
                                    f"num_target_layers={n_target} decoder layers [0, {n_target - 1}]")
        rope = raw.get("rope_parameters") if isinstance(raw.get("rope_parameters"), dict) else {}
        scaling = raw.get("rope_scaling")
        if scaling is None and rope.get("rope_type", "default") != "default":
            scaling = rope
        if scaling is not None and not isinstance(scaling, dict):
            raise LoadError(source, f"rope_scaling must be null or an object, got {scaling!r}")
        cfg = cls(
            hidden_size=hidden,
            intermediate_size=positive("intermediate_size", need("intermediate_size")),
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=kv,
            head_dim=positive("head_dim", raw.get("head_dim") or hidden // heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(raw.get("rope_theta", rope.get("rope_theta", 10000.0))),
            rope_scaling=scaling,
            max_position_embeddings=positive("max_position_embeddings", raw.get("max_position_embeddings", 2048)),
            attention_bias=bool(raw.get("attention_bias", False)),
            num_target_layers=n_target,
            block_size=block,
            mask_token_id=mask_id,
            target_layer_ids=tuple(int(i) for i in ids),
            context_window=(None if dflash.get("context_window") is None
                            else positive("dflash_config.context_window", dflash["context_window"])),
        )
        try:
            Rotary(cfg)  # type: ignore[arg-type]  # duck-typed: the fields Rotary reads
        except ValueError as e:
            raise LoadError(source, str(e)) from None
        return cfg


def dflash_shapes(cfg: DFlashConfig) -> dict[str, tuple[int, ...]]:
    """Key → shape of the published checkpoint (no embedding, no lm_head)."""
    H, inter, hd = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    out: dict[str, tuple[int, ...]] = {
        "fc.weight": (H, len(cfg.target_layer_ids) * H), "hidden_norm.weight": (H,), "norm.weight": (H,),
    }
    for i in range(cfg.num_hidden_layers):
        p = f"layers.{i}."
        out |= {p + "input_layernorm.weight": (H,), p + "post_attention_layernorm.weight": (H,),
                p + "self_attn.q_proj.weight": (q, H), p + "self_attn.k_proj.weight": (kv, H),
                p + "self_attn.v_proj.weight": (kv, H), p + "self_attn.o_proj.weight": (H, q),
                p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                p + "mlp.gate_proj.weight": (inter, H), p + "mlp.up_proj.weight": (inter, H),
                p + "mlp.down_proj.weight": (H, inter)}
        if cfg.attention_bias:
            out |= {p + "self_attn.q_proj.bias": (q,), p + "self_attn.k_proj.bias": (kv,),
                    p + "self_attn.v_proj.bias": (kv,), p + "self_attn.o_proj.bias": (H,)}
    return out
