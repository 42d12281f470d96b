"""Open the built documentation site in headless Chromium, as a reader would, and save screenshots.

    make docs && python bench/docs_site.py                 # site/ -> bench/results/docs_site/*.png
    python bench/docs_site.py --build                      # build site/ first (mkdocs build --strict)

Serves ``site/`` on a local port and opens three pages, the home page, one guide page and one API page. For
each it checks the page as the browser rendered it (the DOM after the scripts ran): the title, the
navigation with the sections of ``mkdocs.yml`` and, on the API page, the rendered objects; then saves a
screenshot for a person to look at. Prints one line per page and exits 1 when a check failed, 2 when no
Chromium is installed (Debian: ``apt-get install chromium``).
"""
from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BROWSERS = ("chromium", "chromium-browser", "google-chrome")
# No network, no background services: the check depends on nothing but the site.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars")
NAV = ("Getting started", "The S3DIS pipeline", "Your own scans", "Configuration", "API reference")
# name, page, what its rendered DOM must hold beyond the navigation
PAGES = (
    ("home", "index.html", ("<h1", "pointgeope", "screenshot_office.png")),
    ("guide", "s3dis/evaluation.html", ("Evaluation protocol", "Fragments and votes", "eval.class_mean")),
    ("api", "api/geope.html", ('id="pointgeope.geope.GeoPE"', 'id="pointgeope.geope.rotation_matrix"', "Parameters")),
)


def find_browser() -> str | None:
    return next((path for path in map(shutil.which, BROWSERS) if path), None)


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """The site on a free local port, from a daemon thread; returns the server and its base URL."""
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 (the base class's name)
        pass


def chromium(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=120, check=False)


def missing_from(dom: str, expected: tuple[str, ...]) -> list[str]:
    """What of the navigation and of ``expected`` the rendered page lacks."""
    wanted = ('class="md-nav', *NAV, *expected)
    return [text for text in wanted if text not in dom]


def check_page(browser: str, base: str, page: str, expected: tuple[str, ...], png: Path) -> list[str]:
    """Render ``page``: the problems found in its DOM (empty when none), and its screenshot in ``png``."""
    with tempfile.TemporaryDirectory(prefix="chromium-") as profile:  # a fresh profile for each run
        dom = chromium(browser, Path(profile), "--virtual-time-budget=3000", "--dump-dom", base + page)
        if dom.returncode != 0 or "<html" not in dom.stdout:
            return [f"chromium --dump-dom failed (exit {dom.returncode}): {dom.stderr.strip()[-300:]}"]
        problems = [f"missing {text!r}" for text in missing_from(dom.stdout, expected)]
        shot = chromium(browser, Path(profile), "--window-size=1280,1000", f"--screenshot={png}", base + page)
        if shot.returncode != 0 or not png.is_file():
            problems.append(f"no screenshot (exit {shot.returncode}): {shot.stderr.strip()[-300:]}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=REPO / "site", help="the built site (default: site/)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "docs_site",
                        help="where the screenshots go")
    parser.add_argument("--build", action="store_true", help="mkdocs build --strict into --site first")
    args = parser.parse_args()
    browser = find_browser()
    if browser is None:
        print(f"docs_site: no browser found (tried {', '.join(BROWSERS)}); apt-get install chromium")
        return 2
    if args.build:
        subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(args.site)],
                       cwd=REPO, check=True)
    if not (args.site / "index.html").is_file():
        print(f"docs_site: no site at {args.site}; run make docs (or pass --build)")
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    server, base = serve(args.site)
    failed = 0
    try:
        for name, page, expected in PAGES:
            png = args.out / f"{name}.png"
            problems = check_page(browser, base, page, expected, png)
            failed += bool(problems)
            print(f"{name:<6} {page:<24} {'ok' if not problems else '; '.join(problems)}  -> {png}")
    finally:
        server.shutdown()
    print(f"{len(PAGES) - failed} of {len(PAGES)} pages rendered with their navigation")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
