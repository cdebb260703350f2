"""The built book, seen by a browser: every page renders its figures and math, links resolve,
and nothing is fetched from the network.

Builds the book with ``book/build.py`` (the lessons execute once, cached for
``test_lessons.py``), then opens each page in headless Chromium (Debian's ``chromium``) over the
DevTools protocol and asks the page itself: are the images decoded (``naturalWidth > 0``), has
MathJax replaced every formula, which links and resources does it use.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

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


def _load_build():
    spec = importlib.util.spec_from_file_location("book_build", ROOT / "book" / "build.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load_build()


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
    cutOff: [...document.querySelectorAll('article pre')]
      .filter((pre) => pre.scrollWidth > pre.clientWidth + 1)
      .map((pre) => pre.innerText.split('\\n')
        .reduce((a, b) => (b.length > a.length ? b : a), '').slice(0, 100)),
    resources: performance.getEntriesByType('resource').map((e) => e.name),
  };
})()
"""


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def book_html(ranks_lock) -> Path:
    from conftest import RING_LESSONS

    with ranks_lock():  # the lessons that start ranks first, in the ranks tests' turn
        for stem in RING_LESSONS:
            build.execute_lesson(ROOT / "lessons" / f"{stem}.py")
    index = build.build(jobs=2)  # the rest (those found in the cache)
    return index.parent


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


# Places where a lesson's prose states a number that one of its cells computes: (lesson, the
# words in the prose, what the output prints). The prose is hand-written, so a change in the
# library that moves the number must fail here, not leave the text contradicting the output.
CLAIMS = [
    ("01_memory_wall", "about 140K tokens for a single head", "141,421"),
    ("01_memory_wall", "one head is\n# 4.4 TB", "one head, fp32, N = 2**20:     4.4 TB"),
    ("05_overlap", "24,960 tokens (24.4K", "24,960"),
    ("05_overlap", "$c^* = F/B = 1040$ tokens", "F/B = 1,040 tokens"),
    ("06_causal_catch", "four tokens per host", "contiguous: [[0, 1, 2, 3], [4, 5, 6, 7]"),
    ("06_causal_catch", "busiest host does 1.7 times", "busiest/mean 1.71"),
    ("06_causal_catch", "balanced (1.08)", "busiest/mean 1.08"),
    ("06_causal_catch", "at $P = 8$, 47%", "8       0.467"),
    ("08_backward", "$2/2.5 = 0.8$ of the", "(0.80x)"),
    ("08_backward", "raises it to $1.2\\times$", "(1.20x)"),
    ("09_strategies_decode", "8 for the model below", "8.0 FLOP per byte"),
]


def _lesson_texts(stem: str) -> tuple[str, str]:
    """(markdown cells as the lesson writes them, everything its cells printed)."""
    nb = json.loads((build.EXECUTED / f"{stem}.ipynb").read_text())
    prose = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    printed = []
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out["output_type"] == "stream":
                printed.append("".join(out["text"]))
            elif "text/markdown" in out.get("data", {}):
                printed.append("".join(out["data"]["text/markdown"]))
    source = (ROOT / "lessons" / f"{stem}.py").read_text()
    return source + prose, "\n".join(printed)


@pytest.mark.parametrize(("stem", "prose", "printed"), CLAIMS)
def test_text_states_what_the_cells_compute(book_html: Path, stem, prose, printed) -> None:
    text, output = _lesson_texts(stem)
    assert prose in text, f"{stem}: the prose no longer says {prose!r}"
    assert printed in output, f"{stem}: the text says {prose!r} but the output lacks {printed!r}"


# ---------------------------------------------------------------------------------------------
# The ring explorer: a static page driven by the library's exported schedules
# ---------------------------------------------------------------------------------------------

# Walks every configuration the page offers, every frame of each, and checks what is drawn.
EXPLORER_PROBE = """
(async () => {
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const root = document.querySelector('.ring-explorer');
  const $ = (s) => root.querySelector(s);
  const set = (sel, value) => { $(sel).value = value; $(sel).dispatchEvent(new Event('change')); };
  const problems = [];
  let frames = 0, configs = 0;
  const data = window.RING_DATA;
  for (const p of data.hosts) for (const layout of data.layouts)
  for (const mask of ['causal', 'full']) for (const pass of data.passes) {
    set('#rx-hosts', String(p)); set('#rx-layout', layout); set('#rx-mask', mask);
    set('#rx-pass', pass);
    configs += 1;
    const name = `${p}/${layout}/${mask}/${pass}`;
    for (let s = 0; s < p; s++) {
      if (Number(root.dataset.step) !== s) problems.push(`${name}: step ${root.dataset.step}`);
      const held = root.querySelectorAll('#rx-ring .rx-held').length;
      const cells = root.querySelectorAll('#rx-grid .rx-cell').length;
      const done = root.querySelectorAll('#rx-grid .rx-done').length;
      const now = root.querySelectorAll('#rx-grid .rx-now').length;
      const lines = root.querySelectorAll('#rx-errors .rx-line').length;
      const msgs = root.querySelectorAll('#rx-ring .rx-msg').length;
      const sends = data.entries[name].sends[s] !== '';
      if (held !== p || cells !== p * p || now !== p || lines !== p || done !== p * (s + 1)
          || msgs !== (sends ? p : 0) || !$('.rx-status').textContent.startsWith(`step ${s}`))
        problems.push(`${name} step ${s}: held ${held} cells ${cells} done ${done} now ${now}`
                      + ` lines ${lines} msgs ${msgs}`);
      frames += 1;
      if (s < p - 1) $('#rx-step').click();
    }
    if (!$('#rx-step').disabled) problems.push(`${name}: step still enabled at the end`);
  }
  set('#rx-hosts', '4');
  $('#rx-play').click();
  // until the ring has advanced (its play timer moves data-step); the limit only bounds a failure
  await Promise.race([sleep(120000), new Promise((r) => {
    const seen = new MutationObserver(() => {
      if (Number(root.dataset.step) >= 1) { seen.disconnect(); r(); }
    });
    seen.observe(root, {attributes: true, attributeFilter: ['data-step']});
  })]);
  const played = Number(root.dataset.step);
  $('#rx-play').click();
  $('#rx-reset').click();
  return {configs, frames, problems: problems.slice(0, 10), played,
          reset: Number(root.dataset.step)};
})()
"""


@pytest.fixture(scope="module")
def explorer(book_html: Path) -> dict:
    browser = Browser()
    try:
        return browser.inspect((book_html / "explorer.html").as_uri(), EXPLORER_PROBE)
    finally:
        browser.close()


def test_explorer_draws_every_frame_of_every_ring(explorer: dict) -> None:
    probe = explorer["probe"]
    assert probe["configs"] == 15 * 3 * 2 * 2  # P = 2..16, layouts, causal/full, passes
    assert probe["frames"] == 12 * sum(range(2, 17))
    assert not probe["problems"], probe["problems"]


def test_explorer_plays_and_resets(explorer: dict) -> None:
    assert explorer["probe"]["played"] >= 1, "play did not advance the ring"
    assert explorer["probe"]["reset"] == 0


def test_explorer_is_offline_and_error_free(explorer: dict) -> None:
    remote = [r for r in explorer["resources"] if urlsplit(r).scheme in ("http", "https")]
    assert not remote, remote
    assert not explorer["failed"], explorer["failed"]
    assert not explorer["errors"], explorer["errors"]


def test_explorer_data_comes_from_the_library(book_html: Path) -> None:
    """The page's data are the library's schedules, not a copy that can drift."""
    import ringsim
    from ringsim.views.explorer import key

    script = (book_html / "_static" / "explorer-data.js").read_text()
    data = json.loads(script[script.index("{") : script.rindex("}") + 1])
    for hosts, layout, causal, pass_ in [
        (5, "striped", True, "forward"),
        (8, "zigzag", False, "backward"),
    ]:
        sched = ringsim.build_schedule(hosts, layout, causal, pass_)
        entry = data["entries"][key(hosts, layout, causal, pass_)]
        assert entry["kinds"] == ["".join(map(str, sched.kind_at(s))) for s in range(hosts)]
        assert entry["sends"] == [",".join(sched.payload(s)) for s in range(hosts)]
        assert max(entry["errors"][-1]) < -100, "every host exact after the last step"
