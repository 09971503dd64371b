"""The facade that keeps scripts written for the reference implementation working (``DartModel.from_pretrained``
/ ``dart_generate`` / ``ar_generate``), on :func:`dart_core.arena.load_arena`. Kept apart from the arena because
its argument names are the reference's, not ours."""

from __future__ import annotations

import functools
from typing import Any

import torch

from dart_core.arena import Arena, load_arena
from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.budget import OFF
from dart_core.engine.loop import Step
from dart_core.racers.registry import RACERS, UPSTREAM, checkpoint_racers, racer


class DartModel:
    """The reference's API on our engine, so its scripts keep working::

        model = DartModel.from_pretrained(base_model_name_or_path=..., dart_model_name_or_path=...,
                                          ngram_model_name_or_path=..., is_small_ngram=True, torch_dtype=...)
        output_ids = model.dart_generate(input_ids, temperature=0.7, top_p=0.9, top_k=50,
                                         max_new_token_num=512, max_length=2048)

    Outputs are ``[1, prompt + new]`` LongTensors, like Hugging Face ``generate``. Every racer of
    ``dart_core.racers.registry`` has its ``<key>_generate`` method (``eagle3_generate`` with an EAGLE-3 head
    given, ``ar_generate`` always), all on the same loaded target; a racer loaded from a checkpoint has its
    ``<key>_model_name_or_path`` argument, a model-free one loads with every target (the N-gram-only racer with an
    N-gram store).
    """

    def __init__(self, arena: Arena) -> None:
        self.arena = arena
        self.tokenizer = arena.tokenizer
        self.last_steps: list[Step] = []

    @classmethod
    def from_pretrained(
        cls,
        base_model_name_or_path: str,
        dart_model_name_or_path: str | None = None,
        ngram_model_name_or_path: str | None = None,
        is_small_ngram: bool = False,
        device: str | None = None,
        **hf_kwargs: Any,
    ) -> DartModel:
        if hf_kwargs.get("device_map") == "auto":
            device = "auto"
            hf_kwargs.pop("device_map")
        parts = {r.key: hf_kwargs.pop(f"{r.dest}_model_name_or_path", None) for r in checkpoint_racers()}
        parts[UPSTREAM] = parts.get(UPSTREAM) or dart_model_name_or_path
        return cls(load_arena(base_model_name_or_path, ngram=ngram_model_name_or_path, small_ngram=is_small_ngram,
                              device=device, **parts, **hf_kwargs))

    def to(self, device: str | torch.device) -> DartModel:
        """Move target and drafters (a no-op for a target spread with ``device_map``)."""
        model = self.arena.target.model
        if getattr(model, "hf_device_map", None) is None:
            model.to(device)
        for key, d in self.arena.drafters.items():
            if racer(key).model_free:  # nothing to move
                continue
            d.to(self.arena.target.embed_tokens.weight.device)  # type: ignore[attr-defined]
            d.embed_weight = self.arena.target.embed_tokens.weight.detach()  # type: ignore[attr-defined]
        return self

    def eval(self) -> DartModel:
        return self

    def generate(self, method: str, input_ids: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0,
                 top_k: int = 0, max_new_token_num: int = 512, max_length: int | None = 2048, seed: int | None = None,
                 settings: Any = None, budget: str | None = None) -> torch.Tensor:
        """``method``'s output ids ``[1, prompt + new]``; ``settings``: that racer's (None: its defaults);
        ``budget``: the tree budget's rule (None: the arena's, or fixed trees when ``seed`` is given: the budget
        sizes trees by this machine's timings, and a tree of another size draws other samples, so a seed alone
        would not reproduce a sampled output)."""
        if budget is None and seed is not None:
            budget = OFF
        sampling = SamplingConfig(temperature=temperature, top_p=top_p, top_k=top_k)
        generator = None
        if seed is not None:
            generator = torch.Generator(device=self.arena.target.feature_device).manual_seed(seed)
        steps = list(self.arena.stream(method, input_ids, sampling=sampling, max_new_tokens=max_new_token_num,
                                       max_length=max_length, generator=generator, settings=settings,
                                       budget=budget))
        self.last_steps = steps
        new = torch.tensor([[t for s in steps for t in s.tokens]], dtype=torch.long, device=input_ids.device)
        return torch.cat([input_ids.reshape(1, -1).long(), new], dim=1)

    def dart_generate(self, input_ids: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0, top_k: int = 0,
                      max_new_token_num: int = 512, max_length: int | None = 2048, seed: int | None = None,
                      settings: Any = None, budget: str | None = None) -> torch.Tensor:
        """The reference's entry point."""
        return self.generate(UPSTREAM, input_ids, temperature, top_p, top_k, max_new_token_num, max_length, seed,
                             settings, budget)

    def __getattr__(self, name: str) -> Any:
        """``<key>_generate`` for every racer (``eagle3_generate``, ``ar_generate``, …)."""
        dest = name.removesuffix("_generate")
        found = next((r.key for r in RACERS if r.dest == dest), None)
        if name.endswith("_generate") and found is not None:
            return functools.partial(self.generate, found)
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
