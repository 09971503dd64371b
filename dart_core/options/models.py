"""Which models a command line loads: ``--bundle`` (the default one unless ``--base`` names another target),
``--base``, one ``--<racer>`` flag per drafter checkpoint, the N-gram store, and chat or completion mode; declared
here once for ``generate`` and the benchmarks, resolved by :func:`resolve_models` (a bundle's parts fill in what the
flags leave out)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dart_core.bundle import Bundle, BundleError, default_bundle_dir, open_bundle
from dart_core.ngram.memory import MAX_ANSWERS, MEMORY_NEEDS_STORE
from dart_core.options.runtime import add_runtime_arguments
from dart_core.racers.registry import checkpoint_racers


class ModelsError(ValueError):
    """The flags name no loadable set of models (a missing bundle, a flag that needs another): said as is."""


@dataclass
class Models:
    """The resolved references: the target, each racer's drafter (None: not raced), the N-gram store, and the
    bundle they came from with its default mode."""

    base: str
    drafters: dict[str, str | None]
    ngram: str | None
    small_ngram: bool
    bundle: Path | None = None
    opened: Bundle | None = None
    chat: bool = False  # chat mode unless asked otherwise: with --base, or a chat bundle
    notes: list[str] = field(default_factory=list)
    ngram_memory: bool = False  # the searching racers remember the session's answers (--ngram-memory)


def add_model_arguments(p: argparse.ArgumentParser) -> None:
    """The models and where they run (:func:`~dart_core.options.runtime.add_runtime_arguments`), as one group."""
    m = p.add_argument_group("models (local directories or Hub ids)")
    m.add_argument("--bundle", type=Path, default=None,
                   help="bundle dir: bundle.json naming the target (or a target/ dir), "
                        f"{', '.join(sorted({r.bundle_dir + '/' for r in checkpoint_racers()}))}, ngram/small.ngram, "
                        f"prompts.jsonl (default: {default_bundle_dir()}, or $DART_ARENA_BUNDLE; assets/tiny: the "
                        "stdlib toy); used unless --base is given")
    m.add_argument("--base", help="target model (overrides the bundle's target), e.g. Qwen/Qwen3-1.7B")
    for r in checkpoint_racers():
        m.add_argument(f"--{r.key}", metavar="MODEL",
                       help=f"{r.label} drafter ({r.blurb}), e.g. {r.example} (overrides the bundle's {r.bundle_dir}/)")
    m.add_argument("--ngram", help="N-gram store: a file, or a dir / Hub repo with small.trie / full.trie")
    m.add_argument("--small-ngram", action="store_true", help="use small.trie instead of full.trie with --ngram")
    add_ngram_memory_argument(m)
    add_runtime_arguments(m)


def add_ngram_memory_argument(group: Any) -> None:
    """``--ngram-memory``: declared here once, for the command lines and the app."""
    group.add_argument("--ngram-memory", action="store_true", default=False,
                       help="the racers that search with the N-gram store (DART, DFlash-tree, N-gram only) also "
                            "count the N-grams of their own earlier answers, in memory, bounded (the oldest "
                            f"evicted past {MAX_ANSWERS}); the store file stays read-only. Needs an N-gram store")


def check_ngram_memory(on: bool, ngram: str | None) -> None:
    """Refuse ``--ngram-memory`` without a store, in one line naming the fix (ModelsError)."""
    if on and not ngram:
        raise ModelsError(MEMORY_NEEDS_STORE)


def add_mode_arguments(g: Any) -> None:
    """``--raw`` / ``--chat`` (unset: the bundle's mode, chat with --base) and ``--system``."""
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--raw", dest="chat", action="store_false", default=None,
                      help="completion mode, no chat template (default for a completion bundle: the toy)")
    mode.add_argument("--chat", dest="chat", action="store_true",
                      help="chat template when the tokenizer has one (default with --base and for a chat bundle: "
                           "the default one)")
    g.add_argument("--system", default=None, help="system prompt (chat mode)")


def resolve_models(args: argparse.Namespace) -> Models:
    """Bundle parts, overridden by explicit ``--base`` / ``--<racer>`` / ``--ngram``. With ``--base`` a bundle
    given by ``--bundle`` only lends its drafters (a broken ``bundle.json`` is still an error)."""
    use_bundle = args.bundle is not None or args.base is None
    notes: list[str] = []
    parts: dict[str, str | None] = {**{r.key: getattr(args, r.dest, None) for r in checkpoint_racers()},
                                    "ngram": args.ngram}
    opened: Bundle | None = None
    bundle: Path | None = None
    if use_bundle:
        bundle = Path(args.bundle).expanduser() if args.bundle is not None else default_bundle_dir()
        try:
            opened = open_bundle(bundle)
        except BundleError as e:
            if args.base is None or not bundle.is_dir() or (bundle / "bundle.json").exists():
                raise ModelsError(f"{e}\n(--bundle DIR picks another bundle, e.g. --bundle assets/tiny for the "
                                  "stdlib toy; --base MODEL another target.)") from None
        for name, sub in [*((r.key, r.bundle_dir) for r in checkpoint_racers()), ("ngram", "ngram/small.ngram")]:
            if parts[name] is None:
                if (bundle / sub).exists():
                    parts[name] = str(bundle / sub)
                else:
                    notes.append(f"bundle has no {sub}: {name} skipped")
    base = args.base or opened.target  # type: ignore[union-attr]
    chat = args.chat if getattr(args, "chat", None) is not None else (
        args.base is not None or (opened is not None and opened.chat))
    ngram_memory = bool(getattr(args, "ngram_memory", False))
    check_ngram_memory(ngram_memory, parts["ngram"])
    return Models(base, {r.key: parts[r.key] for r in checkpoint_racers()}, parts["ngram"], bool(args.small_ngram),
                  bundle, opened, chat, notes, ngram_memory)
