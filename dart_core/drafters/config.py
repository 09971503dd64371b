"""The Llama-style ``config.json`` of the published DART and EAGLE-3 drafters, validated."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dart_core.loading.errors import LoadError


@dataclass(frozen=True)
class DrafterConfig:
    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    vocab_size: int
    draft_vocab_size: int
    target_hidden_size: int
    draft_length: int | None = None
    aux_layer_ids: tuple[int, ...] | None = None
    architectures: tuple[str, ...] = ()
    # Most context rows a drafted row attends to (its own row included): a drafter trained on windows of n tokens
    # never saw more, and its deeper predictions fall apart past that (ours record it; null = all rows).
    context_window: int | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, source: str = "config.json") -> DrafterConfig:
        def need(key: str) -> Any:
            if key not in raw:
                raise LoadError(source, f"missing required field {key!r}")
            return raw[key]

        def positive(key: str, value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise LoadError(source, f"{key} must be a positive integer, got {value!r}")
            return value

        hidden = positive("hidden_size", need("hidden_size"))
        heads = positive("num_attention_heads", need("num_attention_heads"))
        kv_heads = positive("num_key_value_heads", raw.get("num_key_value_heads") or heads)
        head_dim = raw.get("head_dim") or hidden // heads
        act = raw.get("hidden_act", "silu")
        if act != "silu":
            raise LoadError(source, f"hidden_act {act!r} is not supported (the published drafters use silu)")
        if raw.get("num_hidden_layers", 1) != 1:
            raise LoadError(source, f"drafters have one layer, config says {raw['num_hidden_layers']}")
        vocab = positive("vocab_size", need("vocab_size"))
        draft_length = raw.get("draft_length")
        aux = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if aux is not None and (len(aux) != 3 or not all(isinstance(i, int) for i in aux)):
            raise LoadError(source, f"eagle_aux_hidden_state_layer_ids must be three integers, got {aux!r}")
        window = raw.get("context_window")
        scaling = raw.get("rope_scaling")
        if scaling is not None and not isinstance(scaling, dict):
            raise LoadError(source, f"rope_scaling must be null or an object, got {scaling!r}")
        return cls(
            hidden_size=hidden,
            intermediate_size=positive("intermediate_size", need("intermediate_size")),
            num_attention_heads=heads,
            num_key_value_heads=kv_heads,
            head_dim=positive("head_dim", head_dim),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=float(raw.get("rope_theta", 10000.0)),
            rope_scaling=scaling,
            max_position_embeddings=positive("max_position_embeddings", raw.get("max_position_embeddings", 2048)),
            vocab_size=vocab,
            draft_vocab_size=positive("draft_vocab_size", raw.get("draft_vocab_size") or vocab),
            target_hidden_size=positive("target_hidden_size", raw.get("target_hidden_size") or hidden),
            draft_length=None if draft_length is None else positive("draft_length", draft_length),
            aux_layer_ids=None if aux is None else tuple(aux),
            architectures=tuple(raw.get("architectures") or ()),
            context_window=None if window is None else positive("context_window", window),
        )
