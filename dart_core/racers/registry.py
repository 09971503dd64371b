"""The one list of racers. The app's columns, controls and colours, the CLIs' choices and flags, the bench's rows,
the bundle's parts and the ``DartModel`` facade all derive from :data:`RACERS`; the decoding loop and the page
name no method. Adding a racer is its drafter module (a :class:`~dart_core.engine.drafter.Drafter` with a
settings dataclass), one entry here, and its tests. A racer either loads its drafter from a checkpoint (``load``:
a model flag, a bundle folder, a launch-check piece) or is model-free (``build``: made on any loaded target, no
checkpoint, loaded whenever a target is); nothing else tells them apart.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from dart_core.drafters import dart, dflash, eagle3
from dart_core.drafters.checkpoint import CheckpointFormat
from dart_core.drafters.dart import DartDrafter, DartSettings
from dart_core.drafters.dflash import DFlashDrafter, DFlashSettings, DFlashTreeDrafter, DFlashTreeSettings
from dart_core.drafters.eagle3 import Eagle3Drafter, Eagle3Settings
from dart_core.drafters.ngram_only import NgramOnlyDrafter, NgramOnlySettings
from dart_core.drafters.prompt_lookup import PromptLookupDrafter, PromptLookupSettings
from dart_core.drafters.settings import knobs, settings_for
from dart_core.drafters.suffix import SuffixDrafter, SuffixSettings
from dart_core.engine.budget import NODE
from dart_core.engine.drafter import Drafter, NoSettings, PlainDecoding
from dart_core.racers.hf_generate import KEY as HF_KEY
from dart_core.racers.hf_generate import stream_hf_generate
from dart_core.racers.llamacpp import INSTALL as LLAMACPP_INSTALL
from dart_core.racers.llamacpp import KEY as LLAMACPP_KEY
from dart_core.racers.llamacpp import LOOKUP_KEY as LLAMACPP_LOOKUP_KEY
from dart_core.racers.llamacpp import setup_llamacpp, stream_llamacpp, stream_llamacpp_lookup


@dataclass(frozen=True)
class Racer:
    """One method of the race. ``key`` names it everywhere (``--methods``, ``--<key>`` model flags, the bundle's
    ``<key>/`` folder, JSON fields); ``load`` builds its drafter from a checkpoint (local dir or Hub id) on the
    loaded target (shared embedding, feature layers bound to it; None: nothing to load, plain decoding);
    ``uses_store``: it drafts with the N-gram store; ``opt_in``: the app adds its column only when asked
    (``--compare-<key>``) unless a bundle holds it; ``folder``: the bundle's folder of its checkpoint when it is
    not ``<key>/`` (two racers that read one drafter share it); ``runner``: its own decoding loop in place of the
    engine's (``stream``'s signature; HF ``generate``), for a racer that loads nothing and is enabled by name;
    ``checkpoint``: its checkpoint's format (weights files, config, tensors, the published ones), declared by its
    drafter module, which the launch check reads instead of knowing racers by name; ``build``: a model-free
    racer's drafter made on the loaded target alone (no checkpoint: no model flag, bundle folder or launch-check
    piece; loaded with every target, and when it ``uses_store``, wherever a store is: the store is all it drafts
    from); ``ticked``: the page's Racers picker ticks it by default (a model-free racer that lengthens the first
    race is left for the visitor to tick); ``setup``: a runner's outside engine, made once at load on the target
    (with its tokenizer and the model's identity: the llama.cpp model on the target's weights), where a missing
    install or a target it cannot serve is refused before any race; what it returns says what the benchmark records
    of it (``describe()``) and the load's line (``summary()``); ``needs_module``, ``install``: the optional module
    its engine imports and how to install it, which the launch check looks for before any weight loads."""

    key: str
    label: str
    color: str
    blurb: str
    load: Callable[[str | os.PathLike[str], Any], Drafter] | None = None
    settings_type: type = NoSettings
    uses_store: bool = False
    opt_in: bool = False
    example: str = ""  # a published checkpoint, for help texts
    folder: str = ""
    runner: Callable[..., Iterator[Any]] | None = None
    checkpoint: CheckpointFormat | None = None
    build: Callable[[Any], Drafter] | None = None
    ticked: bool = True
    setup: Callable[[Any, Any, str | None], Any] | None = None
    needs_module: str = ""  # a module its engine imports that is an optional install (checked before loading)
    install: str = ""  # how to install that module

    @property
    def dest(self) -> str:
        """The key as a Python identifier (argparse destinations, keyword arguments)."""
        return self.key.replace("-", "_")

    @property
    def bundle_dir(self) -> str:
        """The folder of its checkpoint in a bundle (``<key>`` unless ``folder`` names another)."""
        return self.folder or self.key

    @property
    def drafts(self) -> bool:
        """Whether it proposes drafts (plain decoding does not: the baseline)."""
        return self.load is not None or self.build is not None

    @property
    def model_free(self) -> bool:
        """Whether its drafter needs no checkpoint (made on the target by ``build``)."""
        return self.build is not None

    @property
    def needs_store(self) -> bool:
        """Whether it cannot draft without the N-gram store (a model-free racer that drafts with it)."""
        return self.model_free and self.uses_store

    def default_settings(self, device: str | torch.device = "cuda", budget: str = NODE) -> Any:
        """Its settings' defaults on ``device`` under the tree ``budget`` rule (with the budget off, smaller trees on
        a CPU where its fields say so)."""
        return settings_for(self.settings_type, device, budget)

    def knobs(self) -> list[Any]:
        return list(knobs(self.settings_type))


RACERS: list[Racer] = [
    Racer("dart", "DART", "#f97316", "one drafter forward for the whole tree, N-gram-guided tree search",
          load=DartDrafter.from_pretrained, settings_type=DartSettings, uses_store=True,
          example="fvliang/qwen8b-dart", checkpoint=dart.CHECKPOINT),
    Racer("eagle3", "EAGLE-3", "#3b82f6", "one drafter forward per tree level", load=Eagle3Drafter.from_pretrained,
          settings_type=Eagle3Settings, opt_in=True, example="AngelSlim/Qwen3-8B_eagle3",
          checkpoint=eagle3.CHECKPOINT),
    Racer("dflash", "DFlash", "#a855f7", "one drafter forward fills a block; its argmax chain is verified",
          load=DFlashDrafter.from_pretrained, settings_type=DFlashSettings, opt_in=True,
          example="z-lab/Qwen3-8B-DFlash-b16", checkpoint=dflash.CHECKPOINT),
    Racer("dflash-tree", "DFlash-tree", "#ec4899", "DFlash's block rows, top-k each, N-gram-guided tree search",
          load=DFlashTreeDrafter.from_pretrained, settings_type=DFlashTreeSettings, uses_store=True, opt_in=True,
          example="z-lab/Qwen3-8B-DFlash-b16", folder="dflash", checkpoint=dflash.CHECKPOINT),
    Racer("prompt-lookup", "Prompt lookup", "#22c55e", "model-free: the text that followed the context's last "
          "n-gram earlier in the prompt or the reply, as a chain", build=PromptLookupDrafter.for_target,
          settings_type=PromptLookupSettings, ticked=False),
    Racer("ngram-only", "N-gram only", "#eab308", "model-free: DART's tree search over the N-gram store alone, no "
          "drafter forward", build=NgramOnlyDrafter.for_target, settings_type=NgramOnlySettings, uses_store=True,
          ticked=False),
    Racer("suffix", "Suffix decoding", "#06b6d4", "model-free: the most frequent continuations of the context's "
          "latest tokens in this answer's prompt and text and in the racer's own earlier answers, as a tree",
          build=SuffixDrafter.for_target, settings_type=SuffixSettings, ticked=False),
    Racer(HF_KEY, "HF generate", "#64748b", "transformers' own generate() on the same weights: the real alternative",
          runner=stream_hf_generate, opt_in=True),
    Racer(LLAMACPP_KEY, "llama.cpp", "#78716c", "llama.cpp (llama-cpp-python) decoding the same weights, written to "
          "GGUF in the target's dtype: the CPU user's real alternative", runner=stream_llamacpp,
          setup=setup_llamacpp, opt_in=True, needs_module="llama_cpp", install=LLAMACPP_INSTALL),
    Racer(LLAMACPP_LOOKUP_KEY, "llama.cpp lookup", "#a8a29e", "llama-cpp-python's own prompt-lookup speculative "
          "decoding on the same GGUF", runner=stream_llamacpp_lookup, setup=setup_llamacpp, opt_in=True,
          ticked=False, needs_module="llama_cpp", install=LLAMACPP_INSTALL),
    Racer("ar", "AR", "#94a3b8", "plain autoregressive decoding: one target forward per token"),
]
BASELINE = "ar"  # the racer every speedup is measured against
PEER = LLAMACPP_KEY  # the outside engine every speedup is also measured against, when it races (speedup_vs_peer)
UPSTREAM = "dart"  # the racer the reference implementation's facade stands for (DartModel.dart_generate)
PLAIN = PlainDecoding()


def register(entry: Racer) -> Racer:
    """Add a racer (before the baseline, which stays last); its key must be new. The list is shared, so every
    module that derives from it sees the new racer."""
    if any(r.key == entry.key for r in RACERS):
        raise ValueError(f"a racer named {entry.key!r} is already registered")
    if not entry.key.replace("-", "").replace("_", "").isalnum() or entry.key != entry.key.lower():
        raise ValueError(f"racer key {entry.key!r}: use lower-case letters, digits, '-' or '_'")
    RACERS.insert(len(RACERS) - 1, entry)
    return entry


def unregister(key: str) -> None:
    """Remove a racer added by :func:`register` (the baseline stays)."""
    if key == BASELINE:
        raise ValueError("the baseline cannot be removed")
    RACERS[:] = [r for r in RACERS if r.key != key]


def racer(key: str) -> Racer:
    """The racer named ``key``, or a ValueError listing the known ones."""
    for r in RACERS:
        if r.key == key:
            return r
    raise ValueError(f"unknown method {key!r}; the racers are {', '.join(r.key for r in RACERS)}")


def drafting_racers() -> Iterator[Racer]:
    """The racers that propose drafts (from a checkpoint or model-free), in registry order."""
    return (r for r in RACERS if r.drafts)


def checkpoint_racers() -> Iterator[Racer]:
    """The racers that load their drafter from a checkpoint, in registry order."""
    return (r for r in RACERS if r.load is not None)


def model_free_racers() -> Iterator[Racer]:
    """The racers whose drafter needs no checkpoint, in registry order."""
    return (r for r in RACERS if r.model_free)


def model_free_asked(methods: Iterable[str] | None) -> dict[str, bool | None]:
    """``load_arena``'s switches of the model-free racers for a run of ``methods``: each one named is asked for
    (True: refused clearly when it cannot load, e.g. no store), the others off; ``None`` (every loaded racer):
    each loads where it can."""
    names = None if methods is None else set(methods)
    return {r.key: None if names is None else r.key in names for r in model_free_racers()}


def runners_asked(methods: Iterable[str] | None) -> dict[str, bool]:
    """``load_arena``'s switches of the racers with an engine of their own to set up (llama.cpp): on when named in
    ``methods`` (they are opt-in: ``None``, every loaded racer, leaves them off)."""
    names = set(methods or ())
    return {r.key: True for r in RACERS if r.setup is not None and r.key in names}


def runner_racers() -> Iterator[Racer]:
    """The racers with a decoding loop of their own (HF ``generate``), in registry order."""
    return (r for r in RACERS if r.runner is not None)


def label(key: str) -> str:
    return next((r.label for r in RACERS if r.key == key), key)


def color(key: str) -> str:
    return next((r.color for r in RACERS if r.key == key), "#14b8a6")


def order(keys: Any) -> list[str]:
    """``keys`` in registry order (unknown ones last, as given)."""
    keys = list(keys)
    known = [r.key for r in RACERS if r.key in keys]
    return known + [k for k in keys if k not in known]
