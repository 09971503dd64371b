"""``bench e2e``'s rows on a tiny bundle in the published formats: a racer that remembers (suffix decoding, which
runs on any target) as a cold and a warm row, each memory holding only its own row's answers, and a run of two turns
reported turn by turn (``by_turn``), in the JSON, the printed tables and the HTML. The MT-bench questions are
replaced by a few of the toy tokenizer's words, so the tests run offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers_ckpt import write_bench_bundle

from dart_core.bench import e2e
from dart_core.bench.__main__ import main as bench_main
from dart_core.data import datasets
from dart_core.suffix.cache import SuffixCache

VOCAB = 97
CHAT_TEMPLATE = ("{% for m in messages %}w1 {{ m.role }} {{ m.content }} <|im_end|> {% endfor %}"
                 "{% if add_generation_prompt %}w1 assistant {% endif %}")
# two turns each, two categories; words the toy's word-level tokenizer knows
QUESTIONS = [{"id": f"mt-bench-{81 + i}", "category": c, "turns": [q, f], "prompt": q}
             for i, (c, q, f) in enumerate([("writing", "w5 w6 w7 w8 w9 w10", "w11 w12 w13"),
                                            ("math", "w20 w21 w22 w23 w24", "w25 w26 w27 w28"),
                                            ("writing", "w30 w31 w32 w33", "w34 w35 w36 w37 w38")])]


@pytest.fixture(scope="module")
def chat_bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy bundle with its store, five prompts and a chat template (a chat model, for the two-turn set)."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("rows") / "bundle"
    write_bench_bundle(root, vocab=VOCAB)
    tok = AutoTokenizer.from_pretrained(root / "target")
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(root / "target")
    return root


@pytest.fixture
def two_turn_set(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.setitem(datasets.DATASETS, "mt-bench", lambda limit=0: QUESTIONS[:limit] if limit else QUESTIONS)
    return QUESTIONS


def _run(bundle: Path, out: Path, *extra: str, limit: int = 4, new: int = 16) -> int:
    return bench_main(["e2e", "--bundle", str(bundle), "--limit", str(limit), "--max-new-tokens", str(new),
                       "--out", str(out), "--no-progress", "--no-hf-generate", *extra])


def _answer(entry: dict[str, Any], row: str) -> list[int]:
    return [t for s in entry["methods"][row]["steps"] for t in s["tokens"]]


class SpyCache(SuffixCache):
    """A suffix memory that knows its row and refuses to be fed while another row generates."""

    generating: str | None = None  # the row whose generation runs now

    def __init__(self, row: str) -> None:
        super().__init__()
        self.row = row
        self.requests: list[int] = []

    def start_request(self, request_id: int, prompt: Any) -> None:
        assert SpyCache.generating == self.row, f"{self.row}'s memory started a request of {SpyCache.generating}"
        self.requests.append(request_id)
        super().start_request(request_id, prompt)

    def add_active_response(self, request_id: int, tokens: Any) -> None:
        assert SpyCache.generating == self.row, f"{self.row}'s memory fed an answer of {SpyCache.generating}"
        super().add_active_response(request_id, tokens)


@pytest.fixture
def spies(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool, SpyCache]]:
    """Every memory the benchmark hands out, as (row, counted, memory); each a :class:`SpyCache` of its row."""
    made: list[tuple[str, bool, SpyCache]] = []
    memory_for = e2e.Conversations.conversation_memory
    generate = e2e.Conversations.generate

    def spy_memory(self: e2e.Conversations, row: str, *, counted: bool = True) -> Any:
        memory = memory_for(self, row, counted=counted)
        if memory is None:
            return None
        spy = next((s for r, c, s in made if s is memory), None) or SpyCache(row)
        if spy is not memory:
            if row in self.memories and self.memories[row] is memory:
                self.memories[row] = spy
            made.append((row, counted, spy))
        return spy

    def spy_generate(self: e2e.Conversations, row: str, ids: list[int], seed: int, memory: Any = None) -> Any:
        SpyCache.generating = row
        try:
            return generate(self, row, ids, seed, memory)
        finally:
            SpyCache.generating = None

    monkeypatch.setattr(e2e.Conversations, "conversation_memory", spy_memory)
    monkeypatch.setattr(e2e.Conversations, "generate", spy_generate)
    return made


def test_a_racer_that_remembers_runs_cold_and_warm(chat_bundle: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   spies: list[tuple[str, bool, SpyCache]]) -> None:
    """Suffix decoding as two rows: cold starts every prompt from an empty memory, warm's memory grows by its own
    answer to each earlier prompt in file order (none of the warm-up's), both pass the greedy check, and each
    memory is only ever fed by its own row's generations (the spy refuses any other)."""
    assert _run(chat_bundle, tmp_path / "out", "--methods", "suffix,ar", "--warmup", "1") == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    config = report["config"]
    assert config["methods"] == ["suffix", "suffix:warm", "ar"] and config["racers"] == ["suffix", "ar"]
    assert config["row_labels"] == {"suffix": "Suffix decoding (cold)", "suffix:warm": "Suffix decoding (warm)",
                                    "ar": "AR"}
    assert config["remembering"] == ["suffix"] and config["memory"] == "both"
    assert set(report["summary"]) == {"suffix", "suffix:warm", "ar"}
    assert report["mismatches"] == [] and report["ties"] == []
    entries = report["prompts"]
    assert [e["methods"]["suffix"]["memory_answers"] for e in entries] == [0, 0, 0, 0]
    assert [e["methods"]["suffix:warm"]["memory_answers"] for e in entries] == [0, 1, 2, 3]
    assert all("memory_answers" not in e["methods"]["ar"] for e in entries)
    assert report["summary"]["suffix:warm"]["memory_answers"] == {"mean": 1.5, "max": 3}
    assert report["summary"]["suffix"]["memory_answers"] == {"mean": 0.0, "max": 0}
    assert "memory_answers" not in report["summary"]["ar"]
    assert report["by_category"]["all"]["suffix:warm"]["memory_answers"] == {"mean": 1.5, "max": 3}
    assert "cold" in report["notes"]["memory_cold"] and "warm" in report["notes"]["memory_warm"]
    assert "suffix:warm = Suffix decoding (warm): its memory held 1.5 earlier answers on average" in printed
    for e in entries:
        assert _answer(e, "suffix") == _answer(e, "suffix:warm") == _answer(e, "ar")
    # the memories handed out: the warm-up's (uncounted, each fresh), one per cold conversation, one warm for the run
    warm = [s for r, c, s in spies if r == "suffix:warm" and c]
    cold = [s for r, c, s in spies if r == "suffix" and c]
    assert len(warm) == 1 and len(cold) == 4
    assert len({id(s) for _, _, s in spies}) == len(spies)  # never one memory for two conversations but warm's
    (memory,) = warm
    assert memory.held_answers == 4 and all(s.held_answers == 1 for s in cold)
    assert [list(memory.response(r)) for r in memory.requests] == [_answer(e, "suffix:warm") for e in entries]


@pytest.mark.parametrize(("memory", "rows"), [("cold", ["suffix", "dart", "ar"]),
                                              ("warm", ["suffix:warm", "dart", "ar"])])
def test_memory_picks_the_rows(chat_bundle: Path, tmp_path: Path, memory: str, rows: list[str]) -> None:
    """``--memory cold|warm``: one row for the racer that remembers; a racer that does not is one row either way."""
    assert _run(chat_bundle, tmp_path / "out", "--methods", "suffix,dart,ar", "--memory", memory, "--warmup", "0",
                "--no-html", limit=2, new=6) == 0
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert report["config"]["methods"] == rows and list(report["summary"]) == rows
    assert report["mismatches"] == []


def test_two_turns_are_reported_apart(chat_bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      two_turn_set: list[dict[str, Any]],
                                      spies: list[tuple[str, bool, SpyCache]]) -> None:
    """``--turns 2``: ``by_turn`` holds each turn's summary, categories and best racer over that turn's generations
    only, the printed tables and the HTML show each turn apart, every racer answers the follow-up after its own
    first answer (its memory holding it: cold 0 then 1 earlier answer, warm all its earlier ones)."""
    assert _run(chat_bundle, tmp_path / "out", "--dataset", "mt-bench", "--turns", "2", "--warmup", "0",
                "--methods", "suffix,dart,ar", limit=3, new=8) == 0
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert "summary_per_turn" not in report and report["mismatches"] == []
    rows = report["config"]["methods"]
    assert rows == ["suffix", "suffix:warm", "dart", "ar"]
    entries = report["prompts"]
    assert [(e["id"], e["turn"]) for e in entries] == [(q["id"], t) for q in two_turn_set for t in (1, 2)]
    assert [e["methods"]["suffix"]["memory_answers"] for e in entries] == [0, 1] * 3
    assert [e["methods"]["suffix:warm"]["memory_answers"] for e in entries] == list(range(6))
    by_turn = report["by_turn"]
    assert list(by_turn) == ["1", "2"]
    for t, figures in by_turn.items():
        mine = [e for e in entries if str(e["turn"]) == t]
        assert set(figures) == {"summary", "by_category", "best_by_category"}
        assert list(figures["by_category"]) == list(figures["best_by_category"]) == ["writing", "math"]
        for m in rows:
            assert figures["summary"][m]["tokens"] == sum(e["methods"][m]["tokens"] for e in mine)
            for c, per_row in figures["by_category"].items():
                assert per_row[m]["tokens"] == sum(e["methods"][m]["tokens"] for e in mine if e["category"] == c)
                assert per_row[m]["num_drafts"] == sum(e["methods"][m]["num_drafts"] for e in mine
                                                       if e["category"] == c)
        for c, per_row in figures["by_category"].items():
            assert figures["best_by_category"][c] == max(("suffix", "suffix:warm", "dart"),
                                                         key=lambda m: per_row[m]["speedup_vs_ar"])
    assert by_turn["2"]["summary"]["suffix"]["memory_answers"] == {"mean": 1.0, "max": 1}
    assert by_turn["1"]["summary"]["suffix"]["memory_answers"] == {"mean": 0.0, "max": 0}
    for m in rows:
        assert report["summary"][m]["tokens"] == sum(by_turn[t]["summary"][m]["tokens"] for t in ("1", "2"))
        for turn in ("1", "2"):  # each turn's own table
            table = printed.split(f"\nturn {turn}: 3 prompts")[1].split("\n\n")[0]
            assert f"{m:<11} {by_turn[turn]['summary'][m]['tokens']:>7} " in table
    assert "2 turns pooled: 3 prompts" in printed
    for first, follow in zip(entries[::2], entries[1::2], strict=True):  # the follow-up holds the own first answer
        for m in rows:
            assert follow["methods"][m]["prompt_tokens"] > first["prompt_tokens"] + first["methods"][m]["tokens"]
    html = (tmp_path / "out/e2e.html").read_text()
    for turn in ("1", "2"):
        assert f"Turn {turn}: " in html and f"Turn {turn}: Speedup vs AR by category" in html
    # each turn's card holds its own table: the second turns' memory column says warm held 1, 3 and 5 answers
    second = html.split("<h2>Turn 2: ")[1].split("</table>")[0]
    assert ">suffix:warm</td>" in second and "<td>3.0 (max 5)</td>" in second
    warm = [s for r, c, s in spies if r == "suffix:warm" and c]
    assert len(warm) == 1 and warm[0].held_answers == 6


def test_the_rows_helpers_keep_a_row_general() -> None:
    from dart_core.race import memory_rows, row_key, row_label, row_racer, row_variant

    assert memory_rows(["dart", "suffix", "ar"], lambda k: k == "suffix") == ["dart", "suffix", "suffix:warm", "ar"]
    assert memory_rows(["suffix"], lambda k: True, "warm") == ["suffix:warm"]
    with pytest.raises(ValueError, match="cold, warm, both"):
        memory_rows(["suffix"], lambda k: True, "hot")
    key = row_key("dart", "max_nodes=12")  # a setting as a variant, as a later issue will add
    assert (key, row_racer(key), row_variant(key)) == ("dart:max_nodes=12", "dart", "max_nodes=12")
    assert row_label(key) == "DART (max_nodes=12)" and row_label("dart") == "DART"
    assert row_label("suffix", remembers=True) == "Suffix decoding (cold)"
    assert row_label("dart:off", remembers=True) == "DART (no memory)"
    # all: a racer whose memory is an option also races with it off, first; one that is its memory does not
    assert memory_rows(["dart", "suffix", "ar"], lambda k: k != "ar", "all", lambda k: k == "dart") == [
        "dart:off", "dart", "dart:warm", "suffix", "suffix:warm", "ar"]


def test_the_n_gram_memory_races_off_cold_and_warm(chat_bundle: Path, tmp_path: Path) -> None:
    """``--ngram-memory --memory all``: N-gram only as three rows — its memory off (the store alone, holding
    nothing), cold and warm — each lossless; warm draws on its earlier answers, off on none."""
    # the budget off: every row verifies the trees its search drafts, so the rows' steps compare one for one
    assert _run(chat_bundle, tmp_path / "out", "--methods", "ngram-only,ar", "--ngram-memory", "--memory", "all",
                "--warmup", "0", "--no-html", "--budget", "off", limit=3, new=12) == 0
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    rows = ["ngram-only:off", "ngram-only", "ngram-only:warm", "ar"]
    assert report["config"]["methods"] == rows and report["mismatches"] == []
    assert report["config"]["row_labels"]["ngram-only:off"] == "N-gram only (no memory)"
    entries = report["prompts"]
    assert [e["methods"]["ngram-only:warm"]["memory_answers"] for e in entries] == [0, 1, 2]
    assert [e["methods"]["ngram-only"]["memory_answers"] for e in entries] == [0, 0, 0]
    assert all("memory_answers" not in e["methods"]["ngram-only:off"] for e in entries)
    # at a conversation's start the cold memory is empty: the search is the store's alone, as with the memory off
    for e in entries:
        assert [s["tokens"] for s in e["methods"]["ngram-only"]["steps"]] == \
            [s["tokens"] for s in e["methods"]["ngram-only:off"]["steps"]]



def test_per_category_takes_the_first_prompts_of_each_category(chat_bundle: Path, tmp_path: Path,
                                                              two_turn_set: list[dict[str, Any]]) -> None:
    assert _run(chat_bundle, tmp_path / "out", "--dataset", "mt-bench", "--per-category", "1", "--methods", "ar",
                "--warmup", "0", "--no-html", limit=0, new=4) == 0
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert [e["id"] for e in report["prompts"]] == ["mt-bench-81", "mt-bench-82"]  # the second writing one left out
    assert report["config"]["per_category"] == 1
    assert e2e.first_of_each_category(two_turn_set, 0) == two_turn_set
    with pytest.raises(e2e.BenchError, match="--per-category takes a count"):
        e2e.load_prompts(e2e.Sources("", {}, None, False, None, True, dataset="mt-bench"), 0, per_category=-1)


def test_rows_of_settings_race_beside_the_racer_with_their_own_budget(chat_bundle: Path, tmp_path: Path) -> None:
    """``--methods ar,dart,dart:max_nodes=3,dart:budget=position``: three DART rows on the same prompts, each lossless;
    the hand-sized row verifies at most its three nodes (its budget off), the others cut what they draft; the JSON
    names each row's rule and reports each automatic budget (its cost curve, calibration and sizes chosen)."""
    rows = ["ar", "dart", "dart:max_nodes=3", "dart:budget=position"]
    assert _run(chat_bundle, tmp_path / "out", "--methods", ",".join(rows), "--warmup", "0", "--no-html",
                limit=3, new=12) == 0
    report = json.loads((tmp_path / "out/e2e.json").read_text())
    assert report["config"]["methods"] == rows and report["mismatches"] == []
    assert report["config"]["resolved"]["budgets"] == {"dart": "node", "dart:max_nodes=3": "off",
                                                       "dart:budget=position": "position"}
    assert report["config"]["resolved"]["racer_settings"]["dart:max_nodes=3"]["max_nodes"] == 3
    assert report["config"]["resolved"]["racer_settings"]["dart"]["max_nodes"] == 60  # the most a step's cut keeps
    summary = report["summary"]
    assert len(summary["dart:max_nodes=3"]["nodes_histogram"]) <= 4
    assert summary["dart:max_nodes=3"]["nodes_per_step"] == summary["dart:max_nodes=3"]["drafted_nodes_per_step"]
    for row in ("dart", "dart:budget=position"):
        assert summary[row]["nodes_per_step"] <= summary[row]["drafted_nodes_per_step"]
        assert sum(summary[row]["nodes_histogram"]) == summary[row]["verify_steps"]
    assert set(report["budgets"]) == {"dart", "dart:budget=position"}
    budget = report["budgets"]["dart"]
    assert budget["rule"] == "node" and budget["cost_curves"]["1"]["ms_by_rows"]["1"] > 0
    assert budget["calibration"]["by_depth"][0]["depth"] == 1
    assert report["config"]["row_labels"]["dart:max_nodes=3"] == "DART (max_nodes=3)"
    for entry in report["prompts"]:
        steps = entry["methods"]["dart"]["steps"]
        assert all(s["tree_size"] <= s["drafted_size"] for s in steps if not s["prefill"])
