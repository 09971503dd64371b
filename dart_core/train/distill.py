"""Self-distillation data, as the DART paper trains: the target's own answers to a prompt set.

Input JSONL records are ``{"prompt": str}`` (one user turn), ``{"messages": [{"role", "content"}, ...]}`` (a chat
ending with a user turn) — both answered by the target through its chat template — or ``{"text": str}`` (raw text,
used as it is, nothing generated). Output JSONL records are ``{"id", "ids", "n_prompt", "answer"}``: the token ids
of the whole conversation (prompt + the target's answer, end-of-turn token included), how many of them are prompt,
and the answer text for people. Answers are generated in batches; each finished batch is appended and flushed, so
an interrupted run resumes where it stopped (a torn last line is dropped). ``<out>.runs.json`` keeps every run's
wall clock and answer tokens, updated after each batch, so a file built over several sessions still tells its
throughput (:func:`distill_runs`)."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

import torch

from dart_core.loading.atomic import atomic_output
from dart_core.loading.chat import encode_chat


class DistillError(ValueError):
    """A prompt file or record that cannot be used, named with its line."""


def read_prompt_records(path: str | os.PathLike[str], limit: int = 0) -> list[dict[str, Any]]:
    """Prompt records from JSONL (``prompt`` / ``messages`` / ``text``), each given an ``id`` when it has none.
    An empty file, a bad line or a record with none of those fields is an error naming the line."""
    path = Path(path)
    if not path.is_file():
        raise DistillError(f"prompt file {path} does not exist")
    out: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise DistillError(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict):
                raise DistillError(f"{path}:{n}: expected a JSON object, got {type(rec).__name__}")
            check_record(rec, f"{path}:{n}")
            rec.setdefault("id", f"{path.stem}-{len(out)}")
            out.append(rec)
            if limit and len(out) >= limit:
                break
    if not out:
        raise DistillError(f"prompt file {path} holds no prompt")
    return out


def check_record(rec: dict[str, Any], where: str) -> None:
    """One of ``prompt`` (non-empty str), ``messages`` (chat ending with a user turn) or ``text`` (non-empty str)."""
    if isinstance(rec.get("prompt"), str) and rec["prompt"].strip():
        return
    if isinstance(rec.get("text"), str) and rec["text"].strip():
        return
    msgs = rec.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                               and m.get("role") in ("system", "user", "assistant") for m in msgs):
        if msgs[-1]["role"] != "user":
            raise DistillError(f"{where}: 'messages' must end with a user turn (the target writes the answer)")
        return
    raise DistillError(f"{where}: a record needs a non-empty 'prompt' or 'text' string, or a 'messages' list of "
                       "{role, content} ending with a user turn")


def prompt_ids(tokenizer: Any, rec: dict[str, Any]) -> list[int]:
    """Token ids the target answers: the chat template with the generation prompt (thinking off where the
    template knows that switch)."""
    msgs = rec.get("messages") or [{"role": "user", "content": rec["prompt"]}]
    if not getattr(tokenizer, "chat_template", None):
        raise DistillError("the target's tokenizer has no chat template: give raw-text records ({\"text\": ...}) "
                           "or a chat model")
    return encode_chat(tokenizer, msgs)


def _resume(path: Path, stop_ids: list[int]) -> tuple[set[str], dict[str, int]]:
    """Ids already answered and the totals of their records; a torn last line (killed mid-write) is cut off."""
    totals = {"records": 0, "tokens": 0, "answer_tokens": 0, "hit_limit": 0}
    if not path.exists():
        return set(), totals
    done: set[str] = set()
    good = 0
    with path.open("rb") as f:
        for raw in f:
            try:
                rec = json.loads(raw)
                done.add(str(rec["id"]))
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
                break
            good += len(raw)
            ids, n_prompt = rec.get("ids") or [], rec.get("n_prompt") or 0
            _count(totals, len(ids), len(ids) - n_prompt, bool(n_prompt and ids) and ids[-1] not in stop_ids)
    if good != path.stat().st_size:
        with path.open("r+b") as f:
            f.truncate(good)
    return done, totals


def runs_path(out: str | os.PathLike[str]) -> Path:
    """The run ledger beside a distillation file."""
    out = Path(out)
    return out.with_name(out.name + ".runs.json")


def distill_runs(out: str | os.PathLike[str]) -> dict[str, Any]:
    """Every run that wrote ``out`` (its ledger) and their totals: wall-clock seconds, prompts answered, answer
    tokens, answer tokens per second over all of them. An unreadable or missing ledger gives no runs."""
    try:
        runs = json.loads(runs_path(out).read_text(encoding="utf-8"))["runs"]
        runs = [r for r in runs if isinstance(r, dict)]
    except (OSError, ValueError, KeyError, TypeError):
        runs = []
    seconds = sum(float(r.get("seconds", 0)) for r in runs)
    tokens = sum(int(r.get("answer_tokens", 0)) for r in runs)
    return {"runs": runs, "seconds": round(seconds, 1), "answered": sum(int(r.get("answered", 0)) for r in runs),
            "answer_tokens": tokens, "answer_tokens_per_s": round(tokens / seconds, 1) if seconds else None}


class _RunLedger:
    """This run's entry in the ledger, rewritten (atomically) after each batch: a run killed mid-way keeps the
    time and tokens of the batches it finished."""

    def __init__(self, out: Path, entry: dict[str, Any]) -> None:
        self.path = runs_path(out)
        self.earlier = distill_runs(out)["runs"]
        self.entry = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "seconds": 0.0, "answered": 0,
                      "answer_tokens": 0, **entry}
        self.t0 = time.perf_counter()

    def update(self, answered: int, answer_tokens: int) -> None:
        self.entry.update(seconds=round(time.perf_counter() - self.t0, 1), answered=answered,
                          answer_tokens=answer_tokens)
        with atomic_output(self.path) as tmp:
            tmp.write_text(json.dumps({"runs": [*self.earlier, self.entry]}, indent=1) + "\n", encoding="utf-8")


def _count(totals: dict[str, int], tokens: int, answer_tokens: int, hit_limit: bool) -> None:
    """Add one record of the distillation file to its totals."""
    totals["records"] += 1
    totals["tokens"] += tokens
    totals["answer_tokens"] += answer_tokens
    totals["hit_limit"] += hit_limit


def _length_sorted(todo: list[tuple[dict[str, Any], list[int]]], run: int) -> list[tuple[dict[str, Any],
                                                                                  list[int]]]:
    """Prompts of similar length side by side (little padding computed), sorted only within runs of ``run``
    prompts, so any prefix of the output stays a fair sample of the prompt set (a stopped run is still usable)."""
    return [r for i in range(0, len(todo), run) for r in sorted(todo[i : i + run], key=lambda item: len(item[1]))]


def followup_records(records: list[dict[str, Any]], answers: dict[str, str]) -> list[dict[str, Any]]:
    """Second turns: for a record with ``followups`` whose first turn is answered (``answers``: id → the target's
    answer text), the conversation [its prompt, the target's answer, the follow-up], id ``<id>/2``."""
    out: list[dict[str, Any]] = []
    for rec in records:
        rid = str(rec["id"])
        if not rec.get("followups") or rid not in answers:
            continue
        first = rec.get("messages") or [{"role": "user", "content": rec["prompt"]}]
        msgs = [*first, {"role": "assistant", "content": answers[rid]},
                {"role": "user", "content": str(rec["followups"][0])}]
        out.append({"id": f"{rid}/2", "parent": rid, "category": rec.get("category"), "messages": msgs})
    return out


def _answers_of(path: Path, ids: set[str]) -> dict[str, str]:
    """The answer texts of the records ``ids`` in a distillation file."""
    found: dict[str, str] = {}
    if ids and path.exists():
        with path.open(encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if str(rec["id"]) in ids:
                    found[str(rec["id"])] = rec["answer"]
    return found


@torch.no_grad()
def distill(
    model: Any,
    tokenizer: Any,
    records: list[dict[str, Any]],
    out_path: str | os.PathLike[str],
    *,
    stop_ids: list[int],
    max_new_tokens: int = 256,
    batch_size: int = 16,
    temperature: float = 0.0,
    seed: int = 0,
    progress: bool = True,
    attention: str = "native",
) -> dict[str, Any]:
    """Answer every record the target has not answered yet in ``out_path`` and append them there, and the
    second turns of records with ``followups`` (see ``followup_records``): asked, a batch of them at a time, from
    the first turns' keys and values kept (only the new turn goes through the model; ``continued`` counts them);
    those of first turns answered by an earlier run, after every first turn. ``attention``: see ``batch_answers``.
    Returns counts of this run and, under ``file``, the totals of the whole file (a resumed run answers only what
    was missing)."""
    if not stop_ids:
        raise DistillError("no end-of-turn token known for the target: cannot tell where an answer ends")
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    done, totals = _resume(out, stop_ids)
    stats = {"skipped_done": len(done), "answered": 0, "raw": 0, "answer_tokens": 0, "hit_limit": 0,
             "followups": 0, "continued": 0, "file": totals}
    generator = torch.Generator().manual_seed(seed)
    param = next(model.parameters(), None)
    ledger = _RunLedger(out, {"batch_size": batch_size, "max_new_tokens": max_new_tokens,
                              "dtype": str(param.dtype).removeprefix("torch.") if param is not None else None,
                              "device": str(param.device) if param is not None else None,
                              "threads": torch.get_num_threads(), "attention": attention})
    opts = {"stop_ids": stop_ids, "max_new_tokens": max_new_tokens, "batch_size": batch_size,
            "temperature": temperature, "generator": generator, "progress": progress, "ledger": ledger,
            "attention": attention}
    _answer_all(model, tokenizer, records, out, done, stats, desc="distill", **opts)
    # what the first pass could not go on from: answered by an earlier, stopped run, or a first answer whose text
    # the chat template tokenizes differently from the tokens the target wrote
    wanted = {str(r["id"]) for r in records if r.get("followups") and f"{r['id']}/2" not in done}
    second = followup_records(records, _answers_of(out, wanted))
    stats["followups"] += len(second)
    _answer_all(model, tokenizer, second, out, done, stats, desc="distill (2nd turns)", **opts)
    return stats


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit``."""
    n = 0
    while n < limit and n < len(a) and n < len(b) and a[n] == b[n]:
        n += 1
    return n


def _answer_all(model: Any, tokenizer: Any, records: list[dict[str, Any]], out: Path, done: set[str],
                stats: dict[str, Any], *, stop_ids: list[int], max_new_tokens: int, batch_size: int,
                temperature: float, generator: torch.Generator, progress: bool, desc: str,
                ledger: _RunLedger, attention: str) -> None:
    """Answer the records not in ``done``, a batch at a time, each finished batch appended, flushed and synced;
    a record with ``followups`` keeps its conversation's keys and values, and once ``batch_size`` of them wait,
    their second turns are answered from there (``continue_answers``) and appended too."""
    from tqdm.auto import tqdm

    from dart_core.train.batch_decode import batch_answers_keeping, continue_answers

    totals = stats["file"]
    todo: list[tuple[dict[str, Any], list[int]]] = []
    raw: list[dict[str, Any]] = []
    for rec in records:
        if str(rec["id"]) in done:
            continue
        if "text" in rec and "prompt" not in rec and "messages" not in rec:
            raw.append(rec)
        else:
            todo.append((rec, prompt_ids(tokenizer, rec)))
    todo = _length_sorted(todo, batch_size * 8)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop_ids[0]
    decode = {"max_new_tokens": max_new_tokens, "stop_ids": stop_ids, "pad_id": pad, "temperature": temperature,
              "generator": generator, "attention": attention}

    def goes_on(rec: dict[str, Any]) -> bool:
        return bool(rec.get("followups")) and f"{rec['id']}/2" not in done

    with out.open("a", encoding="utf-8") as f:
        def write(rec: dict[str, Any], p: list[int], answer: list[int]) -> str:
            hit_limit = bool(answer) and answer[-1] not in stop_ids
            text = tokenizer.decode(answer, skip_special_tokens=True)
            row = {"id": str(rec["id"]), "ids": p + answer, "n_prompt": len(p), "answer": text}
            if "parent" in rec:
                row["parent"] = rec["parent"]
            f.write(json.dumps(row) + "\n")  # ASCII escapes: no raw line separator can split a record
            stats["answer_tokens"] += len(answer)
            stats["answered"] += 1
            stats["hit_limit"] += hit_limit
            done.add(str(rec["id"]))
            _count(totals, len(p) + len(answer), len(answer), hit_limit)
            return text

        def synced(n: int) -> None:
            f.flush()
            os.fsync(f.fileno())
            ledger.update(stats["answered"], stats["answer_tokens"])
            bar.update(n)
            bar.set_postfix(tokens=stats["answer_tokens"])

        waiting: list[tuple[dict[str, Any], list[int], Any]] = []  # second turn, its prompt ids, the kept rows

        def answer_waiting() -> None:
            answers = continue_answers(model, [k for _, _, k in waiting], [p[k.length:] for _, p, k in waiting],
                                       **decode)
            for (rec, p, _), answer in zip(waiting, answers, strict=True):
                write(rec, p, answer)
            stats["followups"] += len(waiting)
            stats["continued"] += len(waiting)
            synced(len(waiting))
            waiting.clear()

        for rec in raw:
            ids = [int(t) for t in tokenizer.encode(rec["text"], add_special_tokens=False)]
            f.write(json.dumps({"id": str(rec["id"]), "ids": ids, "n_prompt": 0, "answer": rec["text"]}) + "\n")
            stats["raw"] += 1
            _count(totals, len(ids), len(ids), False)
        f.flush()
        going_on = sum(goes_on(rec) for rec, _ in todo)
        bar = tqdm(total=len(todo) + going_on, desc=desc, unit="prompt", disable=not progress)
        for i in range(0, len(todo), batch_size):
            batch = todo[i : i + batch_size]
            keep = [j for j, (rec, _) in enumerate(batch) if goes_on(rec)]
            answers, kept = batch_answers_keeping(model, [p for _, p in batch], keep=keep, **decode)
            skipped = 0
            for j, ((rec, p), answer) in enumerate(zip(batch, answers, strict=True)):
                text = write(rec, p, answer)
                if j in kept:
                    second = followup_records([rec], {str(rec["id"]): text})[0]
                    p2 = prompt_ids(tokenizer, second)
                    # the keys and values hold as far as the template re-tokenizes the answer as it was written
                    # (a text cut mid-word by the token limit may tokenize otherwise); the rest is run again
                    same = _common_prefix(p + answer, p2, kept[j].length)
                    if same:
                        waiting.append((second, p2, kept[j].first(same)))
                    else:  # asked in the later pass, the whole conversation run again
                        skipped += 1
            synced(len(batch) + skipped)
            if len(waiting) >= batch_size:
                answer_waiting()
        if waiting:
            answer_waiting()
        bar.close()


def read_sequences(path: str | os.PathLike[str], *, answers_only: bool = False) -> list[list[int]]:
    """The token-id sequences of a distillation file, in file order (a torn last line is ignored);
    ``answers_only``: each record's answer tokens alone (what a drafter must predict), prompt left out.

    A first turn whose whole sequence opens its second turn's record (``<id>/2``) is left out: the longer record
    holds it, and keeping both would run the target over it twice and weigh its answer twice in training."""
    path = Path(path)
    if not path.is_file():
        raise DistillError(f"distillation data {path} does not exist: run `python -m dart_core.train distill` first")
    ids_of: dict[str, list[int]] = {}
    seqs: list[list[int]] = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ids = rec["ids"][int(rec.get("n_prompt", 0)) :] if answers_only else rec["ids"]
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
                if n > 1 and not line.endswith("\n"):
                    break  # torn last line
                raise DistillError(f"{path}:{n}: not a distillation record ({e})") from None
            seqs.append([int(t) for t in ids])
            ids_of[str(rec.get("id", f"line {n}"))] = seqs[-1]
    if not seqs:
        raise DistillError(f"distillation data {path} holds no sequence")
    if answers_only:
        return seqs
    contained = {id(ids_of[rid[:-2]]) for rid, ids in ids_of.items() if rid.endswith("/2") and rid[:-2] in ids_of
                 and ids[: len(ids_of[rid[:-2]])] == ids_of[rid[:-2]]}
    return [s for s in seqs if id(s) not in contained]


def sample_sequences(seqs: list[list[int]], max_tokens: int, *, seed: int) -> list[list[int]]:
    """A seeded random sample of whole conversations holding at most ``max_tokens`` tokens, in file order (every
    topic and length of the data stays represented, unlike a prefix of a length-sorted file)."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    order = list(range(len(seqs)))
    random.Random(seed).shuffle(order)
    keep, total = [], 0
    for i in order:
        if total + len(seqs[i]) > max_tokens:
            continue
        keep.append(i)
        total += len(seqs[i])
    if not keep:
        raise ValueError(f"no conversation fits in {max_tokens} tokens")
    return [seqs[i] for i in sorted(keep)]
