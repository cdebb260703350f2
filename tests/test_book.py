"""The built book, seen by a browser: every page renders its figures and math, links resolve,
and nothing is fetched from the network.

Builds the book with ``book/build.py`` (the lessons execute once, cached for
``test_lessons.py``), then opens each page in headless Chromium (Debian's ``chromium``) over the
DevTools protocol and asks the page itself: are the images decoded (``naturalWidth > 0``), has
MathJax replaced every formula, which links and resources does it use.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from conftest import book_build

pytestmark = pytest.mark.slow  # builds the book (the lessons execute once, cached)
ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    # the book must read offline: any name lookup fails at once instead of hanging a page
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
    "--window-size=1280,1600",
    # a page's timers run at full rate however long the walk takes: Chromium otherwise slows
    # background pages' timers, down to one wake-up a minute after five minutes
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
    "--disable-features=IntensiveWakeUpThrottling",
    "about:blank",
]
# Limits that only bound a failure: every wait below ends on an event (the page's load event,
# each image's load or error, MathJax's promise, a DevTools port file), so a busy machine only
# makes the pages slower, never a test wrong; these hold on one many times slower than this one.
PAGE_TIMEOUT_S = 300
START_TIMEOUT_S = 120


build = book_build()


# ---------------------------------------------------------------------------------------------
# A minimal DevTools-protocol client (websocket-client), one tab per page
# ---------------------------------------------------------------------------------------------


class Browser:
    def __init__(self) -> None:
        import websocket

        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if exe is None:
            pytest.fail(
                "headless Chromium is needed: apt-get install -y chromium chromium-driver",
                pytrace=False,
            )
        self.profile = tempfile.mkdtemp(prefix="ringsim-chromium-")
        self.proc = subprocess.Popen(
            [exe, f"--user-data-dir={self.profile}", *CHROMIUM_FLAGS],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port_file = Path(self.profile) / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT_S
        while not port_file.exists() or len(port_file.read_text().split()) < 2:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                pytest.fail("Chromium did not start its DevTools endpoint", pytrace=False)
            time.sleep(0.1)
        port, path = port_file.read_text().split()[:2]
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}{path}", timeout=PAGE_TIMEOUT_S
        )
        self.next_id = 0
        self.events: list[dict] = []  # protocol events seen while waiting for replies

    def send(self, method: str, session: str | None = None, **params) -> dict:
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        self.ws.send(json.dumps(msg))
        while True:
            reply = json.loads(self.ws.recv())
            if "method" in reply:
                self.events.append(reply)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def inspect(self, url: str, probe: str | None = None) -> dict:
        """Open ``url`` in a fresh tab, let it settle, return what ``PAGE_PROBE`` reports, plus
        ``failed``: every load that failed (a missing file, a blocked host) and ``errors``:
        uncaught script exceptions. ``probe`` (an async expression) then runs and its value
        is returned under ``probe``."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.events = []
        try:
            self.send("Network.enable", session)
            self.send("Runtime.enable", session)
            self.send("Page.navigate", session, url=url)
            report = self._evaluate(session, PAGE_PROBE, url)
            if probe is not None:
                report["probe"] = self._evaluate(session, probe, url)
            requests = {
                e["params"]["requestId"]: e["params"]["request"]["url"]
                for e in self.events
                if e.get("method") == "Network.requestWillBeSent"
            }
            report["failed"] = [
                f"{requests.get(e['params']['requestId'], '?')} ({e['params']['errorText']})"
                for e in self.events
                if e.get("method") == "Network.loadingFailed" and e.get("sessionId") == session
            ]
            report["errors"] = [
                e["params"]["exceptionDetails"].get("text", "")
                + str(e["params"]["exceptionDetails"].get("exception", {}).get("description", ""))
                for e in self.events
                if e.get("method") == "Runtime.exceptionThrown" and e.get("sessionId") == session
            ]
            return report
        finally:
            self.send("Target.closeTarget", targetId=target)

    def measure(self, url: str, probe: str, *, width: int, height: int = 900) -> dict:
        """Open ``url`` in a fresh tab of ``width`` x ``height`` CSS pixels (a phone when
        narrower than 600), run ``probe`` (an async expression) and return its value."""
        target = self.send("Target.createTarget", url="about:blank")["targetId"]
        session = self.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        try:
            self.send(
                "Emulation.setDeviceMetricsOverride",
                session,
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=width < 600,
            )
            self.send("Page.navigate", session, url=url)
            return self._evaluate(session, probe, url)
        finally:
            self.send("Target.closeTarget", targetId=target)

    def _evaluate(self, session: str, expression: str, url: str):
        result = self.send(
            "Runtime.evaluate",
            session,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=PAGE_TIMEOUT_S * 1000,
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"probe failed on {url}: {result['exceptionDetails']}")
        return result["result"]["value"]

    def close(self) -> None:
        if getattr(self, "ws", None) is not None:
            self.ws.close()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


# Runs inside the page: waits for the load event, MathJax and every image, then reports.
PAGE_PROBE = """
(async () => {
  if (document.readyState !== 'complete')
    await new Promise((r) => window.addEventListener('load', r, {once: true}));
  await document.fonts.ready;  // widths are measured in the fonts the page shows
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  for (const im of document.images) im.loading = 'eager';  // none waits to be scrolled to
  await Promise.all([...document.images].filter((im) => !im.complete).map((im) =>
    new Promise((r) => { im.addEventListener('load', r); im.addEventListener('error', r); })));
  const formulas = [...document.querySelectorAll('span.math, div.math')];
  const prose = [...document.querySelectorAll('article p, article li, article td')]
    .filter((el) => !el.closest('pre, code, .cell_output'))
    .map((el) => el.innerText);
  return {
    ready: document.readyState,
    mathjax: Boolean(window.MathJax && MathJax.startup),
    images: [...document.images].map((im) => ({src: im.currentSrc || im.src,
                                             width: im.naturalWidth})),
    formulas: formulas.length,
    unrendered: formulas.filter((el) => !el.querySelector('mjx-container'))
                        .map((el) => el.textContent.slice(0, 80)),
    rawTex: prose.filter((t) => /\\\\\\(|\\\\\\[|\\$\\$|\\$[^$\\s][^$]*\\$/.test(t))
                 .map((t) => t.slice(0, 80)),
    links: [...document.querySelectorAll('a[href]')].map((a) => a.getAttribute('href')),
    // code and printed output wider than their column (cut off at the right edge)
    // the pre, or the box it scrolls in (div.highlight), when it is wider than it shows
    cutOff: [...document.querySelectorAll('article pre')]
      .filter((pre) => [pre, pre.closest('div.highlight, div.cell_output')].some(
        (box) => box && box.scrollWidth > box.clientWidth))
      .map((pre) => pre.innerText.split('\\n')
        .reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 100)),
    resources: performance.getEntriesByType('resource').map((e) => e.name),
  };
})()
"""


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pages(book_html: Path) -> dict[str, dict]:
    browser = Browser()
    try:
        return {
            path.name: browser.inspect(path.as_uri())
            for path in sorted(book_html.glob("*.html"))
            if path.name not in ("genindex.html", "search.html")
        }
    finally:
        browser.close()


def _lesson_pages() -> list[str]:
    return [f"{p.stem}.html" for p in build.lessons()]


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def test_every_lesson_has_a_page(book_html: Path) -> None:
    missing = [name for name in ["index.html", *_lesson_pages()] if not (book_html / name).exists()]
    assert not missing, f"pages not built: {missing}"


@pytest.mark.parametrize("name", _lesson_pages())
def test_lesson_page_renders_figures(pages: dict, name: str) -> None:
    page = pages[name]
    assert page["ready"] == "complete"
    assert page["images"], f"{name} shows no figure"
    broken = [im["src"][-60:] for im in page["images"] if im["width"] <= 0]
    assert not broken, f"{name}: images that did not decode: {broken}"


@pytest.mark.parametrize("name", _lesson_pages())
def test_lesson_page_renders_math(pages: dict, name: str) -> None:
    page = pages[name]
    if page["formulas"]:
        assert page["mathjax"], f"{name}: has formulas but MathJax did not load"
    assert not page["unrendered"], f"{name}: formulas MathJax left as TeX: {page['unrendered']}"
    assert not page["rawTex"], f"{name}: TeX delimiters left in the text: {page['rawTex']}"


def test_math_sources_lose_no_character(book_html: Path) -> None:
    """The TeX MathJax typesets contains no unescaped % (TeX's comment, which deletes the rest
    of the formula: lesson 2 once printed "87" for "87%") and no 16,384 (set as "16, 384")."""
    bad = {}
    for page in sorted(book_html.glob("*.html")):
        text = page.read_text(encoding="utf-8")
        formulas = re.findall(r'<(?:span|div) class="math[^"]*">(.*?)</(?:span|div)>', text, re.S)
        wrong = [
            f[:80]
            for f in formulas
            if re.search(r"(?<!\\)%", f) or re.search(r"\d,\s?\d{3}(?!\d)", f)
        ]
        if wrong:
            bad[page.name] = wrong
    assert not bad, f"formulas that lose characters: {bad}"


def test_math_is_typeset_somewhere(pages: dict) -> None:
    typeset = [name for name, page in pages.items() if page["formulas"] and page["mathjax"]]
    assert len(typeset) >= 5, f"MathJax typeset formulas on only {typeset}"


def test_pages_load_nothing_from_the_network(pages: dict) -> None:
    remote = {
        name: [r for r in page["resources"] if urlsplit(r).scheme in ("http", "https")]
        for name, page in pages.items()
    }
    remote = {name: r for name, r in remote.items() if r}
    assert not remote, f"pages fetch remote resources (vendor them): {remote}"


def test_pages_reference_no_remote_scripts_or_styles(book_html: Path) -> None:
    pattern = re.compile(r"<(?:script|link|img)\b[^>]*\b(?:src|href)=\"(https?://[^\"]+)\"")
    remote = {
        page.name: pattern.findall(page.read_text(encoding="utf-8"))
        for page in book_html.glob("*.html")
    }
    remote = {name: urls for name, urls in remote.items() if urls}
    assert not remote, f"pages reference remote scripts/styles: {remote}"


def _ids(page: Path) -> set[str]:
    return set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))


def test_internal_links_resolve(book_html: Path, pages: dict) -> None:
    broken = []
    ids: dict[Path, set[str]] = {}
    for name, page in pages.items():
        for href in page["links"]:
            parts = urlsplit(href)
            if parts.scheme in ("http", "https", "mailto") or href.startswith("javascript:"):
                continue
            target = (book_html / name).parent / unquote(parts.path) if parts.path else None
            target = (book_html / name) if target is None else target.resolve()
            if not target.exists():
                broken.append(f"{name} -> {href}")
                continue
            if parts.fragment and target.suffix == ".html":
                known = ids.setdefault(target, _ids(target))
                if unquote(parts.fragment) not in known:
                    broken.append(f"{name} -> {href} (no such anchor)")
    assert not broken, "broken internal links:\n" + "\n".join(broken)


def test_index_links_every_lesson(pages: dict) -> None:
    linked = {urlsplit(h).path for h in pages["index.html"]["links"]}
    missing = [name for name in _lesson_pages() if name not in linked]
    assert not missing, f"index.html does not link {missing}"


def test_nothing_fails_to_load(pages: dict) -> None:
    failed = {name: page["failed"] for name, page in pages.items() if page["failed"]}
    assert not failed, f"resources that failed to load (missing from the build?): {failed}"


def test_no_script_errors(pages: dict) -> None:
    errors = {name: page["errors"] for name, page in pages.items() if page["errors"]}
    assert not errors, f"uncaught script errors: {errors}"


@pytest.mark.parametrize("name", _lesson_pages())
def test_no_code_or_output_is_cut_off(pages: dict, name: str) -> None:
    """Every code cell and printed output fits the text column (window 1280 px wide)."""
    cut = pages[name]["cutOff"]
    assert not cut, f"{name}: lines wider than the code column: {cut}"


def test_download_button_offers_the_notebook(book_html: Path) -> None:
    for name in _lesson_pages():
        html = (book_html / name).read_text(encoding="utf-8")
        for href in re.findall(r'href="([^"]*_sources/[^"]+)"', html):
            target = (book_html / unquote(href)).resolve()
            assert target.is_file() and target.stat().st_size > 0, f"{name}: {href} is empty"


# ---------------------------------------------------------------------------------------------
# Readable at the book's width and on a phone
# ---------------------------------------------------------------------------------------------

# The numbers a lesson states are checked against its output in tests/test_lesson_numbers.py.

MIN_TEXT_PX = 9  # the smallest figure text a reader should have to read, as shown at 1280 px
MAX_CAPTION_LINES = 6
PHONE_PX = 414  # an iPhone Plus/Max-class viewport

# Runs in a page: every figure's shown width and natural width, the report its PNG carries
# (read by the test from the file) or its <img> carries (the animation player), the caption
# paragraphs' line counts and the article's width.
LAYOUT_PROBE = """
(async () => {
  if (document.readyState !== 'complete')
    await new Promise((r) => window.addEventListener('load', r, {once: true}));
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) await MathJax.startup.promise;
  for (const im of document.images) im.loading = 'eager';  // none waits to be scrolled to
  await Promise.all([...document.images].filter((im) => !im.complete).map((im) =>
    new Promise((r) => { im.addEventListener('load', r); im.addEventListener('error', r); })));
  const article = document.querySelector('article.bd-article') || document.querySelector('article');
  const figures = [...article.querySelectorAll('img')].map((im) => ({
    src: im.currentSrc || im.src, natural: im.naturalWidth,
    shown: im.getBoundingClientRect().width, report: im.dataset.ringsim || null,
    linked: Boolean(im.closest('a.rs-figure-link'))}));
  const cells = [...article.querySelectorAll('.rs-table td, .rs-table th')];
  const table_px = Math.min(99, ...cells.map((c) => parseFloat(getComputedStyle(c).fontSize)));
  const captions = [...article.querySelectorAll('p')]
    .filter((p) => /^(Figures?|Animation) [0-9]+\\.[0-9]+/.test(p.innerText))
    .map((p) => ({text: p.innerText.slice(0, 60),
                  lines: Math.round(p.getBoundingClientRect().height
                                    / parseFloat(getComputedStyle(p).lineHeight))}));
  return {viewport: window.innerWidth, article: article.getBoundingClientRect().width,
          figures, captions, table_px,
          overflow: document.documentElement.scrollWidth - window.innerWidth};
})()
"""


@pytest.fixture(scope="module")
def layouts(book_html: Path) -> dict[str, dict[int, dict]]:
    """Each lesson page measured at 1280 px and on a phone."""
    browser = Browser()
    try:
        return {
            name: {
                width: browser.measure((book_html / name).as_uri(), LAYOUT_PROBE, width=width)
                for width in (1280, PHONE_PX)
            }
            for name in _lesson_pages()
        }
    finally:
        browser.close()


def _figure_report(figure: dict) -> dict | None:
    """The report ``ringsim.teach.figure_report`` wrote into the figure's SVG (its
    ``<dc:description>``) or PNG (a text chunk), or onto the animation player's <img>:
    smallest text in pixels of the image at its natural size, legends over data."""
    if figure["report"]:
        return json.loads(figure["report"])
    parts = urlsplit(figure["src"])
    if parts.scheme != "file":
        return None
    path = Path(unquote(parts.path))
    if path.suffix == ".svg":
        import html

        found = re.search(r"<dc:description>(.*?)</dc:description>", path.read_text(), re.S)
        return json.loads(html.unescape(found.group(1))) if found else None
    from PIL import Image

    with Image.open(path) as image:
        text = image.info.get("ringsim")
    return json.loads(text) if text else None


def _small_text(figures: list[dict]) -> tuple[list[str], list[str]]:
    """(figures whose text shows under ``MIN_TEXT_PX``, figures without a report)."""
    small, unchecked = [], []
    for figure in figures:
        report = _figure_report(figure)
        if report is None:
            unchecked.append(figure["src"][-50:])
            continue
        shown_px = report["min_text_px"] * figure["shown"] / figure["natural"]
        if shown_px < MIN_TEXT_PX:
            small.append(
                f"{figure['src'][-40:]}: {report['min_text_px']:.1f} px text in a "
                f"{figure['natural']} px figure shown {figure['shown']:.0f} px wide "
                f"= {shown_px:.1f} px"
            )
    return small, unchecked


@pytest.mark.parametrize("name", _lesson_pages())
@pytest.mark.parametrize("width", [1280, PHONE_PX])
def test_figure_text_is_readable(layouts: dict, name: str, width: int) -> None:
    """No figure text under 9 px as a 1280-px window or a 414-px phone shows it: the figure's
    smallest font (in pixels of the image at its natural size) times the shown/natural width
    ratio. On a phone a figure keeps its own size in a box that scrolls sideways."""
    small, unchecked = _small_text(layouts[name][width]["figures"])
    assert not unchecked, f"{name}: figures without a text report (use_lesson_style): {unchecked}"
    assert not small, f"{name} at {width} px: figure text under {MIN_TEXT_PX} px:\n" + "\n".join(
        small
    )


@pytest.mark.parametrize("name", _lesson_pages())
def test_figures_are_svg_and_open_alone(layouts: dict, name: str) -> None:
    """Every figure of a cell is an SVG (sharp at any zoom), wrapped in a link to itself."""
    figures = [f for f in layouts[name][1280]["figures"] if not f["report"]]
    assert figures, f"{name}: no figure"
    not_svg = [f["src"][-50:] for f in figures if not f["src"].endswith(".svg")]
    unlinked = [f["src"][-50:] for f in figures if not f["linked"]]
    assert not not_svg, f"{name}: figures that are not SVG: {not_svg}"
    assert not unlinked, f"{name}: figures that do not open alone: {unlinked}"


@pytest.mark.parametrize("name", _lesson_pages())
def test_a_phone_page_never_scrolls_sideways(layouts: dict, name: str) -> None:
    """On a 414-px phone wide outputs (figures, tables, code) scroll inside their own box;
    the page itself is never wider than the screen, and a printed table's text is 9 px or
    more."""
    phone = layouts[name][PHONE_PX]
    assert phone["overflow"] <= 0, f"{name}: the page is {phone['overflow']} px too wide"
    assert phone["table_px"] >= MIN_TEXT_PX, f"{name}: table text {phone['table_px']} px"


@pytest.mark.parametrize("name", _lesson_pages())
def test_no_legend_covers_data(layouts: dict, name: str) -> None:
    covering = [
        (figure["src"][-40:], report["legends_over_data"])
        for figure in layouts[name][1280]["figures"]
        if (report := _figure_report(figure)) and report["legends_over_data"]
    ]
    assert not covering, f"{name}: legends drawn over data (first label): {covering}"


@pytest.mark.parametrize("name", _lesson_pages())
def test_captions_are_short(layouts: dict, name: str) -> None:
    long = [c for c in layouts[name][1280]["captions"] if c["lines"] > MAX_CAPTION_LINES]
    assert layouts[name][1280]["captions"], f"{name}: no figure caption found"
    assert not long, f"{name}: captions over {MAX_CAPTION_LINES} lines at 1280 px: {long}"


@pytest.mark.parametrize("name", _lesson_pages())
def test_article_fills_a_phone(layouts: dict, name: str) -> None:
    phone = layouts[name][PHONE_PX]
    assert phone["viewport"] == PHONE_PX
    assert phone["article"] >= 0.9 * PHONE_PX, (
        f"{name}: the article is {phone['article']:.0f} px wide on a {PHONE_PX}-px phone"
    )
