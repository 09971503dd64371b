"""The app end to end: ``python -m dart_arena --bundle assets/tiny`` (the toy: fast), on a free localhost port, driven
with ``gradio_client`` (and raw HTTP for a browser that goes away). Greedy DART and EAGLE-3 must print exactly AR's
text."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
from helpers_app import MAX_NEW_TOKENS, Server, held_out_prompt

gradio_client = pytest.importorskip("gradio_client")

# temperature, top-p, top-k, max new tokens, DART nodes, EAGLE-3 depth / top-k / total
GREEDY = (0.0, 1.0, 0, MAX_NEW_TOKENS, 20, 21, 6, 4)  # sampling, budget, DART size, EAGLE-3 total/depth/top-k
STATUS = 1  # outputs as the client sees them (the session state is left out): prompt, status banner, columns…


def client(server: Server) -> Any:
    return gradio_client.Client(server.url, verbose=False, download_files=False)


def wait_for_log(server: Server, text: str, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while server.log().count(text) < count:
        assert time.monotonic() < deadline, f"server log never showed {text!r} x{count}:\n{server.log()}"
        time.sleep(0.2)


def test_every_method_streams_to_completion_and_greedy_equals_ar(app_server: Server) -> None:
    job = client(app_server).submit(held_out_prompt(5), *GREEDY, api_name="/race")
    updates = list(job)  # every streamed update
    result = job.result()[-1]
    assert len(updates) >= 3, "the race should stream several updates, not just the final one"
    methods = result["methods"]
    assert list(methods) == ["dart", "eagle3", "ar"]
    for m, f in methods.items():
        assert f["status"] == "done", (m, f)
        assert f["tokens"] == MAX_NEW_TOKENS or f["stop_reason"] == "eos", (m, f)
        assert f["text"].strip(), m
        assert f["tau"] >= 1.0 and f["tokens_per_s"] > 0, (m, f)
    assert methods["ar"]["tau"] == 1.0
    assert methods["ar"]["speedup_vs_ar"] == pytest.approx(1.0)
    for m in ("dart", "eagle3"):
        assert methods[m]["token_ids"] == methods["ar"]["token_ids"], f"{m} differs from AR under greedy decoding"
        assert methods[m]["text"] == methods["ar"]["text"]
        assert methods[m]["tau"] > 1.0, f"{m} accepted no drafts at all"
        assert methods[m]["speedup_vs_ar"] is not None
        f = methods[m]  # the acceptance metrics (docs/metrics.md) add up in the API's answer
        assert 0 < f["num_accepted_tokens"] <= f["num_draft_tokens"]
        assert sum(f["acceptance_histogram"]) == f["num_drafts"] <= f["verify_steps"]
        assert sum(f["per_position_acceptance_rate"]) == pytest.approx(f["num_accepted_tokens"] / f["num_drafts"])
        if f["stop_reason"] == "max_new_tokens":  # every verify step emitted its accepted drafts + one token
            assert f["tokens"] == 1 + f["verify_steps"] + f["num_accepted_tokens"], f
    assert methods["ar"]["num_drafts"] == 0 and methods["ar"]["draft_acceptance_rate"] is None
    assert result["greedy_matches_ar"] == {"dart": True, "eagle3": True}
    status_html = job.result()[STATUS]
    assert "Done" in status_html and "identical to AR" in status_html


@pytest.mark.parametrize(("prompt", "message"), [
    ("", "The prompt is empty"),
    ("x = 1\n" * 1200, "context holds 1,024 tokens"),
])
def test_bad_input_gets_a_clear_message(app_server: Server, prompt: str, message: str) -> None:
    out = client(app_server).predict(prompt, *GREEDY, api_name="/race")
    status = out[STATUS]
    assert message in status and "banner-warn" in status, status
    assert "Traceback" not in app_server.log()


def test_requests_queue_and_stop_leaves_the_app_usable(app_server: Server) -> None:
    before = app_server.log().count("race cancelled")
    long = (0.0, 1.0, 0, 900, 20, 6, 4, 21)
    first = client(app_server).submit(held_out_prompt(1), *long, api_name="/race")
    deadline = time.monotonic() + 60
    while "Racing" not in str((first.outputs() or [[None] * 3])[-1][STATUS]):  # the first race is streaming
        assert time.monotonic() < deadline and not first.done(), "the first race never started streaming"
        time.sleep(0.05)
    second = client(app_server).submit(held_out_prompt(2), *GREEDY, api_name="/race")
    ranks = []
    deadline = time.monotonic() + 30
    while not ranks:  # the second waits in the queue behind the first: one race at a time on the shared model
        st = second.status()
        if st.code == gradio_client.utils.Status.IN_QUEUE and st.rank is not None:
            ranks.append(st.rank)
        assert time.monotonic() < deadline and not second.done(), "the second request was never queued"
        time.sleep(0.05)
    first.cancel()  # what the Stop button does
    wait_for_log(app_server, "race cancelled", before + 1)
    result = second.result(timeout=120)[-1]
    assert all(f["status"] == "done" for f in result["methods"].values())
    assert result["greedy_matches_ar"] == {"dart": True, "eagle3": True}


def test_a_closed_browser_cancels_its_race(app_server: Server) -> None:
    """A client that disconnects mid-stream: the server closes the race (and its step generators)."""
    before = app_server.log().count("race cancelled")
    config = httpx.get(app_server.url + "/config", timeout=10).json()
    fn_index = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "race")
    session = uuid.uuid4().hex[:11]
    data = [held_out_prompt(3), None, 0.0, 1.0, 0, 900, 20, 6, 4, 21, ["dart", "eagle3"]]  # ..., the Racers picker
    with httpx.Client(base_url=app_server.url, timeout=30) as http:
        r = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn_index, "session_hash": session,
                                                      "event_data": None, "trigger_id": None})
        r.raise_for_status()
        with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as events:
            generating = 0
            for line in events.iter_lines():
                if line.startswith("data:") and json.loads(line[5:]).get("msg") == "process_generating":
                    generating += 1
                    if generating >= 2:
                        break  # leave mid-stream: the connection closes here
    wait_for_log(app_server, "race cancelled", before + 1)
    out = client(app_server).predict(held_out_prompt(4), *GREEDY, api_name="/race")  # still serving
    assert out[-1]["greedy_matches_ar"] == {"dart": True, "eagle3": True}


def test_eight_visitors_are_served_in_order_and_half_of_them_cancel(app_server: Server) -> None:
    """Eight visitors at once: each waits its turn with its place in the queue shown, four cancel mid-stream, the
    other four get complete, greedy-identical races, and the server serves on."""
    params = (0.0, 1.0, 0, 200, 20, 21, 6, 4)
    jobs = []
    for i in range(8):  # one after another, so the queue's order is the submission order
        jobs.append(client(app_server).submit(held_out_prompt(i), *params, api_name="/race"))
        time.sleep(0.1)
    ranks: dict[int, set[int]] = {i: set() for i in range(8)}
    first_streamed: dict[int, float] = {}
    cancelled: set[int] = set()
    deadline = time.monotonic() + 300
    while not all(job.done() for job in jobs):
        assert time.monotonic() < deadline, "eight races did not finish within 300 s"
        for i, job in enumerate(jobs):
            st = job.status()
            if st.code == gradio_client.utils.Status.IN_QUEUE and st.rank is not None:
                ranks[i].add(st.rank)
            if i not in first_streamed and "Racing" in str((job.outputs() or [[None] * 3])[-1][STATUS]):
                first_streamed[i] = time.monotonic()
                if i % 2 == 1:
                    job.cancel()  # half of them leave mid-stream
                    cancelled.add(i)
        time.sleep(0.02)
    assert cancelled == {1, 3, 5, 7}
    order = sorted(first_streamed, key=first_streamed.get)
    assert order == list(range(8)), f"served out of order: {order}"
    assert all(ranks[i] for i in range(2, 8)), f"some waiting visitors never saw their place in the queue: {ranks}"
    for i in (0, 2, 4, 6):
        result = jobs[i].result()[-1]
        assert all(f["status"] == "done" for f in result["methods"].values()), i
        assert result["greedy_matches_ar"] == {"dart": True, "eagle3": True}, i
    out = client(app_server).predict(held_out_prompt(9), *GREEDY, api_name="/race")  # still serving
    assert out[-1]["greedy_matches_ar"] == {"dart": True, "eagle3": True}
    assert "Traceback" not in app_server.log()


def test_host_limits_cut_tokens_bound_the_queue_and_log_each_race(tmp_path_factory: pytest.TempPathFactory) -> None:
    from helpers_app import running_app

    logdir = tmp_path_factory.mktemp("limits")
    race_log = logdir / "races.jsonl"
    with running_app(logdir, "--max-new-tokens-limit", "300", "--max-queue", "1", "--race-log", str(race_log)) as app:
        first = client(app).submit(held_out_prompt(1), 0.0, 1.0, 0, 900, 20, 21, 6, 4, api_name="/race")
        deadline = time.monotonic() + 60
        while "Racing" not in str((first.outputs() or [[None] * 3])[-1][STATUS]):
            assert time.monotonic() < deadline and not first.done(), "the first race never started streaming"
            time.sleep(0.02)
        second = client(app).submit(held_out_prompt(2), *GREEDY, api_name="/race")  # waits: the queue is full
        deadline = time.monotonic() + 30
        while second.status().code != gradio_client.utils.Status.IN_QUEUE:
            assert time.monotonic() < deadline and not second.done(), "the second request was never queued"
            time.sleep(0.02)
        with pytest.raises(Exception, match=r"(?i)queue is full"):
            client(app).predict(held_out_prompt(3), *GREEDY, api_name="/race")
        capped = first.result(timeout=120)
        assert "over this server&#x27;s limit, so the race stops at 300 new tokens" in capped[STATUS]
        assert all(f["tokens"] <= 300 for f in capped[-1]["methods"].values())
        assert capped[-1]["settings"]["max_new_tokens"] == 300
        assert second.result(timeout=120)[-1]["greedy_matches_ar"] == {"dart": True, "eagle3": True}
        records = [json.loads(line) for line in race_log.read_text(encoding="utf-8").splitlines()]
        assert [r["prompt"] for r in records] == [held_out_prompt(1), held_out_prompt(2)]
        assert records[0]["result"]["settings"]["max_new_tokens"] == 300
