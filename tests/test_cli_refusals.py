"""Issue 65 (part 5): every flag value the command lines can check is refused right after parsing, before any model
loads, with one ``error:`` line naming the value and its limit (exit code 2), by one checker for ``generate`` and
every benchmark (``dart_core.options.limits``). Each CLI test makes loading a model fail the test, so a refusal that
comes only after the load cannot pass. One file for them all: the checker is shared, and so are the fixtures."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import pytest

from dart_core.bench.__main__ import main as bench_main
from dart_core.generate.__main__ import main as generate_main
from dart_core.options.limits import (
    MAX_NEW_TOKENS_CAP,
    flag_problem,
    loaded_problem,
    target_limits,
    usable_cores,
)

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "assets" / "tiny"  # its target: a context of 1,024 tokens, longest token 45 characters
TINY_CHARS = 1024 * 45

if not (TINY / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)


@pytest.fixture
def no_load(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loading a model (or starting the app, for ``bench app`` / ``soak``) fails the test."""
    import dart_core.arena
    import dart_core.generate.__main__ as generate_cli
    from dart_core.bench import in_app, soak

    def loaded(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a model was loaded before the bad value was refused")

    for owner, name in ((dart_core.arena, "load_arena"), (dart_core.arena, "load_target"),
                        (generate_cli, "load_arena"), (in_app, "_run"), (soak, "_run")):
        monkeypatch.setattr(owner, name, loaded)


def refused(main: Any, argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run ``main(argv)``: refused with exit code 2 at once; its stderr."""
    started = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusal (a value its type rejects)
        code = e.code
    assert code == 2
    assert time.perf_counter() - started < 5.0  # the target's small files at most, never its weights
    err = capsys.readouterr().err
    assert "error: " in err and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def big_prompts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A prompt file whose second prompt has 5 MB: more than any prompt that fits the toy's context."""
    path = tmp_path_factory.mktemp("prompts") / "big.jsonl"
    path.write_text(json.dumps({"prompt": "def f():"}) + "\n" + json.dumps({"prompt": "y" * 5_000_000}) + "\n",
                    encoding="utf-8")
    return path


E2E_CASES = [
    (["--limit", "-1"], "--limit must be at least 0 (0: every prompt), got -1"),  # dropped the last prompt
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
    (["--max-new-tokens", "100000"], "--max-new-tokens 100,000 is more than the target's context of 1,024 tokens "
                                     "(max_position_embeddings in"),
    (["--methods", "dart,nosuch"], "--methods dart,nosuch: 'nosuch' is no racer; known: dart, eagle3, dflash"),
    (["--seeds", "0"], "--seeds must be at least 1, got 0"),
    (["--temperature", "-1"], "--temperature must be a finite number >= 0 (0 = greedy), got -1.0"),
    (["--top-p", "2"], "--top-p must be in (0, 1] (1.0 = off), got 2.0"),
    (["--dart-nodes", "0"], "--dart: tree size must be between 1 and"),
    (["--threads", "999"], f"argument --threads: 999: must be between 1 and {usable_cores()}, the CPU cores"),
    (["--methods", "ar,dart:tree=3"], "--methods: row 'dart:tree=3': DART has no setting 'tree' (its settings: "
                                      "budget, top_k"),
    (["--methods", "dart:max_nodes=0"], "--methods: row 'dart:max_nodes=0': tree size must be between 1 and 512"),
    (["--methods", "dart:budget=auto"], "budget must be one of node, position, off, got 'auto'"),
    (["--methods", "nosuch:max_nodes=3"], "'nosuch:max_nodes=3' is no racer; known: dart, eagle3"),
    (["--budget", "auto"], "argument --budget: invalid choice: 'auto'"),
]


@pytest.mark.parametrize(("argv", "message"), E2E_CASES)
def test_e2e_refuses_a_bad_value_before_loading(argv: list[str], message: str, no_load: None,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(bench_main, ["e2e", "--bundle", str(TINY), "--no-progress", *argv], capsys)
    assert message in err, err


def test_e2e_refuses_a_prompt_longer_than_any_that_fits_before_loading(big_prompts: Path, no_load: None,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(bench_main, ["e2e", "--bundle", str(TINY), "--prompts", str(big_prompts), "--no-progress"], capsys)
    assert (f"{big_prompts}, prompt 2: the prompt is 5,000,000 characters long, more than any prompt that fits the "
            f"context of 1,024 tokens can have ({TINY_CHARS:,} characters here)") in err, err


@pytest.mark.parametrize(("argv", "message"), [
    (["long", "--prompt", "x" * (TINY_CHARS + 1)], f"--prompt: the prompt is {TINY_CHARS + 1:,} characters long"),
    (["long", "--max-new-tokens", "2000"], "--max-new-tokens 2,000 is more than the target's context of 1,024"),
    (["long", "--limit", "-3"], "--limit must be at least 0 (0: every prompt), got -3"),
    (["concurrency", "--limit", "-1"], "--limit must be at least 0 (0: every prompt), got -1"),
    (["concurrency", "--methods", "nosuch"], "'nosuch' is no racer; known: "),
    (["concurrency", "--methods", "dart:nodes=lots"], "row 'dart:nodes=lots': nodes: expected an integer"),
    (["concurrency", "--warmup", "-1"], "--warmup must be at least 0, got -1"),
    (["verify-cost", "--threads", "0"], "argument --threads: 0: must be between 1 and"),
    (["app", "--limit", "-1"], "--limit must be at least 0 (0: every prompt), got -1"),
    (["app", "--max-new-tokens", "100000"], "--max-new-tokens 100,000 is more than the target's context of 1,024"),
    (["soak", "--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
])
def test_the_other_benchmarks_refuse_a_bad_value_before_loading(argv: list[str], message: str, no_load: None,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(bench_main, [*argv[:1], "--bundle", str(TINY), *argv[1:]], capsys)
    assert f"python -m dart_core.bench {argv[0]}: error: " in err  # the subcommand's own usage
    assert message in err, err


@pytest.mark.parametrize(("argv", "message"), [
    (["--threads", "999"], f"argument --threads: 999: must be between 1 and {usable_cores()}, the CPU cores this "
                           "process may use"),
    (["--threads", "0"], "argument --threads: 0: must be between 1 and"),
    (["--max-new-tokens", "0"], "--max-new-tokens must be at least 1, got 0"),
    (["--max-new-tokens", "100000"], "--max-new-tokens 100,000 is more than the target's context of 1,024 tokens"),
    (["--max-length", "0"], "--max-length must be at least 1, got 0"),
    (["--methods", "nosuch"], "--methods nosuch: 'nosuch' is no racer; known: dart, eagle3"),
    (["--methods", "dart:max_nodes=12"], "'dart:max_nodes=12' is no racer; known: dart"),  # rows: the benchmarks'
    (["--top-k", "-1"], "--top-k must be an integer >= 0 (0 = off), got -1"),
    (["--prompt", "y" * (TINY_CHARS + 1)], f"--prompt: the prompt is {TINY_CHARS + 1:,} characters long"),
])
def test_generate_refuses_a_bad_value_before_loading(argv: list[str], message: str, no_load: None,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(generate_main, ["--bundle", str(TINY), "--no-progress", *argv], capsys)
    assert "python -m dart_core.generate: error: " in err and message in err, err


def test_generate_refuses_a_prompt_file_longer_than_any_that_fits(tmp_path: Path, no_load: None,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.txt"
    big.write_text("z" * 5_000_000, encoding="utf-8")
    err = refused(generate_main, ["--bundle", str(TINY), "--prompt-file", str(big)], capsys)
    assert f"--prompt-file {big}: the prompt is 5,000,000 characters long" in err, err
    # --max-length shrinks the context a prompt must fit in, and the bound with it
    err = refused(generate_main, ["--bundle", str(TINY), "--prompt", "y" * 4501, "--max-length", "100"], capsys)
    assert "more than any prompt that fits the context of 100 tokens can have (4,500 characters here)" in err, err


def namespace(**values: Any) -> argparse.Namespace:
    return argparse.Namespace(**values)


def test_without_the_target_s_files_a_fixed_cap_stands_in_for_its_context() -> None:
    """A target whose config.json is not on this machine (a Hub id never fetched): --max-new-tokens is capped at
    MAX_NEW_TOKENS_CAP before loading (the loaded target's context is checked later), and nothing is fetched."""
    ref = "nosuch-org/nosuch-model-for-dart-arena-tests"
    assert target_limits(ref).context is None
    over = flag_problem(namespace(base=ref, max_new_tokens=MAX_NEW_TOKENS_CAP + 1))
    assert over is not None and f"more than {MAX_NEW_TOKENS_CAP:,}, the cap while the target's context" in over
    assert flag_problem(namespace(base=ref, max_new_tokens=MAX_NEW_TOKENS_CAP, prompt="y" * 10**6)) is None
    limits = target_limits(str(TINY / "target"))
    assert (limits.context, limits.longest_token, limits.prompt_chars()) == (1024, 45, TINY_CHARS)
    assert flag_problem(namespace(base=str(TINY / "target"), max_new_tokens=1024, prompt="y" * TINY_CHARS)) is None


def test_the_loaded_target_is_checked_by_the_same_rules_before_tokenizing() -> None:
    class Tokenizer:
        backend_tokenizer = None

        def get_vocab(self) -> dict[str, int]:
            return {"a": 0, "abcd": 1}

    class Target:
        text_config = namespace(max_position_embeddings=100)
        max_context = 64  # the fast path's rows: not the model's context

    args = namespace(max_new_tokens=100, max_length=None)
    assert loaded_problem(args, Tokenizer(), Target(), ["y" * 400]) is None
    assert "fits the context of 100 tokens can have (400 characters here)" in loaded_problem(
        args, Tokenizer(), Target(), ["y" * 401])
    too_many = loaded_problem(namespace(max_new_tokens=101), Tokenizer(), Target(), [])
    assert too_many is not None and "--max-new-tokens 101 is more than the target's context of 100 tokens" in too_many
