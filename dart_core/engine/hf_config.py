"""What a Hugging Face config says about a target, in one place: its decoder settings (``text_config``, also for
multimodal wrappers and raw ``config.json`` dicts), its depth, and the three layers whose hidden states feed a
drafter (``feature_layer_ids``). Pure Python over config objects or dicts, no torch: the launch check reads it
before anything heavy is imported, the target and the drafters when they load."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def text_config(config: Any) -> Any:
    """The decoder settings of a config: multimodal/composite configs keep them in a sub-config (``text_config``),
    plain ones return themselves. ``config`` is a transformers config object or its ``config.json`` as a dict."""
    if isinstance(config, Mapping):
        inner = config.get("text_config")
        return inner if isinstance(inner, Mapping) and "hidden_size" in inner else config
    get = getattr(config, "get_text_config", None)
    if callable(get):
        try:
            return get(decoder=True)
        except TypeError:
            return get()
    return config


def eagle_layer_ids(config: Any) -> Sequence[int] | None:
    """The EAGLE-3 feature layers a config names (``eagle_config.eagle_aux_hidden_state_layer_ids``), or None."""
    eagle = getattr(config, "eagle_config", None)
    if eagle is None:
        return None
    if isinstance(eagle, dict):
        return eagle.get("eagle_aux_hidden_state_layer_ids")
    return getattr(eagle, "eagle_aux_hidden_state_layer_ids", None)


def feature_layer_ids(config: Any, layer_ids: Sequence[int] | None = None) -> tuple[int, int, int]:
    """Indices into HF's ``hidden_states`` tuple of the three drafter features, low to high.

    Default (spec "Target features"): ``(2, L//2, L-3)`` with ``L = num_hidden_layers``, i.e. the inputs of
    decoder layers 2, L//2 and L-3. ``layer_ids`` (or, failing that, ``config.eagle_config.
    eagle_aux_hidden_state_layer_ids``) are decoder-layer OUTPUT ids, as EAGLE-3 configs give them: the output
    of layer i is ``hs[i + 1]``. Raises ValueError when the three indices are not distinct or out of range —
    tiny models (L < 6) collide under the default rule, and a drafter fed duplicated features is silently wrong.
    """
    text = text_config(config)
    n_layers = int(text.num_hidden_layers)
    ids = layer_ids if layer_ids is not None else eagle_layer_ids(text)
    if ids is None and text is not config:
        ids = eagle_layer_ids(config)
    if ids is not None:
        ids = [int(i) for i in ids]
        if len(ids) != 3:
            raise ValueError(f"expected 3 auxiliary hidden-state layer ids, got {ids}")
        bad = [i for i in ids if not 0 <= i < n_layers]
        if bad:
            raise ValueError(
                f"auxiliary hidden-state layer ids {ids} out of range: decoder-layer outputs must lie in "
                f"[0, {n_layers - 1}] for a target with num_hidden_layers={n_layers}"
            )
        hs_ids = tuple(sorted(i + 1 for i in ids))
        source = f"layer-output ids {ids}"
    else:
        hs_ids = (2, n_layers // 2, n_layers - 3)
        source = f"default rule (2, L//2, L-3) with L={n_layers}"
        bad = [i for i in hs_ids if not 0 <= i <= n_layers]
        if bad:
            raise ValueError(f"feature layers {hs_ids} from the {source} fall outside hidden_states[0..{n_layers}]")
    if len(set(hs_ids)) != 3:
        raise ValueError(
            f"feature layers {hs_ids} (hidden_states indices, from the {source}) are not distinct: "
            "the target is too shallow for three distinct drafter features"
        )
    return hs_ids  # type: ignore[return-value]


def num_layers(config: Any) -> int | None:
    """The decoder depth (``num_hidden_layers`` of the text config), or None when the config does not say."""
    text = text_config(config) if config is not None else None
    n = text.get("num_hidden_layers") if isinstance(text, Mapping) else getattr(text, "num_hidden_layers", None)
    return int(n) if n is not None else None
