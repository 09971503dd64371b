"""``bench e2e``'s runs: each row's conversation on a prompt (a row is a racer, or a racer that remembers run cold or
warm: ``dart_core.race.rows``), the memories the run owns for its warm rows, and the tallies of steps and wall-clock
time per row, pooled, per turn, per category and per turn and category."""

from __future__ import annotations

import argparse
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from dart_core.engine.acceptance import SamplingConfig
from dart_core.engine.loop import Step
from dart_core.loading.chat import encode_chat
from dart_core.race import OFF, WARM, row_racer, row_variant, summarize_racers

NO_CATEGORY = "all"  # the category of a prompt whose record names none


@dataclass(frozen=True)
class Turn:
    """One turn of a row's conversation: its input ids, steps and wall-clock ms, and the finished answers its
    racer's memory held when it started (None: a racer that keeps none)."""

    ids: list[int]
    steps: list[Step]
    wall_ms: float
    memory_answers: int | None = None


class Conversations:
    """One row's generations on one prompt (a row: a racer, cold or warm for one that remembers;
    ``dart_core.race.rows``): each turn's steps and wall-clock ms, every row with the same seed, its own settings
    and tree budget rule, and the run's sampling. Owns the warm rows' memories: whoever runs the races owns them."""

    def __init__(self, arena: Any, settings: dict[str, Any], budgets: dict[str, str], args: argparse.Namespace,
                 sampling: SamplingConfig, n_turns: int) -> None:
        self.arena, self.row_settings, self.n_turns, self.system = arena, settings, n_turns, args.system
        self.budgets = budgets  # row -> its tree budget rule
        self.sampling = sampling
        self.kwargs = {"sampling": sampling, "max_new_tokens": args.max_new_tokens, "max_length": args.max_length}
        self.memories: dict[str, Any] = {}  # warm row -> the memory of its answers in this run

    def start_run(self, rows: list[str]) -> None:
        """A fresh memory for each warm row as a run (one seed's pass over the prompts) starts: its figures draw
        only on this run's earlier answers, never on the warm-up's or another seed's answers to the same prompts."""
        self.memories = {row: self.arena.new_memory(row_racer(row)) for row in rows if row_variant(row) == WARM}

    def conversation_memory(self, row: str, *, counted: bool = True) -> Any:
        """The memory a row's conversation drafts from and feeds: None for a racer that keeps none, the run's own
        for a warm row's counted conversation, else a fresh empty one (a cold row; any uncounted warm-up)."""
        key = row_racer(row)
        if not self.arena.remembers(key) or row_variant(row) == OFF:
            return None
        if counted and row in self.memories:
            return self.memories[row]
        return self.arena.new_memory(key)

    def generate(self, row: str, ids: list[int], seed: int, memory: Any = None) -> Turn:
        """One generation's steps and its wall-clock ms, from the input ids to the last token (loop glue included)."""
        held = None if memory is None else int(memory.held_answers)
        key = row_racer(row)
        start = time.perf_counter()
        generator = torch.Generator(device=self.arena.target.feature_device).manual_seed(seed)
        steps = list(self.arena.stream(key, ids, memory=memory, forget=row_variant(row) == OFF, generator=generator,
                                       settings=self.row_settings.get(row), budget=self.budgets.get(row),
                                       **self.kwargs))
        return Turn(ids, steps, (time.perf_counter() - start) * 1e3, held)

    def converse(self, row: str, p: dict[str, Any], first: list[int], seed: int, *,
                 counted: bool = True) -> list[Turn]:
        """Each turn of the row's conversation; a follow-up continues the row's OWN conversation (its own earlier
        answers as the assistant turns: with greedy decoding these equal AR's), on the same memory."""
        tokenizer = self.arena.tokenizer
        memory = self.conversation_memory(row, counted=counted)
        out = [self.generate(row, first, seed, memory)]
        messages = [{"role": "system", "content": self.system}] if self.system else []
        for k in range(1, self.n_turns):
            answer = tokenizer.decode([t for s in out[-1].steps for t in s.tokens], skip_special_tokens=True,
                                      clean_up_tokenization_spaces=False)
            messages += [{"role": "user", "content": p["turns"][k - 1]}, {"role": "assistant", "content": answer}]
            ids = encode_chat(tokenizer, [*messages, {"role": "user", "content": p["turns"][k]}])
            out.append(self.generate(row, ids, seed, memory))
        return out


class Pool:
    """Each row's steps and wall-clock ms over some of the generations (all of them, one turn's, one category's)."""

    def __init__(self, rows: list[str]) -> None:
        self.steps: dict[str, list[Step]] = {m: [] for m in rows}
        self.wall: dict[str, float] = dict.fromkeys(rows, 0.0)

    def add(self, row: str, run: list[Step], wall_ms: float) -> None:
        self.steps[row].extend(run)
        self.wall[row] += wall_ms

    def merge(self, other: Pool) -> None:
        for m, steps in other.steps.items():
            self.add(m, steps, other.wall[m])

    def summary(self) -> dict[str, dict[str, Any]]:
        """Each row's figures over the pool (``dart_core.race.summarize_racers``)."""
        return summarize_racers(self.steps, self.wall)


@dataclass
class Tally:
    """Everything counted over the prompts: per prompt and turn, pooled per row, per turn, per category (prompts of
    one category, both turns pooled; categories in the order they first come) and per turn and category, and the
    greedy check's findings (real mismatches beyond the dtype's rounding, and rounding ties: ``greedy_check``)."""

    methods: list[str]  # the rows
    n_turns: int
    per_prompt: list[dict[str, Any]] = field(default_factory=list)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    ties: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.pooled = Pool(self.methods)
        self.turns = [Pool(self.methods) for _ in range(self.n_turns)]
        self.categories: dict[str, Pool] = {}
        self.turn_categories: list[dict[str, Pool]] = [{} for _ in range(self.n_turns)]

    def category(self, pools: dict[str, Pool], category: str) -> Pool:
        """``category``'s pool in ``pools``, a new one the first time the category comes."""
        if category not in pools:
            pools[category] = Pool(self.methods)
        return pools[category]

    def absorb(self, other: Tally, *, seed: int) -> None:
        """Another seed's run of the same prompts, counted into this one (its prompt entries tagged with ``seed``)."""
        self.pooled.merge(other.pooled)
        for k in range(self.n_turns):
            self.turns[k].merge(other.turns[k])
            for c, pool in other.turn_categories[k].items():
                self.category(self.turn_categories[k], c).merge(pool)
        for c, pool in other.categories.items():
            self.category(self.categories, c).merge(pool)
        self.per_prompt.extend({**e, "seed": seed} for e in other.per_prompt)
        self.mismatches.extend({**mm, "seed": seed} for mm in other.mismatches)
        self.ties.extend({**t, "seed": seed} for t in other.ties)

    def count(self, method: str, turn: int, run: list[Step], wall_ms: float, category: str = NO_CATEGORY) -> None:
        for pool in (self.pooled, self.turns[turn], self.category(self.categories, category),
                     self.category(self.turn_categories[turn], category)):
            pool.add(method, run, wall_ms)



def with_memory(summary: dict[str, dict[str, Any]], entries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``summary`` with each remembering row's ``memory_answers`` (mean and max over ``entries``, the prompt
    entries it pools): how many earlier answers the row drew on (cold: none at a conversation's start)."""
    for m, figures in summary.items():
        held = [e["methods"][m]["memory_answers"] for e in entries
                if "memory_answers" in e["methods"].get(m, {})]
        if held:
            figures["memory_answers"] = {"mean": statistics.fmean(held), "max": max(held)}
    return summary
