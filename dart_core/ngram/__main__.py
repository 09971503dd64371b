"""``python -m dart_core.ngram``: build, convert, inspect and query N-gram stores."""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np

from dart_core.loading.errors import report_error
from dart_core.ngram.store import DEFAULT_CONVERT_MEMORY, NgramFormatError, NgramStore, build_to_file, convert_trie

EXAMPLES = """examples:
  python -m dart_core.ngram build corpus.jsonl --tokenizer Qwen/Qwen3-1.7B --out corpus.ngram
  python -m dart_core.ngram build ids.jsonl --pretokenized --ids-field input_ids --out ids.ngram
  python -m dart_core.ngram convert small.trie --out small.ngram --memory 2G
  python -m dart_core.ngram info small.ngram --verify
  python -m dart_core.ngram query small.ngram --context 785 220 --tokens 13 11 279
"""


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().rstrip("b")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 512M, 4G)") from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m dart_core.ngram",
        description="Build, convert, inspect and query DART N-gram stores (our memory-mapped format, or the "
        "reference .trie, which is converted).",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", required=True)

    b = sub.add_parser("build", help="count n-grams of a corpus into a new store",
                       description="Count every n-gram (n <= order) of a corpus. Text input: JSONL lines with a "
                       "text field, tokenized with a Hugging Face tokenizer, EOS id appended to each text (as the "
                       "reference does). Pre-tokenized input: JSONL lines holding a list of ids (or an object with "
                       "--ids-field), or .npy files of 1-D int arrays. .gz inputs are read transparently. Needs "
                       "about 45 bytes of RAM per corpus token while counting.")
    b.add_argument("inputs", nargs="+", type=Path, help="JSONL (.jsonl/.jsonl.gz) or .npy files")
    b.add_argument("--out", type=Path, required=True, help="output store path (our format)")
    b.add_argument("--order", type=int, default=3, help="n-gram order, 1..8 (default 3, as published)")
    b.add_argument("--min-count", type=int, default=1,
                   help="drop n-grams (length >= 2) seen fewer times: a smaller store (default 1 = keep all)")
    src = b.add_mutually_exclusive_group(required=True)
    src.add_argument("--tokenizer", help="tokenizer name on the Hub or local dir (transformers.AutoTokenizer)")
    src.add_argument("--pretokenized", action="store_true", help="inputs already hold token ids")
    b.add_argument("--text-field", default="text", help="JSON field with the text (default: text)")
    b.add_argument("--ids-field", default="input_ids", help="JSON field with the ids (default: input_ids)")
    b.add_argument("--no-eos", action="store_true", help="do not append the tokenizer's EOS id to each text")
    b.add_argument("--append-eos", type=int, default=None, metavar="ID",
                   help="with --pretokenized: append this id to each sequence")
    b.add_argument("--batch-size", type=int, default=512, help="texts per tokenizer call (default 512)")

    c = sub.add_parser("convert", help="convert a reference .trie into our format (streaming, bounded memory)")
    c.add_argument("trie", type=Path, help="reference .trie file (e.g. small.trie / full.trie)")
    c.add_argument("--out", type=Path, required=True, help="output store path")
    c.add_argument("--tmp-dir", type=Path, default=None, help="directory for sort spill files (default: next to "
                   "--out; needs about 90 bytes per input node free)")
    c.add_argument("--memory", type=_size, default=DEFAULT_CONVERT_MEMORY,
                   help="RAM budget for sort buffers (default 512M)")

    i = sub.add_parser("info", help="print sizes and layout of a store")
    i.add_argument("store", type=Path)
    i.add_argument("--verify", action="store_true", help="also check every byte (checksums and structure)")
    i.add_argument("--json", action="store_true", help="print JSON")

    q = sub.add_parser("query", help="N-gram probability of candidate tokens after a context")
    q.add_argument("store", type=Path)
    q.add_argument("--context", type=int, nargs="+", required=True, help="context token ids (last = most recent)")
    q.add_argument("--tokens", type=int, nargs="+", required=True, help="candidate token ids")
    q.add_argument("--json", action="store_true", help="print JSON")
    return p


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def _jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    with _open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield lineno, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None


def _field(obj: Any, name: str, path: Path, lineno: int) -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise ValueError(f"{path}:{lineno}: expected a JSON object with a {name!r} field")
    return obj[name]


def _pretokenized(paths: list[Path], ids_field: str, eos: int | None) -> Iterator[np.ndarray]:
    for path in paths:
        if path.suffix == ".npy":
            arr = np.load(path, allow_pickle=False)
            if arr.ndim != 1:
                raise ValueError(f"{path}: expected a 1-D array of token ids, got shape {arr.shape}")
            yield arr if eos is None else np.append(arr, eos)
            continue
        for lineno, obj in _jsonl(path):
            ids = obj if isinstance(obj, list) else _field(obj, ids_field, path, lineno)
            if not isinstance(ids, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
                raise ValueError(f"{path}:{lineno}: token ids must be a list of integers")
            yield np.asarray(ids + ([] if eos is None else [eos]), dtype=np.int64)


def _tokenized(paths: list[Path], tokenizer_name: str, text_field: str, append_eos: bool,
               batch_size: int) -> Iterator[np.ndarray]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tokenizer_name)
    eos = tok.eos_token_id
    if append_eos and eos is None:
        raise ValueError(f"tokenizer {tokenizer_name!r} has no EOS token: pass --no-eos")

    def flush(texts: list[str]) -> Iterator[np.ndarray]:
        for ids in tok(texts, add_special_tokens=False)["input_ids"]:
            yield np.asarray([*ids, eos] if append_eos else ids, dtype=np.int64)

    for path in paths:
        batch: list[str] = []
        for lineno, obj in _jsonl(path):
            text = _field(obj, text_field, path, lineno)
            if not isinstance(text, str):
                raise ValueError(f"{path}:{lineno}: field {text_field!r} is not a string")
            batch.append(text)
            if len(batch) >= batch_size:
                yield from flush(batch)
                batch = []
        if batch:
            yield from flush(batch)


def cmd_build(args: argparse.Namespace) -> int:
    for path in args.inputs:
        if not path.is_file():
            raise FileNotFoundError(f"input not found: {path}")
    if args.pretokenized:
        seqs = _pretokenized(args.inputs, args.ids_field, args.append_eos)
    else:
        if args.append_eos is not None:
            raise ValueError("--append-eos is for --pretokenized input; text input gets the tokenizer's EOS")
        seqs = _tokenized(args.inputs, args.tokenizer, args.text_field, not args.no_eos, args.batch_size)
    t0 = time.perf_counter()
    build_to_file(seqs, args.out, order=args.order, min_count=args.min_count, progress=True)
    store = NgramStore.load(args.out)
    print(f"wrote {args.out}: {store.num_tokens:,} tokens, {store.num_nodes:,} nodes, {store.file_size:,} bytes "
          f"({store.file_size / store.num_nodes:.2f} B/node) in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_convert(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    stats = convert_trie(args.trie, args.out, tmp_dir=args.tmp_dir, memory_budget=args.memory)
    print(f"wrote {args.out}: order {stats['order']}, {stats['input_nodes']:,} nodes, vocab {stats['vocab_size']:,}, "
          f"{stats['output_bytes']:,} bytes in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    store = NgramStore.load(args.store, verify=args.verify)
    info = store.info()
    if args.verify:
        info["verified"] = True
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for key, value in info.items():
        print(f"{key:>15}: {value:.3f}" if isinstance(value, float) else f"{key:>15}: {value}")
    return 0


def cmd_query(args: argparse.Namespace) -> int:
    store = NgramStore.load(args.store)
    probs, lens = store.probability(args.context, args.tokens)
    rows = [{"token": t, "probability": float(p), "matched": int(n)} for t, p, n in
            zip(args.tokens, probs, lens, strict=True)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'token':>12} {'probability':>14} {'matched':>8}")
    for r in rows:
        print(f"{r['token']:>12} {r['probability']:>14.8g} {r['matched']:>8}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    command = {"build": cmd_build, "convert": cmd_convert, "info": cmd_info, "query": cmd_query}[args.command]
    try:
        return command(args)
    except (NgramFormatError, ValueError, FileNotFoundError, OSError) as e:  # one line naming the file
        return report_error(e, debug_flag=None)


if __name__ == "__main__":
    sys.exit(main())
