"""How far a race runs past ``--race-time-limit``, and how long a Stop takes, with a long prompt (issue 24).

Starts ``python -m dart_arena`` on a bundle with the limit, sends a prompt of about ``--tokens`` tokens through the API
(``/race``, every loaded racer, greedy), and times each race from the request to its last update: the overshoot
is that time minus the limit (it includes the server's own work: tokenizing, the page's last update). Then the
same prompt, cancelled ``--stop-after`` seconds in (as Stop or a closed tab does): when the race ended.

    .venv/bin/python scripts/time_limit_overshoot.py --bundle assets/smollm2 --tokens 6000 --limit 3
    .venv/bin/python scripts/time_limit_overshoot.py --bundle assets/tiny --tokens 1000 --limit 3
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from dart_core.bench.drive import app_process, free_port

REPO = Path(__file__).resolve().parent.parent


def long_prompt(bundle: Path, tokens: int) -> tuple[str, int]:
    """The bundle's held-out prompts joined until they make ``tokens`` tokens (as the target's tokenizer counts)."""
    from transformers import AutoTokenizer

    from dart_core.arena import resolve_model_ref
    from dart_core.bundle import open_bundle

    b = open_bundle(bundle)
    tok = AutoTokenizer.from_pretrained(resolve_model_ref(b.target))
    texts = [json.loads(line)["prompt"] for line in b.prompts.read_text(encoding="utf-8").splitlines() if line]
    ids: list[int] = []
    i = 0
    while len(ids) < tokens:
        ids += tok(texts[i % len(texts)] + "\n\n", add_special_tokens=False)["input_ids"]
        i += 1
    text = tok.decode(ids[:tokens])
    return text, len(tok(text, add_special_tokens=False)["input_ids"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bundle", type=Path, default=REPO / "assets" / "smollm2")
    p.add_argument("--tokens", type=int, default=6000)
    p.add_argument("--limit", type=float, default=3.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--stop-after", type=float, default=2.0)
    args = p.parse_args()
    import gradio_client

    prompt, n = long_prompt(args.bundle, args.tokens)
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="overshoot-", suffix=".log")[1])
    cmd = [sys.executable, "-m", "dart_arena", "--bundle", str(args.bundle), "--server-port", str(port),
           "--race-time-limit", str(args.limit), "--max-new-tokens", "256"]
    with app_process(cmd, port, log, ready="/healthz") as (url, _):
        def client() -> gradio_client.Client:  # a new session each time: a chat bundle's turns add up otherwise
            return gradio_client.Client(url, verbose=False, download_files=False)

        print(f"{args.bundle.name}: prompt of {n:,} tokens, --race-time-limit {args.limit:g} s")
        worst = 0.0
        for run in range(1, args.runs + 1):
            session = client()
            started = time.perf_counter()
            out = session.predict(prompt, api_name="/race")
            wall = time.perf_counter() - started
            result = out[-1] if isinstance(out[-1], dict) else {}
            if not result:
                print(f"  race {run}: no race ({out[1]})", file=sys.stderr)
                return 1
            worst = max(worst, wall - args.limit)
            steps = {m: f.get("verify_steps") for m, f in result.get("methods", {}).items()}
            print(f"  race {run}: {wall:.2f} s end to end, overshoot {wall - args.limit:+.2f} s "
                  f"(limit hit: {result.get('limit') == 'time'}; verify steps {steps})")
        print(f"  worst overshoot: {worst:.2f} s")
        job = client().submit(prompt, api_name="/race")  # no Stop button through the API: a cancelled request
        time.sleep(args.stop_after)
        job.cancel()  # what the Stop button's cancels= and a closed tab do
        t0 = time.monotonic()
        while "race cancelled after" not in log.read_text(errors="replace"):
            if time.monotonic() - t0 > 300:
                print("  the cancelled race never ended", file=sys.stderr)
                return 1
            time.sleep(0.05)
        line = [x for x in log.read_text(errors="replace").splitlines() if "race cancelled after" in x][-1]
        wall = float(line.split("race cancelled after ")[1].split(" s")[0])
        print(f"  cancelled {args.stop_after:g} s into a race (during the prefills): the race ended {wall:.1f} s "
              f"after it started, {wall - args.stop_after:.1f} s after the cancel (server log: {line.strip()!r})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
