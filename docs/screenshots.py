"""Open pages of the built site in headless Chromium, save screenshots, and fail if a page shows an error.

``python docs/screenshots.py [--html build/docs/html] [--out build/docs]`` (``nox -s screenshots`` runs
it after the build; ``--check`` only looks for Chromium, which that session does before building). The
site is served over HTTP on 127.0.0.1 from this process; Chromium is Debian's ``chromium`` package
(``apt-get install -y chromium``). A page fails when Chromium cannot load it or
one of its resources, when its script reports an error, when it lacks its expected heading, or when
it shows a Python traceback, a Sphinx error message or a failed tutorial.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: (page, heading it must show, screenshot file)
PAGES = [
    ("index.html", "VTA in Python", "home.png"),
    ("tutorials_run/optimize/convolution_opt.html", "Optimized convolution", "tutorial_convolution.png"),
    ("tutorials_run/optimize/tune_conv2d.html", "Tuning a convolution", "tutorial_tuning.png"),
]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--enable-logging=stderr", "--v=0"]
#: text a page must not contain, and why
ERROR_MARKERS = {
    "Traceback (most recent call last)": "a Python traceback",
    'class="system-message"': "a Sphinx/docutils error message",
    "sphx-glr-script-out-err": "a tutorial's error output",
    "404 Not Found": "a missing page",
}
CONSOLE_ERRORS = re.compile(r"Uncaught|ERR_FILE_NOT_FOUND|Failed to load resource|ERR_CONNECTION", re.I)
TIMEOUT_S = 120


def find_chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("docs: the screenshots need Chromium, which was not found on PATH (chromium, chromium-browser "
                     "or google-chrome); install Debian's package: apt-get install -y chromium (the site itself "
                     "builds without it: nox -s docs)")


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def serve(root: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


def _chromium(browser: str, args: list[str]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="vta-docs-chromium-") as profile:
        return subprocess.run([browser, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True,
                              timeout=TIMEOUT_S)


def check_page(browser: str, url: str, heading: str, shot: Path) -> list[str]:
    """Screenshot ``url`` into ``shot``; returns the problems found (empty: the page is fine)."""
    problems = []
    dom = _chromium(browser, ["--virtual-time-budget=5000", "--dump-dom", url])
    if dom.returncode:
        problems.append(f"chromium exited {dom.returncode}: {dom.stderr.strip()[-500:]}")
    html = dom.stdout
    if f">{heading}" not in html:
        problems.append(f"the heading {heading!r} is not on the page")
    for marker, what in ERROR_MARKERS.items():
        if marker in html:
            problems.append(f"the page shows {what} ({marker!r})")
    for line in dom.stderr.splitlines():
        if "CONSOLE" in line and CONSOLE_ERRORS.search(line) or "net::ERR" in line:
            problems.append(f"browser console: {line.strip()}")
    png = _chromium(browser, ["--window-size=1280,1600", "--virtual-time-budget=5000", f"--screenshot={shot}", url])
    if png.returncode or not shot.exists() or shot.stat().st_size < 10_000:
        problems.append(f"no usable screenshot {shot} (exit {png.returncode})")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python docs/screenshots.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--html", type=Path, default=REPO / "build" / "docs" / "html")
    p.add_argument("--out", type=Path, default=REPO / "build" / "docs")
    p.add_argument("--check", action="store_true", help="only check that Chromium is installed")
    args = p.parse_args(argv)
    browser = find_chromium()
    if args.check:
        print(f"docs: Chromium found: {browser}")
        return 0
    if not (args.html / "index.html").is_file():
        raise SystemExit(f"docs: no built site in {args.html}: build it first (python docs/build.py)")
    server, base = serve(args.html)
    failed = False
    try:
        for page, heading, name in PAGES:
            shot = args.out / name
            shot.unlink(missing_ok=True)
            problems = check_page(browser, base + page, heading, shot)
            status = "ok" if not problems else "FAILED"
            print(f"docs: {page}: {status}; screenshot {shot}")
            for problem in problems:
                print(f"  {problem}")
            failed |= bool(problems)
    finally:
        server.shutdown()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
