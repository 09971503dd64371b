"""The flags' values checked once, right after parsing and before any model loads: ``--limit``, ``--max-new-tokens``,
``--max-length``, ``--seeds``, ``--warmup``, ``--methods``, the sampling flags, each racer's settings, a prompt given
on the command line and ``--threads``, for ``generate`` and every benchmark that has them.

Why: a bad value used to surface only after every model had loaded (seconds on the toy, minutes for a large target),
or never (``--limit -1`` dropped the last prompt, ``--max-new-tokens 100000`` ran with no word). The target's real
limits are read from its files without loading it (:func:`target_limits`: ``config.json`` and the tokenizer's
vocabulary, local files only, never a download); where they cannot be read before loading, a fixed cap stands in
for the context and the loaded model is checked against the same rules (:func:`loaded_problem`) before any prompt
is tokenized; a prompt set read from a file is checked once read, before the load (:func:`prompts_problem`).
Torch-free at import, like the rest of :mod:`dart_core.options`; the check itself runs after the command's own
imports (its flags' choices come from the racer registry, which imports torch), not after any weight is read.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MAX_NEW_TOKENS_CAP = 32768  # --max-new-tokens' cap when the target's context cannot be read before loading
FLOORS = (  # (dest, least value, what the least value means or "")
    ("limit", 0, "0: every prompt"),
    ("max_new_tokens", 1, ""),
    ("max_length", 1, ""),
    ("seeds", 1, ""),
    ("warmup", 0, ""),
)
SAMPLING = (("temperature", "--temperature"), ("top_p", "--top-p"), ("top_k", "--top-k"))


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the OS tells it, else ``os.cpu_count()``)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def thread_count(text: str) -> int:
    """``--threads``' type: a whole number from 1 to :func:`usable_cores` (more threads than cores only make
    PyTorch's parallel regions wait for each other)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of threads, got {text!r}") from None
    cores = usable_cores()
    if not 1 <= n <= cores:
        raise argparse.ArgumentTypeError(f"{n}: must be between 1 and {cores}, the CPU cores this process may use")
    return n


@dataclass(frozen=True)
class TargetLimits:
    """What a target's files say before it loads: its context (``max_position_embeddings``) and where that was
    read, and its tokenizer's longest vocabulary entry in characters (None: not readable without loading)."""

    context: int | None = None
    where: str = ""
    longest_token: int | None = None
    normalizer: bool = False

    def prompt_chars(self, max_length: int | None = None) -> int | None:
        """The most characters a prompt that fits can have (None: unknown before loading)."""
        if self.context is None or self.longest_token is None:
            return None
        return char_bound(self.longest_token, context_tokens(self.context, max_length), self.normalizer)


def context_tokens(context: int, max_length: int | None) -> int:
    """The tokens a generation may use: the context, or ``--max-length`` when that is smaller."""
    return int(context) if max_length is None else min(int(max_length), int(context))


def char_bound(longest_token: int, context: int, normalizer: bool = False) -> int:
    """The most characters a text can have and still fit in ``context`` tokens: no token stands for more characters
    than its vocabulary string has (byte-level BPE writes one character per byte, SentencePiece the text itself);
    doubled for a tokenizer with a normalizer, which may shorten the text first (the app's bound, in dart_core)."""
    return int(context) * max(int(longest_token), 1) * (2 if normalizer else 1)


def tokenizer_char_bound(tokenizer: Any, context: int) -> int:
    """:func:`char_bound` of a loaded tokenizer."""
    longest = max((len(t) for t in tokenizer.get_vocab()), default=1)
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return char_bound(longest, context, backend is not None and getattr(backend, "normalizer", None) is not None)


def target_files(ref: str) -> Path | None:
    """The local directory holding a target's ``config.json`` without fetching or converting anything: a
    directory, a packaged model already converted, or a Hub id in the local Hugging Face cache; else None."""
    path = Path(ref).expanduser()
    if (path / "config.json").is_file():
        return path
    try:
        from dart_core.loading.packaged import checkpoint_dir, checkpoint_problem, packaged_model

        spec = packaged_model(ref)
        if spec is not None:
            done = checkpoint_dir(spec)
            return done if checkpoint_problem(done, sha256=spec.sha256) is None else None
        if ref.count("/") != 1 or path.exists():
            return None
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(ref, "config.json")
        return Path(found).parent if isinstance(found, str) else None
    except Exception:  # no verdict here: the load resolves it and says what is wrong
        return None


def target_limits(ref: str | None, *, vocabulary: bool = True) -> TargetLimits:
    """The target's limits from its local files (:func:`target_files`); empty where they cannot be read.
    ``vocabulary``: read the tokenizer's too (a parse of ``tokenizer.json``), for a prompt's bound."""
    folder = target_files(str(ref)) if ref else None
    if folder is None:
        return TargetLimits()
    from dart_core.engine.hf_config import text_config

    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        context = int(text_config(config).get("max_position_embeddings") or 0) or None
    except (OSError, ValueError, TypeError, AttributeError):
        return TargetLimits()
    where = f"max_position_embeddings in {folder / 'config.json'}"
    longest, normalizer = vocabulary_bound(folder) if vocabulary else (None, False)
    return TargetLimits(context, where, longest, normalizer)


def vocabulary_bound(folder: Path) -> tuple[int | None, bool]:
    """(the longest vocabulary entry in characters, whether a normalizer runs first) from ``tokenizer.json``, or
    ``vocab.json`` (no normalizer); (None, False) when neither is readable."""
    try:
        data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        vocab = data["model"]["vocab"]
        pieces = list(vocab) if isinstance(vocab, dict) else [entry[0] for entry in vocab]  # Unigram: [piece, score]
        pieces += [t["content"] for t in data.get("added_tokens") or []]
        return max((len(p) for p in pieces), default=1), data.get("normalizer") is not None
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        pass
    try:
        vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
        return max((len(p) for p in vocab), default=1), False
    except (OSError, ValueError, TypeError):
        return None, False


def target_ref(args: argparse.Namespace) -> str | None:
    """The target a command line names: ``--base``, else the bundle's (None: no bundle that opens; the command
    reports that itself)."""
    base = getattr(args, "base", None)
    if base:
        return str(base)
    if not hasattr(args, "bundle"):
        return None
    from dart_core.bundle import BundleError, open_bundle

    try:
        return open_bundle(args.bundle).target
    except (BundleError, OSError, ValueError):
        return None


def floor_problem(args: argparse.Namespace) -> str | None:
    """A count below its least value (:data:`FLOORS`), named with its flag."""
    for dest, least, meaning in FLOORS:
        value = getattr(args, dest, None)
        if value is not None and value < least:
            shown = f"{least} ({meaning})" if meaning else f"{least}"
            return f"--{dest.replace('_', '-')} must be at least {shown}, got {value}"
    return None


def new_tokens_problem(max_new_tokens: int | None, limits: TargetLimits) -> str | None:
    """``--max-new-tokens`` over the target's context (or over :data:`MAX_NEW_TOKENS_CAP` where the context is
    not known before loading): no generation could reach it."""
    if max_new_tokens is None:
        return None
    if limits.context is not None:
        if max_new_tokens > limits.context:
            return (f"--max-new-tokens {max_new_tokens:,} is more than the target's context of {limits.context:,} "
                    f"tokens ({limits.where}): at most {limits.context:,}")
        return None
    if max_new_tokens > MAX_NEW_TOKENS_CAP:
        return (f"--max-new-tokens {max_new_tokens:,} is more than {MAX_NEW_TOKENS_CAP:,}, the cap while the "
                "target's context cannot be read before loading (its config.json is not on this machine yet)")
    return None


def methods_problem(methods: str | None, rows: bool = False) -> str | None:
    """A ``--methods`` name that is no racer of the registry, with the names it knows; with ``rows`` (the
    benchmarks) a row of a racer's settings (``dart:max_nodes=12``) is checked against that racer's settings."""
    if not methods:  # unset or empty: every loaded racer
        return None
    from dart_core.racers.registry import RACERS, racer

    known = [r.key for r in RACERS]
    for name in methods.split(","):  # as the commands split it: no spaces
        key, sep, _ = name.partition(":")
        if rows and sep and key in known:
            from dart_core.race.rows import row_settings

            try:
                row_settings(name, lambda rule, key=key: racer(key).default_settings("cpu", rule), "node")
            except ValueError as e:
                return f"--methods: {e}"
            continue
        if name not in known:
            shown = f"{name!r}" if name else "an empty name"
            rows_hint = " (or a row of a racer's settings, e.g. dart:max_nodes=12)" if rows else ""
            return f"--methods {methods}: {shown} is no racer; known: {', '.join(known)}{rows_hint}"
    return None


def sampling_problem(args: argparse.Namespace) -> str | None:
    """A sampling flag out of its range (the bounds of :class:`~dart_core.engine.acceptance.SamplingConfig`)."""
    if not any(hasattr(args, dest) for dest, _ in SAMPLING):
        return None
    from dart_core.engine.acceptance import SamplingConfig

    for dest, flag in SAMPLING:
        value = getattr(args, dest, None)
        if value is None:
            continue
        try:
            SamplingConfig(**{dest: value})
        except ValueError as e:  # "SamplingConfig.top_p must be in (0, 1] (1.0 = off), got 2.0"
            return f"{flag} must {str(e).partition(' must ')[2]}"
    return None


def settings_problem(args: argparse.Namespace) -> str | None:
    """A ``--<racer>-<flag>`` setting out of its bounds (the same check the run applies after loading)."""
    if not any("__" in dest for dest in vars(args)):
        return None
    from dart_core.options.racer_flags import racer_settings

    try:
        racer_settings(args, "cpu")  # the bounds of a setting do not depend on the device
    except ValueError as e:
        return str(e)
    return None


def prompt_problem(text: str, flag: str, bound: int | None, context: int | None) -> str | None:
    """A prompt with more characters than any prompt that fits the context can have (``bound``), refused
    untokenized: tokenizing megabytes takes longer than loading the models."""
    if bound is None or len(text) <= bound:
        return None
    return (f"{flag}: the prompt is {len(text):,} characters long, more than any prompt that fits the context of "
            f"{context:,} tokens can have ({bound:,} characters here): shorten it")


def given_prompts(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, text) of the prompts the command line carries itself: ``--prompt`` and a ``--prompt-file``'s text
    (a file that cannot be read is left to the command, which says so)."""
    out = []
    if getattr(args, "prompt", None) is not None:
        out.append(("--prompt", str(args.prompt)))
    if getattr(args, "prompt_file", None) is not None:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            out.append((f"--prompt-file {args.prompt_file}", Path(args.prompt_file).read_text(encoding="utf-8")))
    return out


def flag_problem(args: argparse.Namespace) -> str | None:
    """The first flag value that cannot run, as one line naming the value and its limit; None when every value
    checkable before loading is fine. Reads the target's small files only when a limit needs them."""
    problem = (floor_problem(args)
               or methods_problem(getattr(args, "methods", None), getattr(args, "methods_take_rows", False))
               or sampling_problem(args) or settings_problem(args))
    if problem is not None:
        return problem
    prompts = given_prompts(args)
    if getattr(args, "max_new_tokens", None) is None and not prompts:
        return None
    limits = target_limits(target_ref(args), vocabulary=bool(prompts))
    problem = new_tokens_problem(getattr(args, "max_new_tokens", None), limits)
    if problem is not None:
        return problem
    max_length = getattr(args, "max_length", None)
    bound = limits.prompt_chars(max_length)
    context = context_tokens(limits.context, max_length) if limits.context is not None else None
    for flag, text in prompts:
        problem = prompt_problem(text, flag, bound, context)
        if problem is not None:
            return problem
    return None


def prompts_problem(texts: Iterable[str], what: str, limits: TargetLimits,
                    max_length: int | None = None) -> str | None:
    """:func:`prompt_problem` for a prompt set read before loading (``what``: where it came from)."""
    bound = limits.prompt_chars(max_length)
    if bound is None:
        return None
    context = context_tokens(limits.context, max_length)  # type: ignore[arg-type]
    for i, text in enumerate(texts, 1):
        problem = prompt_problem(text, f"{what}, prompt {i}", bound, context)
        if problem is not None:
            return problem
    return None


def loaded_problem(args: argparse.Namespace, tokenizer: Any, target: Any, texts: Sequence[str],
                   what: str = "the prompt") -> str | None:
    """The same rules against the loaded ``target``'s own context (``max_position_embeddings``, not the fast
    path's rows) and tokenizer, before any prompt is tokenized: for a target whose limits could not be read before
    loading (a Hub id not yet cached, a packaged model not yet converted)."""
    context = getattr(getattr(target, "text_config", None), "max_position_embeddings", None) or target.max_context
    loaded = TargetLimits(int(context), "its config, loaded")
    problem = new_tokens_problem(getattr(args, "max_new_tokens", None), loaded)
    if problem is not None:
        return problem
    usable = context_tokens(context, getattr(args, "max_length", None))
    if not any(texts):
        return None
    bound = tokenizer_char_bound(tokenizer, usable)
    for text in texts:
        problem = prompt_problem(text, what, bound, usable)
        if problem is not None:
            return problem
    return None


def refuse(parser: argparse.ArgumentParser, problem: str) -> int:
    """``problem`` said as argparse says an error (the usage, then ``prog: error: …``); returns the exit code 2, so
    that a caller of ``main()`` gets a code rather than a ``SystemExit``."""
    parser.print_usage(sys.stderr)
    print(f"{parser.prog}: error: {problem}", file=sys.stderr)
    return 2


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int | None:
    """:func:`flag_problem` refused with :func:`refuse` (its exit code), or None: run."""
    problem = flag_problem(args)
    return refuse(parser, problem) if problem is not None else None
