"""The README's picture of the page in a real race, taken with the browser test's machinery: the app on the default
bundle as a subprocess (``tests/helpers_app.running_app``), Debian's chromium driven by Playwright
(``tests/test_app_browser.py``'s ``chromium_binary``), one held-out chat prompt raced to the end, the page saved
as a palette PNG small enough for git (``docs/images/race.png``).

    .venv/bin/python scripts/screenshot.py [--out docs/images/race.png] [--bundle assets/smollm2] [--tokens 96]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from helpers_app import running_app  # noqa: E402
from test_app_browser import chromium_binary, wait_status  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=REPO / "docs" / "images" / "race.png")
    p.add_argument("--bundle", type=Path, default=REPO / "assets" / "smollm2")
    p.add_argument("--prompt", type=int, default=3, help="which held-out prompt of the bundle (default: %(default)s)")
    p.add_argument("--tokens", type=int, default=96, help="new tokens per racer (default: %(default)s)")
    p.add_argument("--width", type=int, default=1000, help="width of the saved picture (default: %(default)s)")
    args = p.parse_args(argv)
    binary = chromium_binary()
    if binary is None:
        print("error: no chromium binary: apt-get install -y chromium, or set DART_CHROMIUM", file=sys.stderr)
        return 2
    from PIL import Image
    from playwright import sync_api

    lines = (args.bundle / "prompts.jsonl").read_text(encoding="utf-8").splitlines()
    prompt = json.loads(lines[args.prompt])["prompt"]
    with tempfile.TemporaryDirectory() as tmp, running_app(Path(tmp), "--bundle", str(args.bundle),
                                                           "--max-new-tokens", str(args.tokens)) as server:
        with sync_api.sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=binary, headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"])
            try:
                page = browser.new_page(viewport={"width": 1440, "height": 1000})
                page.goto(server.url)
                page.wait_for_selector("#prompt textarea", timeout=60_000)
                page.fill("#prompt textarea", prompt)
                page.click("#send")
                wait_status(page, "Done")
                page.wait_for_timeout(1500)  # the last plot update drawn
                raw = Path(tmp) / "page.png"
                page.screenshot(path=str(raw), full_page=True)
            finally:
                browser.close()
        image = Image.open(raw).convert("RGB")
        height = round(image.height * args.width / image.width)
        small = image.resize((args.width, height), Image.LANCZOS).quantize(colors=96, method=Image.MEDIANCUT,
                                                                         dither=Image.Dither.NONE)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        small.save(args.out, optimize=True)
    print(f"wrote {args.out} ({args.out.stat().st_size // 1024} KB, {args.width}x{height})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
