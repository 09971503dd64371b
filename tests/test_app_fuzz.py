"""The page's API under generated input: ``python -m dart_arena --bundle assets/tiny`` (the toy, a few tokens per race)
gets hundreds of ``/race`` and ``/regenerate`` requests whose inputs come from a seeded generator (wrong types,
null, NaN and infinities, huge, tiny, negative and fractional numbers, lone surrogates, control characters, very
long prompts; now and then a request whose data is too short, too long or not a list), sent as raw JSON to the
queue's join / SSE endpoints, as any HTTP client could. Every request must
get an answer that says what happened: a race, or a message (a warning in the status banner, or Gradio's error
text), never a bare failure. Every few requests a normal greedy race must still print exactly AR's tokens with
DART and EAGLE-3, and the server must never die or log an unexpected error."""

from __future__ import annotations

import json
import math
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers_app import BUNDLE, held_out_prompt, running_app

from dart_core.racers.registry import racer

SEED = 20240515
REQUESTS = 520
CHECK_EVERY = 10  # a normal greedy race after every this many fuzzed requests (52 in all)
TOKEN_LIMIT = 6  # --max-new-tokens-limit: every race is short, whatever budget a request asks for
REQUEST_TIMEOUT_S = 60.0
# temperature, top-p, top-k, max new tokens, DART tree size, EAGLE-3 total / depth / top-k (ArenaUI.control_labels)
VALID = (0.0, 1.0, 0, TOKEN_LIMIT, 16, 21, 6, 4)
RACERS = ["dart", "eagle3"]  # the Racers picker, the last input (AR always races)
KNOBS = [k for m in ("dart", "eagle3") for k in racer(m).knobs() if k.ui]
RANGES = ((0.0, 2.0), (0.05, 1.0), (0, 200), (1, 8192), *((k.low, k.high) for k in KNOBS))
WHOLE = (False, False, True, True, *(k.kind is int for k in KNOBS))  # integer controls

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)


# ------------------------------------------------------------------------------------------------ generation
ODD = [None, True, False, [], [1], [0.5, "a"], {}, {"value": 1}, {"__type__": "update"}, "", " ", "0.5", "abc",
       "1e3", "NaN", math.nan, math.inf, -math.inf, 0, -0.0, -1, 1e308, -1e308, 5e-324, 10**30, 10**400, -10**400,
       2**63, 2**64 + 1]


def odd_number(rng: random.Random, low: float, high: float, whole: bool) -> Any:
    """A value for a numeric control: in range, at or just past its edges, fractional where a whole number is
    due, or something that is not a number at all."""
    kind = rng.random()
    if kind < 0.35:
        return rng.choice(ODD)
    if kind < 0.55:
        return rng.choice([low, high, low - 1, high + 1, low - 1e-9, high + 1e-9, -high, high * 1000])
    if kind < 0.75 and whole:
        return rng.randint(int(low), int(high)) + rng.choice([0.5, 0.25, 1e-12, -0.5])
    value = rng.uniform(low, high)
    return round(value) if whole else value


def odd_prompt(rng: random.Random) -> Any:
    """A prompt: text of every awkward kind, or a value that is not text."""
    kind = rng.random()
    if kind < 0.25:
        return rng.choice(ODD)
    pieces = [held_out_prompt(rng.randrange(10)), "\ud800", "a\udfffb", "\x00", "\x01\x02\x1b[31m", "\u202e",
              "\ufeff", "\u0301" * 50, "\r\n", "\t", "😀" * 20, "<script>alert(1)</script>", "</div>", "{{x}}",
              "\U0010ffff", " " * 40, "x", "\\u0000"]
    if kind < 0.35:
        return rng.choice(["x = 1\n" * rng.choice([600, 1200, 5000]), "y" * rng.choice([4000, 100_000, 400_000])])
    return "".join(rng.choice(pieces) for _ in range(rng.randint(1, 4)))


def odd_racers(rng: random.Random) -> Any:
    """A value for the Racers picker: a valid subset, an unknown or repeated name, or not a list of names."""
    return rng.choice([[], ["dart"], ["eagle3"], ["eagle3", "dart"], ["dart", "dart"], ["ar"], ["medusa"],
                       "dart", [None], [1, 2], *ODD])


def fuzzed(rng: random.Random) -> list[Any]:
    """The prompt, the eight controls and the Racers picker: a valid request with one to three inputs replaced by
    odd values, or (one in ten) every input odd."""
    values: list[Any] = [held_out_prompt(rng.randrange(10)), *VALID, RACERS]
    every = rng.random() < 0.1
    picks = range(len(values)) if every else rng.sample(range(len(values)), rng.randint(1, 3))
    for i in picks:
        if i == 0:
            values[i] = odd_prompt(rng)
        elif i == len(values) - 1:
            values[i] = odd_racers(rng)
        else:
            values[i] = odd_number(rng, *RANGES[i - 1], WHOLE[i - 1])
    return values


# ------------------------------------------------------------------------------------------------ the client
@dataclass
class Answer:
    """What came back for one request."""

    data: list[Any] | None = None  # the last outputs (process_completed)
    success: bool | None = None
    error: str | None = None  # Gradio's error text, or the HTTP error
    warnings: list[str] = field(default_factory=list)  # gr.Warning toasts

    @property
    def result(self) -> dict[str, Any] | None:
        last = self.data[-1] if self.data else None
        return last if isinstance(last, dict) and "methods" in last else None

    @property
    def status(self) -> str:
        return str(self.data[2]) if self.data and len(self.data) > 2 else ""

    @property
    def message(self) -> str | None:
        """The message that says why the request did not race: Gradio's error text or the status banner's
        warning in the completed answer (None: there is none, or the answer never completed; a toast alone,
        gr.Warning, does not count)."""
        if self.error:
            return self.error
        return self.status if "banner-warn" in self.status else None


def reshaped(rng: random.Random, data: list[Any]) -> Any:
    """The request's ``data`` as a careless API caller might send it: too short, too long, or not a list."""
    return rng.choice([data[:rng.randrange(len(data))], [*data, 1, "extra"], None, {"prompt": data[0]}, data[0]])


def call(http: httpx.Client, fn_index: int, values: list[Any], shape: random.Random | None = None) -> Answer:
    """One request through the queue, as raw JSON (NaN and infinities as Python's json writes them, which the
    server's parser reads back), its events read from the session's SSE stream until it completes; with
    ``shape``, its ``data`` is reshaped (:func:`reshaped`)."""
    session = uuid.uuid4().hex[:12]
    data: Any = [values[0], None, *values[1:]]  # the conversation (a gr.State) is the server's: its slot is ignored
    if shape is not None:
        data = reshaped(shape, data)
    body = json.dumps({"data": data, "fn_index": fn_index, "session_hash": session, "event_data": None,
                       "trigger_id": None}, allow_nan=True)
    r = http.post("/gradio_api/queue/join", content=body, headers={"content-type": "application/json"})
    if r.status_code != 200:
        return Answer(success=False, error=f"HTTP {r.status_code}: {r.text[:300]}")
    answer = Answer()
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as events:
        for line in events.iter_lines():
            if not line.startswith("data:"):
                continue
            msg = json.loads(line[5:])
            if msg.get("msg") == "log" and msg.get("level") in ("warning", "error"):
                answer.warnings.append(str(msg.get("log")))
            elif msg.get("msg") == "unexpected_error":
                answer.success, answer.error = False, msg.get("message")
                break
            elif msg.get("msg") == "process_completed":
                out = msg.get("output") or {}
                answer.success, answer.data = bool(msg.get("success")), out.get("data")
                answer.error = out.get("error")
                break
    return answer


def fn_indices(url: str) -> dict[str, int]:
    config = httpx.get(url + "/config", timeout=10).json()
    return {d["api_name"]: d["id"] for d in config["dependencies"] if d.get("api_name") in ("race", "regenerate")}


# ------------------------------------------------------------------------------------------------ the test
def test_generated_requests_all_get_an_answer_and_greedy_stays_exact(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    counts = {"requests": 0, "reshaped": 0, "raced": 0, "with a message": 0, "of them Gradio's": 0,
              "without a message": 0, "greedy checks": 0, "greedy fuzzed races": 0}
    silent: list[tuple[list[Any], Answer]] = []
    started = time.monotonic()
    limits = ("--max-new-tokens", str(TOKEN_LIMIT), "--max-new-tokens-limit", str(TOKEN_LIMIT))
    with running_app(tmp_path, *limits) as app, httpx.Client(base_url=app.url, timeout=REQUEST_TIMEOUT_S) as http:
        fns = fn_indices(app.url)
        for i in range(1, REQUESTS + 1):
            values = fuzzed(rng)
            endpoint = "regenerate" if rng.random() < 0.1 else "race"
            shape = rng if rng.random() < 0.05 else None
            answer = call(http, fns[endpoint], values, shape)
            counts["requests"] += 1
            counts["reshaped"] += shape is not None
            if answer.result is not None:
                counts["raced"] += 1
                matches = answer.result["greedy_matches_ar"]
                if matches is not None:  # a greedy race that ran to its end
                    counts["greedy fuzzed races"] += 1
                    assert all(matches.values()), (values, answer.result)
            elif answer.message is not None:
                counts["with a message"] += 1
                counts["of them Gradio's"] += bool(answer.error)
            else:
                counts["without a message"] += 1
                silent.append((values, answer))
            assert app.process.poll() is None, f"the server died after request {i} ({values!r}):\n{app.log()}"
            if i % CHECK_EVERY == 0:
                check = call(http, fns["race"], [held_out_prompt(i % 10), *VALID, RACERS])
                assert check.result is not None, (check, app.log()[-3000:])
                assert check.result["greedy_matches_ar"] == {"dart": True, "eagle3": True}, check.result
                counts["greedy checks"] += 1
        log = app.log()
    wall = time.monotonic() - started
    print(f"\nfuzz: {counts} in {wall:.0f} s (seed {SEED})")
    assert not silent, f"{len(silent)} requests got no message, e.g. {silent[:3]}"
    assert counts["greedy checks"] >= 50 and counts["raced"] > 50
    # the handlers never failed (ArenaUI.guarded logs "unexpected error while ..."); the only tracebacks are
    # Gradio's own, for a request with too few values, which the caller got a message for
    assert "unexpected error while" not in log, log[-5000:]
    assert log.count("Traceback") == log.count("didn't receive enough input values"), log[-5000:]
