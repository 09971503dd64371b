"""The app in a real browser: headless Debian ``chromium`` driven by Playwright (no browser download: Playwright
is pointed at the system binary; ``.ci/run`` installs the ``chromium`` package when it is missing).

Types a prompt, sees every column fill and the plots render, presses Stop mid-stream, sends again, and saves
screenshots (light and dark theme) to $DART_ARTIFACTS or tests/artifacts/. Without a chromium binary the test is
skipped, unless DART_REQUIRE_BROWSER=1 (as in CI), where it fails.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers_app import BUNDLE, MAX_NEW_TOKENS, Server, artifact_dir, held_out_prompt, running_app

REQUIRED = os.environ.get("DART_REQUIRE_BROWSER") == "1"  # set by .ci/run: no silent skip in CI
if not REQUIRED:
    sync_api = pytest.importorskip("playwright.sync_api")
else:
    import playwright.sync_api as sync_api

METHODS = ("dart", "eagle3", "ar")
PLOTS = ("plot-tau", "plot-latency", "plot-speed", "plot-acceptance", "plot-tree")
RACE_TIMEOUT_MS = 120_000


def chromium_binary() -> str | None:
    """$DART_CHROMIUM, else the Debian package's binary."""
    for candidate in (os.environ.get("DART_CHROMIUM"), "/usr/bin/chromium", shutil.which("chromium")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def wait_status(page: Any, text: str, timeout: int = RACE_TIMEOUT_MS) -> None:
    page.wait_for_function("t => (document.querySelector('#status')?.innerText || '').includes(t)", arg=text,
                           timeout=timeout)


def set_max_new_tokens(page: Any, n: int) -> None:
    """Type into the slider's number box (the Settings accordion must be open); retried, since a busy page can
    drop the first edit."""
    box = page.locator("#max-new-tokens input[type=number]")
    box.wait_for(state="visible", timeout=30_000)
    for _ in range(3):
        box.fill(str(n))
        box.blur()  # Gradio commits the number box on input and on blur
        try:
            page.wait_for_function("n => document.querySelector('#max-new-tokens input[type=range]').value == n",
                                   arg=n, timeout=10_000)
            return
        except sync_api.TimeoutError:
            continue
    raise AssertionError(f"could not set 'Max new tokens' to {n}")


def lane_tokens(page: Any, method: str) -> int:
    chip = page.locator(f"#lane-{method} .chip-tokens").inner_text()
    return int(re.fullmatch(r"(\d+) tok", chip.strip()).group(1))


def race_to_completion(page: Any, prompt: str) -> None:
    page.fill("#prompt textarea", prompt)
    page.click("#send")
    wait_status(page, "Done")


def check_finished_page(page: Any, prompt: str) -> None:
    """Every column has text beyond the prompt, drafts highlighted; summary cards (with the draft tokens verified
    and accepted) and all five plots drawn, the per-position acceptance plot with one line per drafting racer."""
    for m in METHODS:
        body = page.locator(f"#lane-{m} .lane-body").inner_text()
        generated = page.locator(f"#lane-{m} .lane-body .completion").inner_text()
        assert len(body) > len(prompt.strip()) and len(generated) > len(prompt.strip()), m
        assert lane_tokens(page, m) == MAX_NEW_TOKENS, m
        assert "token limit" in page.locator(f"#lane-{m} .lane-state").inner_text()
    assert page.locator("#lane-dart .tok-dart").count() > 0, "no DART draft tokens highlighted"
    assert page.locator("#lane-eagle3 .tok-eagle3").count() > 0, "no EAGLE-3 draft tokens highlighted"
    assert page.locator("#lane-ar .tok-draft").count() == 0, "AR drafts nothing"
    cards = page.locator("#summary").inner_text()
    assert "vs AR" in cards and "tok/s" in cards and "identical to AR" in cards
    assert "drafted" in cards and "accepted" in cards
    for plot in PLOTS:
        traces = page.locator(f"#{plot} .js-plotly-plot .scatterlayer .trace")
        assert traces.count() >= 1, f"{plot} drew nothing"
    assert page.locator("#plot-tree .scatterlayer .point").count() > 2, "the draft tree has no nodes"
    assert "accepted" in page.locator("#plot-tree .gtitle").text_content()
    lines = page.locator("#plot-acceptance .js-plotly-plot .scatterlayer .trace")
    assert lines.count() == len(METHODS) - 1, "the per-position acceptance plot needs one line per drafting racer"
    assert page.locator("#plot-acceptance .scatterlayer .point").count() >= 2, "no per-position points"
    legend = page.locator("#plot-acceptance .legendtext").all_text_contents()  # SVG text
    assert {"DART", "EAGLE-3"} <= set(legend), legend


def required_chromium() -> str:
    """The chromium binary; without one the test is skipped (failed in CI, where it must run)."""
    binary = chromium_binary()
    if binary is None:
        message = "no chromium binary: install the Debian package (apt-get install -y chromium) or set DART_CHROMIUM"
        if REQUIRED:
            pytest.fail(message)
        pytest.skip(message)
    return binary


@contextmanager
def browser_page(binary: str, url: str) -> Iterator[tuple[Any, Any, list[str]]]:
    """Headless chromium with the page at ``url`` loaded (its prompt box up): the browser, the page and the
    page's script errors as they come; the browser is closed afterwards."""
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=binary, headless=True,
                                    args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            errors: list[str] = []
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(url)
            page.wait_for_selector("#prompt textarea", timeout=60_000)
            yield browser, page, errors
        finally:
            browser.close()


def test_race_in_a_real_browser(app_server: Server) -> None:
    binary = required_chromium()
    out = artifact_dir()
    with browser_page(binary, app_server.url) as (browser, page, errors):
        for plot in PLOTS:  # the empty plots are there before any prompt
            page.wait_for_selector(f"#{plot} .js-plotly-plot", timeout=30_000)

        # 1. a prompt races to the end in every column
        prompt = held_out_prompt(5)
        race_to_completion(page, prompt)
        check_finished_page(page, prompt)
        page.screenshot(path=str(out / "app-light.png"), full_page=True)

        # 2. a second visitor queues behind a long race; Stop mid-stream ends it, the second one runs
        other = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
        other.goto(app_server.url)
        other.wait_for_selector("#prompt textarea", timeout=60_000)
        other.fill("#prompt textarea", held_out_prompt(2))
        page.click("#settings button.label-wrap", timeout=10_000)
        set_max_new_tokens(page, 900)
        page.fill("#prompt textarea", held_out_prompt(1))
        page.click("#send")
        wait_status(page, "Racing")
        other.click("#send")
        other.wait_for_function("(document.querySelector('#status')?.innerText || '').includes('queue')",
                                timeout=30_000)  # Gradio's queue position, e.g. "queue: 1/1"
        page.click("#stop")
        wait_status(page, "Stopped", timeout=30_000)
        page.wait_for_timeout(1000)  # no late update may overwrite the stopped state
        assert "Stopped" in page.locator("#status").inner_text()
        states = {m: page.locator(f"#lane-{m} .lane-state").inner_text().strip() for m in METHODS}
        # AR, the slowest, is cut short; a drafter may have reached the token limit already
        assert states["ar"] == "stopped" and 0 < lane_tokens(page, "ar") < 900, states
        assert set(states.values()) <= {"stopped", "token limit"}, states
        page.screenshot(path=str(out / "app-stopped.png"), full_page=True)
        wait_status(other, "Done")  # the queued request ran once the model was free
        assert lane_tokens(other, "dart") == MAX_NEW_TOKENS
        other.context.close()

        # 3. and send again
        set_max_new_tokens(page, MAX_NEW_TOKENS)
        race_to_completion(page, prompt)
        check_finished_page(page, prompt)

        # 4. the Racers picker: unticked, EAGLE-3's column hides and the race runs without it; ticked, back
        page.locator("#racers label", has_text="EAGLE-3").click()
        page.wait_for_selector("#lane-eagle3", state="hidden", timeout=10_000)
        race_to_completion(page, prompt)
        cards = page.locator("#summary").inner_text()
        assert "DART" in cards and "EAGLE-3" not in cards, cards
        assert page.locator("#lane-dart").is_visible() and page.locator("#lane-ar").is_visible()
        page.screenshot(path=str(out / "app-picked.png"), full_page=True)
        page.locator("#racers label", has_text="EAGLE-3").click()
        page.wait_for_selector("#lane-eagle3", state="visible", timeout=10_000)

        # 5. the dark theme: plots keep readable (light) axis text
        page.goto(app_server.url + "/?__theme=dark")
        page.wait_for_selector("#prompt textarea", timeout=60_000)
        race_to_completion(page, prompt)
        check_finished_page(page, prompt)
        assert page.evaluate("document.body.classList.contains('dark')")
        fill = page.evaluate("getComputedStyle(document.querySelector('#plot-tau .main-svg .xtick text')).fill")
        assert fill == "rgb(209, 213, 219)", fill
        page.screenshot(path=str(out / "app-dark.png"), full_page=True)
        assert not errors, errors


def test_the_measured_on_this_host_panel_in_a_real_browser(tmp_path: Path) -> None:
    """The "Measured on this host" panel, opened in the browser, shows the last runs of each benchmark for the
    loaded models, each from its own JSON: the pooled e2e table and its heatmap by kind of prompt, τ by output
    position (``bench long``) as a table and a plot, and the stream-count sweep (``bench concurrency``) as a table
    with each racer's crossover and as a plot with one line per racer."""
    import json

    from dart_core.bench.__main__ import main as bench_main

    binary = required_chromium()
    results = tmp_path / "results"
    common = ["--bundle", str(BUNDLE), "--dtype", "float32", "--threads", "1", "--no-html", "--no-progress"]
    records = [json.loads(line) for line in (BUNDLE / "prompts.jsonl").read_text().splitlines()[:2]]
    prompts = tmp_path / "prompts.jsonl"  # two kinds of prompt: the panel's table and heatmap by kind
    prompts.write_text("".join(json.dumps({**r, "category": c}) + "\n"
                               for r, c in zip(records, ("code", "prose"), strict=True)))
    assert bench_main(["e2e", *common, "--prompts", str(prompts), "--max-new-tokens", "8", "--methods",
                       "dart,eagle3,ar", "--no-hf-generate", "--out", str(results / "e2e")]) == 0
    sweep_e2e = json.loads((results / "e2e" / "e2e.json").read_text())
    assert bench_main(["long", *common, "--limit", "1", "--max-new-tokens", "130", "--methods", "dart,ar",
                       "--out", str(results / "long")]) == 0
    assert bench_main(["concurrency", *common, "--limit", "2", "--streams", "1,2", "--max-new-tokens", "8",
                       "--methods", "dart,eagle3,ar", "--no-hf-generate", "--warmup", "0",
                       "--out", str(results / "concurrency")]) == 0
    sweep = json.loads((results / "concurrency" / "concurrency.json").read_text())
    with (running_app(tmp_path, "--bench-results", str(results)) as server,
          browser_page(binary, server.url) as (_, page, errors)):
        page.click("#standings button.label-wrap", timeout=10_000)
        page.wait_for_selector("#standings-table .standings-concurrency", timeout=30_000)
        panel = page.locator("#standings-table")
        assert "2 prompts" in panel.locator(".standings-facts").inner_text()
        assert panel.locator(".standings-position").count() == 1, "no τ-by-position table"
        row = panel.locator(".standings-concurrency tr", has_text="DART").inner_text().split("\t")
        dart = [f"{sweep['by_streams'][b]['dart']['speedup_vs_ar']:.2f}×" for b in ("1", "2")]
        cross = sweep["crossover"]["dart"]
        assert row[1:3] == dart and row[3] == (f"B={cross}" if cross else "none up to B=2"), row
        page.wait_for_selector("#standings-concurrency .js-plotly-plot", timeout=30_000)
        lines = page.locator("#standings-concurrency .scatterlayer .trace")
        assert lines.count() == 3, "one line per racer (DART, EAGLE-3, AR)"
        page.wait_for_selector("#standings-position .js-plotly-plot", timeout=30_000)
        assert page.locator("#standings-position .scatterlayer .trace").count() == 2, "DART and AR by position"
        page.wait_for_selector("#standings-categories .js-plotly-plot", timeout=30_000)
        cells = page.locator("#standings-categories .main-svg text").all_text_contents()  # heatmap cell labels
        code = sweep_e2e["by_category"]["code"]["dart"]
        assert any(c.startswith(f"τ {code['tau']:.2f}") for c in cells), cells
        page.locator("#standings").screenshot(path=str(artifact_dir() / "app-standings.png"))
        assert not errors, errors


def test_the_suffix_racer_and_its_memory_per_visitor_in_a_real_browser(tmp_path: Path) -> None:
    """Suffix decoding, unticked at first, ticked in the picker, races; its column says how many earlier answers
    it drew on: none, then this visitor's one; another visitor's race starts from none (its own memory)."""
    binary = required_chromium()
    prompt = held_out_prompt(3)

    def memory_chip(page: Any) -> str:
        return page.locator("#lane-suffix .chip-memory").inner_text().strip()

    with (running_app(tmp_path, "--compare-suffix") as server,
          browser_page(binary, server.url) as (browser, page, errors)):
        suffix = page.locator("#racers label", has_text="Suffix decoding")
        assert not suffix.locator("input").is_checked()
        assert not page.locator("#lane-suffix").is_visible()
        suffix.click()
        page.wait_for_selector("#lane-suffix", state="visible", timeout=10_000)
        race_to_completion(page, prompt)
        assert memory_chip(page) == "0 earlier answers"
        assert "Suffix decoding" in page.locator("#summary").inner_text()
        race_to_completion(page, prompt)
        assert memory_chip(page) == "1 earlier answer"
        page.screenshot(path=str(artifact_dir() / "app-suffix.png"), full_page=True)
        other = browser.new_context(viewport={"width": 1440, "height": 1000}).new_page()
        other.goto(server.url)
        other.wait_for_selector("#prompt textarea", timeout=60_000)
        other.locator("#racers label", has_text="Suffix decoding").click()
        other.wait_for_selector("#lane-suffix", state="visible", timeout=10_000)
        race_to_completion(other, prompt)
        assert memory_chip(other) == "0 earlier answers"  # the first visitor's answers stay theirs
        other.context.close()
        assert not errors, errors
