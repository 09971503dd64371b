"""Issue 24 against a running ``python -m dart_arena --bundle assets/tiny``, as a hostile visitor or a host sees it:
Stop, Clear and Regenerate with nothing to act on answer quietly; an unknown event and an upload are refused with
a message; a 20 MB prompt is refused at once and the race after it is served straight away; ``/healthz`` reports
the model process (503 from the moment it is killed until a new one serves), which is restarted when it is killed
mid-race (the next race succeeds)."""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from typing import Any

import httpx
import pytest
from helpers_app import BUNDLE, MAX_NEW_TOKENS, Server, held_out_prompt, running_app

gradio_client = pytest.importorskip("gradio_client")

if not (BUNDLE / "target" / "config.json").is_file():
    pytest.skip("the embedded bundle assets/tiny is missing", allow_module_level=True)

GREEDY = (0.0, 1.0, 0, MAX_NEW_TOKENS, 20, 21, 6, 4)
STATUS = 1  # outputs as the client sees them: prompt, status banner, columns…


def client(server: Server) -> Any:
    return gradio_client.Client(server.url, verbose=False, download_files=False)


def fn_index(server: Server, api_name: str) -> int:
    config = httpx.get(server.url + "/config", timeout=10).json()
    return next(d["id"] for d in config["dependencies"] if d.get("api_name") == api_name)


def test_stop_clear_and_regenerate_with_nothing_to_act_on_answer_quietly(app_server: Server) -> None:
    c = client(app_server)
    stopped = c.predict(api_name="/stop")  # a fresh session: no race at all (was HTTP 500)
    assert "Nothing to stop" in stopped[STATUS]
    done = c.predict(held_out_prompt(0), *GREEDY, api_name="/race")
    assert "Done" in done[STATUS]
    after = c.predict(api_name="/stop")  # right after a race ended
    assert "Nothing to stop" in after[STATUS] and "Done" in after[STATUS]
    cleared = c.predict(api_name="/clear")
    assert cleared[-1] is None
    assert "Nothing to stop" in c.predict(api_name="/stop")[STATUS]  # after Clear
    regen = c.predict("", *GREEDY, api_name="/regenerate")
    assert "Nothing to regenerate" in regen[STATUS]
    assert "didn't return enough output values" not in app_server.log()


def test_an_unknown_event_and_an_upload_are_refused_with_a_message(app_server: Server) -> None:
    with httpx.Client(base_url=app_server.url, timeout=30) as http:
        body = {"data": [], "fn_index": 9999, "session_hash": uuid.uuid4().hex[:11], "event_data": None,
                "trigger_id": None}
        r = http.post("/gradio_api/queue/join", json=body)
        assert r.status_code == 400 and "No event with fn_index 9999" in r.json()["detail"], r.text
        r = http.post("/gradio_api/run/predict", json={**body, "fn_index": "x"})
        assert r.status_code == 400 and "fn_index \"x\"" in r.json()["detail"], r.text
        r = http.post("/gradio_api/queue/join", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["detail"], r.text  # FastAPI's / Gradio's own message
        before = set(os.listdir(gradio_temp_dir())) if os.path.isdir(gradio_temp_dir()) else set()
        r = http.post("/gradio_api/upload", files={"files": ("x.txt", b"hello", "text/plain")})
        assert r.status_code == 403 and "takes no uploads" in r.json()["detail"], r.text
        r = http.post("/gradio_api/upload", files={"files": ("empty.txt", b"", "text/plain")})
        assert r.status_code == 403
        after = set(os.listdir(gradio_temp_dir())) if os.path.isdir(gradio_temp_dir()) else set()
        assert after == before, "an upload reached Gradio's temp folder"
    assert client(app_server).predict(held_out_prompt(1), *GREEDY, api_name="/race")[-1]["greedy_matches_ar"]
    assert "Traceback" not in app_server.log()


def gradio_temp_dir() -> str:
    import tempfile

    return os.environ.get("GRADIO_TEMP_DIR") or os.path.join(tempfile.gettempdir(), "gradio")


def test_a_20_mb_prompt_is_refused_at_once_and_the_next_race_is_served_straight_away(app_server: Server) -> None:
    huge = "x = 1\n" * (20_000_000 // 6)
    started = time.perf_counter()
    with httpx.Client(base_url=app_server.url, timeout=30) as http:
        data = [huge, None, *GREEDY, ["dart", "eagle3"]]
        r = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn_index(app_server, "race"),
                                                      "session_hash": uuid.uuid4().hex[:11], "event_data": None,
                                                      "trigger_id": None})
    refused = time.perf_counter() - started
    assert r.status_code == 413, r.text
    assert "at most" in r.json()["detail"] and "characters" in r.json()["detail"]
    assert refused < 1.0, f"the refusal took {refused:.2f} s"
    # a prompt under the body limit but over any that fits: refused by the handler, before tokenization
    long = "y" * (2 * 1024 * 45)  # twice the toy's bound (1,024 tokens x its longest token, 45 characters)
    started = time.perf_counter()
    out = client(app_server).predict(long, *GREEDY, api_name="/race")
    assert time.perf_counter() - started < 5.0
    assert "characters long, more than any prompt that fits" in out[STATUS], out[STATUS]
    started = time.perf_counter()
    result = client(app_server).predict(held_out_prompt(2), *GREEDY, api_name="/race")[-1]
    assert result["greedy_matches_ar"] == {"dart": True, "eagle3": True}
    assert time.perf_counter() - started < 30  # served at once: nothing left running ahead of it


def health(server: Server) -> tuple[int, dict[str, Any]]:
    r = httpx.get(server.url + "/healthz", timeout=10)
    return r.status_code, r.json()


def test_a_killed_model_process_is_restarted_and_healthz_reports_it(tmp_path: Any) -> None:
    with running_app(tmp_path, "--max-restarts", "1") as app:
        code, details = health(app)
        assert code == 200 and details["engine"] == "ready" and details["restarts"] == 0, details
        first = client(app).submit(held_out_prompt(1), 0.0, 1.0, 0, 900, 20, 21, 6, 4, api_name="/race")
        deadline = time.monotonic() + 60
        while "Racing" not in str((first.outputs() or [[None] * 3])[-1][STATUS]):
            assert time.monotonic() < deadline and not first.done(), "the race never started streaming"
            time.sleep(0.05)
        os.kill(details["pid"], signal.SIGKILL)  # the model process, mid-race
        code, down = health(app)  # at once, no sleep: a host's probe reads the status code
        killed = first.result(timeout=60)
        # "down" (dying or dead) until the reader thread has noticed, "restarting" after
        assert code == 503 and down["engine"] in ("down", "restarting") and "kill" in down["last_exit"], down
        assert "a new one is starting" in json.dumps(killed[-1]), killed[STATUS]
        code, loading = health(app)  # the new process loads after a back-off: no race can run yet
        assert code == 503 and loading["engine"] == "restarting", loading
        result = client(app).predict(held_out_prompt(2), *GREEDY, api_name="/race")[-1]  # waits for the new one
        assert result["greedy_matches_ar"] == {"dart": True, "eagle3": True}
        code, details = health(app)
        assert code == 200 and details["engine"] == "ready" and details["restarts"] == 1, details
        os.kill(details["pid"], signal.SIGKILL)  # a second death within 10 minutes: over --max-restarts 1
        code, down = health(app)
        assert code == 503 and down["engine"] in ("down", "failed"), down  # never 200 again
        deadline = time.monotonic() + 30
        while health(app)[1]["engine"] != "failed":
            assert time.monotonic() < deadline, "healthz never reported that the app gave up"
            time.sleep(0.2)
        code, details = health(app)
        assert code == 503 and details["engine"] == "failed" and "restart the app" in details["error"], details
        refused = client(app).predict(held_out_prompt(3), *GREEDY, api_name="/race")
        assert "restart the app" in json.dumps(refused[-1])
        log = app.log()
    assert "is back (restart 1" in log, log[-3000:]
