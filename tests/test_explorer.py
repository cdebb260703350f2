"""The book's ring explorer, a timing lab (``book/explorer.md``, ``book/_static/explorer.js``).

Two halves. The data (``ringsim.views.explorer``) are the library's: schedules, the numerics'
running rows and the event timer's timelines match what the library computes now, and the
file stays small. The page (headless Chromium over the DevTools protocol, the client of
``test_book.py``) draws exactly those data: every control is driven and what it shows is
checked against the library, labels stay inside their pictures at P = 2..16, and the page
reads on a 414-px phone. Waits are on the page's own state (``data-*`` attributes it sets
after each render), never on a wall-clock guess.
"""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest
import test_book  # the DevTools client (Browser) and the book's build module

import ringsim
from ringsim.layouts import layout_names
from ringsim.numerics.ring import RingRecord
from ringsim.numerics.rounding import relative_error
from ringsim.schedule import RING_PASSES
from ringsim.timer.engine.result import kv_messages
from ringsim.views import explorer as ex

build = test_book.build

pytestmark = pytest.mark.slow  # executes the lessons (once: the book build shares the cache)
ROOT = test_book.ROOT
TIMEOUT_S = 120  # generous: a busy 2-core machine; the waits end as soon as the page is ready
MAX_DATA_BYTES = 1.5e6


# ---------------------------------------------------------------------------------------------
# Fixtures: the built book, its explorer data, a browser tab at a given width
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def data_path(book_html: Path) -> Path:
    return book_html / "_static" / "explorer-data.js"


@pytest.fixture(scope="module")
def data(data_path: Path) -> dict:
    return ex.load_explorer_data(data_path)


class Tab:
    """One browser tab on the explorer page, ``width`` CSS pixels wide."""

    def __init__(
        self, browser: test_book.Browser, url: str, width: int, media: list | None = None
    ) -> None:
        self.browser = browser
        self.target = browser.send("Target.createTarget", url="about:blank")["targetId"]
        attached = browser.send("Target.attachToTarget", targetId=self.target, flatten=True)
        self.session = attached["sessionId"]
        browser.events = []
        for domain in ("Network.enable", "Runtime.enable"):
            browser.send(domain, self.session)
        browser.send(
            "Emulation.setDeviceMetricsOverride",
            self.session,
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        if media:  # e.g. prefers-reduced-motion, as the page will first see it
            browser.send("Emulation.setEmulatedMedia", self.session, features=media)
        browser.send("Page.navigate", self.session, url=url)
        self.wait_ready(url)

    def wait_ready(self, url: str) -> None:
        """Poll (the page may still be about:blank, or between documents) until the explorer
        at ``url`` has drawn its first frame."""
        ready = (
            f"location.href === {json.dumps(url)} && "
            "document.querySelector('.ring-explorer')?.dataset.ready === '1'"
        )
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            reply = self.browser.send(
                "Runtime.evaluate", self.session, expression=ready, returnByValue=True
            )
            if reply.get("result", {}).get("value") is True:
                return
            time.sleep(0.1)
        raise AssertionError(f"the explorer did not load within {TIMEOUT_S} s: {url}")

    def run(self, body: str):
        """Evaluate ``body`` (statements of an async function, with ``PRELUDE``'s helpers);
        its ``return`` value comes back as JSON."""
        expression = f"(async () => {{ {PRELUDE}\n{body} }})()"
        result = self.browser.send(
            "Runtime.evaluate",
            self.session,
            expression=expression,
            awaitPromise=True,
            returnByValue=True,
            timeout=TIMEOUT_S * 1000,
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"page probe failed: {result['exceptionDetails']}")
        return result["result"].get("value")

    def events(self, method: str) -> list[dict]:
        return [
            e
            for e in self.browser.events
            if e.get("method") == method and e.get("sessionId") == self.session
        ]

    def close(self) -> None:
        self.browser.send("Target.closeTarget", targetId=self.target)


# Helpers every probe starts with: the explorer's root, setting a control as a user would
# (value + the event the page listens to), waiting on a condition of the page's own state.
PRELUDE = f"""
const root = () => document.querySelector('.ring-explorer');
const $ = (sel) => root().querySelector(sel);
const $$ = (sel) => [...root().querySelectorAll(sel)];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const until = async (cond, what) => {{
  const t0 = performance.now();
  while (!cond()) {{
    if (performance.now() - t0 > {TIMEOUT_S * 1000}) throw new Error('waited for ' + what);
    await sleep(20);
  }}
}};
const frames = () => Number(root().dataset.frames);
const set = (sel, value) => {{
  const node = $(sel);
  node.value = String(value);
  node.dispatchEvent(new Event(node.type === 'range' ? 'input' : 'change', {{bubbles: true}}));
}};
const choose = (p, layout, mask, pass, block, bw) => {{
  set('#rx-hosts', p); set('#rx-layout', layout); set('#rx-mask', mask); set('#rx-pass', pass);
  if (block !== undefined) set('#rx-block', block);
  if (bw !== undefined) set('#rx-bw', bw);
}};
const state = () => ({{...root().dataset}});
const box = (node) => {{ const r = node.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom]; }};
"""


@pytest.fixture(scope="module")
def browser():
    b = test_book.Browser()
    yield b
    b.close()


@pytest.fixture
def tab(browser, book_html: Path):
    t = Tab(browser, (book_html / "explorer.html").as_uri(), 1280)
    yield t
    t.close()


@pytest.fixture
def phone(browser, book_html: Path):
    t = Tab(browser, (book_html / "explorer.html").as_uri(), 414)
    yield t
    t.close()


def _slider_index(values, value) -> int:
    return list(values).index(value)


DEFAULT_BLOCK = 32768
DEFAULT_BANDWIDTH = 12.5e9


def _timeline(hosts, layout, causal, pass_, block=DEFAULT_BLOCK, bandwidth=DEFAULT_BANDWIDTH):
    """The library's run of what the page shows (seconds)."""
    config = ex.lab_config(hosts, layout, causal, pass_, block, bandwidth)
    return ringsim.simulate(config, keep_timeline=True)


# ---------------------------------------------------------------------------------------------
# The data are the library's
# ---------------------------------------------------------------------------------------------


def test_data_file_is_small(data_path: Path) -> None:
    size = data_path.stat().st_size
    assert 1e5 < size < MAX_DATA_BYTES, f"explorer-data.js is {size / 1e6:.2f} MB"


def test_data_covers_every_ring_and_slider_stop(data: dict) -> None:
    lab = data["lab"]
    assert data["hosts"] == list(range(2, 17))
    assert len(data["rings"]) == 15 * len(layout_names()) * 2 * len(RING_PASSES)
    assert set(data["timing"]) == set(data["rings"])
    shape = {(len(g), len(g[0])) for g in data["timing"].values()}
    assert shape == {(len(lab["block_tokens"]), len(lab["bandwidths"]))}
    used = {i for g in data["timing"].values() for row in g for i in row}
    assert used == set(range(len(data["timelines"]))), "every stored timeline is used"
    assert set(data["threshold_kind"]) == set(data["rings"])
    strategies = data["strategies"]
    assert set(strategies["index"]) == {
        f"{p}/{mask}/{pass_}"
        for p in ex.STRATEGY_HOSTS
        for mask in ("causal", "full")
        for pass_ in RING_PASSES
    }
    used = {i for g in strategies["index"].values() for row in g for i in row}
    assert used == set(range(len(strategies["entries"])))


@pytest.mark.parametrize(
    ("hosts", "layout", "causal", "pass_"),
    [
        (5, "striped", True, "forward"),
        (8, "zigzag", False, "backward"),
        (16, "contiguous", True, "forward"),
    ],
)
def test_data_schedules_are_the_librarys(data: dict, hosts, layout, causal, pass_) -> None:
    sched = ringsim.build_schedule(hosts, layout, causal, pass_, seq_len=hosts * 4)
    entry = data["rings"][ex.key(hosts, layout, causal, pass_)]
    steps = range(sched.steps)
    assert entry["kinds"] == ["".join(map(str, sched.kind_at(s))) for s in steps]
    assert entry["sends"] == [",".join(sched.payload(s)) for s in steps]
    assert entry["owners"] == [
        "".join(np.base_repr(o, 36).lower() for o in sched.kv_owner(s)) for s in steps
    ]
    assert entry["positions"] == sched.positions.tolist()
    assert max(entry["errors"][-1]) < -100, "every host exact after the last step"


@pytest.mark.parametrize(("layout", "causal"), [("zigzag", True), ("contiguous", False)])
def test_data_running_rows_are_the_rings(data: dict, layout, causal) -> None:
    """row_max and row_sum after each step are the NumPy ring's running state (RingRecord);
    after the last step they are the softmax statistics of exact attention."""
    hosts = 6
    entry = data["rings"][ex.key(hosts, layout, causal, "forward")]
    rng = np.random.default_rng(0)
    q, k, v, _ = (rng.standard_normal((hosts * 4, 8)) for _ in range(4))
    record = RingRecord()
    ringsim.ring_attention(q, k, v, hosts=hosts, layout=layout, causal=causal, record=record)
    for s, states in enumerate(record.states):
        for h, st in enumerate(states):
            np.testing.assert_allclose(entry["row_max"][s][h], st.row_max, rtol=1e-3)
            np.testing.assert_allclose(entry["row_sum"][s][h], st.row_sum, rtol=1e-3)
    scores = q @ k.T / math.sqrt(8)
    if causal:
        scores = np.where(np.tril(np.ones_like(scores, bool)), scores, -np.inf)
    final_max = scores.max(axis=1)
    final_sum = np.exp(scores - final_max[:, None]).sum(axis=1)
    for h, rows in enumerate(entry["positions"]):
        np.testing.assert_allclose(entry["row_max"][-1][h], final_max[rows], rtol=1e-3)
        np.testing.assert_allclose(entry["row_sum"][-1][h], final_sum[rows], rtol=1e-3)


def _decode(pair, hosts):
    """[starts, durations] as stored (a row: None, one number or one per host) -> arrays."""
    out = []
    for rows in pair:
        out.append(
            np.array(
                [np.full(hosts, np.nan) if r is None else np.broadcast_to(r, hosts) for r in rows],
                float,
            )
        )
    return out[0], out[0] + out[1]


@pytest.mark.parametrize(
    ("hosts", "layout", "causal", "pass_", "block", "bandwidth"),
    [
        (8, "zigzag", True, "forward", 32768, 12.5e9),
        (8, "contiguous", True, "backward", 4096, 300e9),
        (16, "striped", False, "forward", 512, 6.25e9),
        (3, "contiguous", False, "backward", 131072, 50e9),
    ],
)
def test_data_timelines_are_the_timers(data, hosts, layout, causal, pass_, block, bandwidth):
    lab = data["lab"]
    ci = _slider_index(lab["block_tokens"], block)
    bi = _slider_index(lab["bandwidths"], bandwidth)
    stored = data["timelines"][data["timing"][ex.key(hosts, layout, causal, pass_)][ci][bi]]
    result = _timeline(hosts, layout, causal, pass_, block, bandwidth)
    tl, span, unit = result.timeline, result.makespan, 1.0 / lab["time_units"]
    assert stored["span"] == pytest.approx(span, rel=1e-3)
    summary = result.summary()
    assert stored["exposed"] == pytest.approx(summary["exposed_comm_s"] / span, abs=1e-3)
    assert stored["idle"] == pytest.approx(summary["idle_fraction"], abs=1e-3)
    pairs = {"compute": (tl.compute_start, tl.compute_end)}
    if pass_ == "backward":
        pairs["kv"] = kv_messages(tl)["send"]
        pairs["grad"] = (tl.send_start, tl.send_end)
    else:
        pairs["kv"] = (tl.send_start, tl.send_end)
    for name, (start, end) in pairs.items():
        got_start, got_end = _decode(stored[name], hosts)
        np.testing.assert_array_equal(np.isnan(got_start), np.isnan(start), err_msg=name)
        ok = ~np.isnan(start)
        np.testing.assert_allclose(got_start[ok] * unit, start[ok] / span, atol=unit, err_msg=name)
        np.testing.assert_allclose(got_end[ok] * unit, end[ok] / span, atol=2 * unit, err_msg=name)


@pytest.mark.parametrize("pass_", RING_PASSES)
def test_data_thresholds_are_overlap_threshold(data: dict, pass_) -> None:
    lab, marks = data["lab"], data["lab"]["thresholds"][pass_]
    forward = {b: ex.lab_threshold(b, "forward") for b in lab["bandwidths"]}
    for b, mark in zip(lab["bandwidths"], marks["by_bandwidth"], strict=True):
        hw = ringsim.custom_hardware(lab["flops"], b, lab["latency_s"], dtype="bf16")
        c_star = ringsim.overlap_threshold(
            hw,
            heads=32,
            kv_heads=32,
            head_dim=128,
            dtype="bf16",
            pass_=pass_,
            include_latency=False,
        )
        assert mark["full"][0] == pytest.approx(c_star, rel=1e-12)
        assert mark["causal"][0] == pytest.approx(2 * c_star, rel=1e-12)
        if pass_ == "forward":  # F/B itself: FLOP/s over bytes/s, at 16 bits and h_kv = h
            assert c_star == pytest.approx(lab["flops"] / b * 2 * 2 * 128 * 32 / (4 * 128 * 32))
        assert c_star / forward[b] == pytest.approx(1.0 if pass_ == "forward" else 0.8)
    for c, mark in zip(lab["block_tokens"], marks["by_block"], strict=True):
        assert ex.lab_threshold(mark["full"][0], pass_) == pytest.approx(c, rel=1e-9)
        assert 2 * ex.lab_threshold(mark["causal"][0], pass_) == pytest.approx(c, rel=1e-9)
    assert marks["names"] == (
        {"full": "F/B", "causal": "2 F/B"}
        if pass_ == "forward"
        else {"full": "0.8 F/B", "causal": "1.6 F/B"}
    )


def test_page_prose_states_what_the_timer_computes(book_html: Path, data: dict) -> None:
    """The numbers in "Things to try" are the lab's (P = 8, c = 32K, B = 12.5 GB/s)."""
    text = (ROOT / "book" / "explorer.md").read_text()
    lab = data["lab"]
    at = lambda layout, mask, block: data["timelines"][
        data["timing"][f"8/{layout}/{mask}/forward"][lab["block_tokens"].index(block)][
            lab["bandwidths"].index(12.5e9)
        ]
    ]
    zigzag = at("zigzag", "causal", 32768)["exposed"]
    assert f"{round(100 * zigzag)}% of the run is exposed" in text
    assert round(100 * zigzag) == 31
    assert at("zigzag", "full", 32768)["exposed"] == 0 and "0% exposed" in text
    assert at("zigzag", "causal", 65536)["exposed"] == 0
    assert (
        "c is above F/B" in text
        and lab["thresholds"]["forward"]["by_bandwidth"][1]["full"][0]
        < 32768
        < lab["thresholds"]["forward"]["by_bandwidth"][1]["causal"][0]
    )


# ---------------------------------------------------------------------------------------------
# The page: every ring, every step, as the schedule and the timer say
# ---------------------------------------------------------------------------------------------

# Walks every ring of P hosts and a layout at the default sliders, step by step (the "step"
# button), and reports what each frame shows; Python checks it against the library.
WALK = """
const out = [];
const data = window.RING_DATA;
const p = HOSTS, layout = 'LAYOUT';
for (const mask of ['causal', 'full']) for (const pass of data.passes) {
  choose(p, layout, mask, pass);
  const name = `${p}/${layout}/${mask}/${pass}`;
  const frames = [];
  for (let i = 0; i <= p + 1; i++) {
    frames.push({
      t: Number(root().dataset.t), step: Number(root().dataset.step),
      kinds: root().dataset.kinds, status: $('.rx-status').textContent,
      clock: $('.rx-clock').textContent,
      held: $$('#rx-ring .rx-held').map((r) => [Number(r.closest('.rx-host').dataset.host),
        Number(r.dataset.owner), r.dataset.state, Number(r.dataset.step)]),
      slots: $$('#rx-ring .rx-slot').map((r) => [Number(r.closest('.rx-host').dataset.host),
        r.dataset.state, r.dataset.awaits]),
      cells: $$('#rx-grid .rx-cell').length,
      done: $$('#rx-grid .rx-done').length, lines: $$('#rx-errors .rx-line').length,
      lanes: $$('#rx-lanes .rx-lane').length, stepDisabled: $('#rx-step').disabled,
    });
    if ($('#rx-step').disabled) break;
    $('#rx-step').click();
  }
  out.push({name, frames});
}
return out;
"""


@pytest.fixture(scope="module")
def walk(browser, book_html: Path) -> list[dict]:
    t = Tab(browser, (book_html / "explorer.html").as_uri(), 1280)
    try:  # one P at a time: each probe answers well within the client's reply timeout
        return [
            ring
            for p in range(2, 17)
            for layout in layout_names()
            for ring in t.run(WALK.replace("HOSTS", str(p)).replace("LAYOUT", layout))
        ]
    finally:
        t.close()


KIND_CODES = (("full", 2), ("partial", 1), ("skip", 0))


def _counts(status: str) -> dict[str, int]:
    """What the status says the schedule does: hosts per kind."""
    found = {"full": 0, "partial": 0, "skip": 0}
    for number, kind in re.findall(r"(\d+) hosts? (?:computes? an? (full|partial)|skips?)", status):
        found[kind or "skip"] = int(number)
    return found


def test_walk_shows_every_ring_to_its_end(walk: list[dict], data: dict) -> None:
    assert len(walk) == 15 * len(layout_names()) * 2 * len(RING_PASSES)
    problems = []
    for ring in walk:
        hosts = int(ring["name"].split("/")[0])
        frames = ring["frames"]
        if len(frames) != hosts + 1 or not frames[-1]["stepDisabled"]:
            problems.append(f"{ring['name']}: {len(frames)} frames, step still enabled")
        for f in frames:
            shown = len(f["held"]) + len(f["slots"])
            if (shown, f["cells"], f["lines"], f["lanes"]) != (hosts, hosts**2, hosts, hosts):
                problems.append(f"{ring['name']} t={f['t']}: {f}")
    assert not problems, problems[:5]


def test_walk_status_counts_come_from_the_schedule(walk: list[dict]) -> None:
    """At each step the status counts full, partial and skipped blocks as build_schedule
    classifies them (the old page said "every host computes" while half of them skipped)."""
    problems = []
    for ring in walk:
        hosts, layout, mask, pass_ = ring["name"].split("/")
        sched = ringsim.build_schedule(int(hosts), layout, mask == "causal", pass_)
        for f in ring["frames"]:
            kinds = sched.kind_at(f["step"])
            want = {name: int((kinds == k).sum()) for name, k in KIND_CODES}
            if _counts(f["status"]) != want or f["kinds"] != ",".join(map(str, want.values())):
                problems.append(f"{ring['name']} step {f['step']}: {f['status']} != {want}")
    assert not problems, problems[:5]


def test_walk_steps_land_on_the_timers_step_ends(walk: list[dict], data: dict) -> None:
    """Each "step" lands where every host has computed and sent that step (the timer's
    times), and the pairs drawn as done are those the timer has finished by then."""
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(DEFAULT_BLOCK), lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    units = lab["time_units"]
    problems = []
    for ring in walk[::7]:  # a spread of rings: the timer runs again for each
        hosts, layout, mask, pass_ = ring["name"].split("/")
        result = _timeline(int(hosts), layout, mask == "causal", pass_)
        tl, span = result.timeline, result.makespan
        ends = [tl.compute_end]
        ends += [tl.send_end] + ([kv_messages(tl)["send"][1]] if pass_ == "backward" else [])
        step_ends = np.nanmax(np.stack(ends), axis=(0, 2)) / span * units
        stored = data["timelines"][data["timing"][ring["name"]][ci][bi]]["step_ends"]
        np.testing.assert_allclose(stored, step_ends, atol=2)
        ends_units = tl.compute_end / span * units
        for f, end in zip(ring["frames"][1:], step_ends, strict=True):
            # pairs done by then: the timer's, give or take the page's rounding to a unit
            least, most = ((ends_units <= f["t"] + d).sum() for d in (-2, 2))
            if abs(f["t"] - end) > 2 or not least <= f["done"] <= most:
                problems.append(f"{ring['name']}: t={f['t']} want {end:.0f}, done {f['done']}")
    assert not problems, problems[:5]


# ---------------------------------------------------------------------------------------------
# The page: each control
# ---------------------------------------------------------------------------------------------


def test_play_pause_and_speed(tab: Tab) -> None:
    got = tab.run(
        """
        choose(4, 'zigzag', 'causal', 'forward');
        const rate1 = Number(state().rate);
        $('#rx-play').click();
        await until(() => Number(state().t) > 0 && frames() > 3, 'play to move the clock');
        const playing = state().playing;
        set('#rx-speed', 4);
        const rate4 = Number(state().rate);
        $('#rx-play').click();
        const paused = Number(state().t), pausedFrames = frames();
        await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
        await sleep(100);
        const later = Number(state().t);
        $('#rx-play').click();
        await until(() => state().playing === '0', 'the run to play to its end');
        return {rate1, rate4, playing, paused, later, pausedFrames, end: Number(state().t),
                label: $('#rx-play').textContent, stepDisabled: $('#rx-step').disabled};
        """
    )
    assert got["playing"] == "1"
    assert got["rate4"] == pytest.approx(4 * got["rate1"]), "speed 4x plays four times as fast"
    assert got["later"] == got["paused"], "pause stops the clock"
    assert got["end"] == 2000 and got["stepDisabled"], "play runs to the end and stops there"
    assert "play" in got["label"]


def test_step_back_and_scrub(tab: Tab, data: dict) -> None:
    got = tab.run(
        """
        choose(8, 'contiguous', 'causal', 'forward');
        const t0 = Number(state().t), back0 = $('#rx-back').disabled;
        $('#rx-step').click(); $('#rx-step').click(); $('#rx-step').click();
        const t3 = Number(state().t), s3 = state().step;
        $('#rx-back').click();
        const t2 = Number(state().t), s2 = state().step;
        set('#rx-scrub', 1000);
        const scrubbed = Number(state().t);
        const playhead = box($('#rx-lanes .rx-playhead'));
        $('#rx-back').click();
        const backFromMiddle = Number(state().t);
        $('#rx-reset').click();
        return {t0, back0, t3, s3, t2, s2, scrubbed, playhead, backFromMiddle,
                reset: Number(state().t)};
        """
    )
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(DEFAULT_BLOCK), lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    ends = data["timelines"][data["timing"]["8/contiguous/causal/forward"][ci][bi]]["step_ends"]
    assert got["t0"] == 0 and got["back0"], "step back is off at the start"
    assert (got["t3"], got["s3"]) == (ends[2], "2")
    assert (got["t2"], got["s2"]) == (ends[1], "1"), "step back returns to the previous step"
    assert got["scrubbed"] == 1000
    assert got["backFromMiddle"] == max(e for e in ends if e < 1000)
    assert got["reset"] == 0


def test_block_and_bandwidth_sliders_change_the_timeline(tab: Tab, data: dict) -> None:
    """Each slider stop shows its own run (the timer's makespan), keeps the moment of the run,
    and moves the other slider's threshold marks."""
    got = tab.run(
        """
        choose(8, 'zigzag', 'causal', 'forward');
        set('#rx-scrub', 500);
        const seen = [];
        for (let c = 0; c <= Number($('#rx-block').max); c++) {
          for (let b = 0; b <= Number($('#rx-bw').max); b++) {
            set('#rx-block', c); set('#rx-bw', b);
            seen.push({c, b, t: Number(state().t), clock: $('.rx-clock').textContent,
              marks: $$('#rx-bw-scale .rx-mark').map((m) => m.dataset.value),
              busy: $$('#rx-lanes .rx-busy').length});
          }
        }
        return seen;
        """
    )
    lab = data["lab"]
    marks = lab["thresholds"]["forward"]["by_block"]
    assert len(got) == len(lab["block_tokens"]) * len(lab["bandwidths"])
    for seen in got:
        c, b = lab["block_tokens"][seen["c"]], lab["bandwidths"][seen["b"]]
        span = _timeline(8, "zigzag", True, "forward", c, b).makespan
        assert seen["t"] == 500, "the sliders keep the moment of the run"
        shown = re.search(r"of ([\d.]+) (s|ms|µs)\.", seen["clock"])
        scale = {"s": 1, "ms": 1e-3, "µs": 1e-6}[shown.group(2)]
        assert float(shown.group(1)) * scale == pytest.approx(span, rel=5e-3)  # 3 digits
        want = [marks[seen["c"]]["full"][0], marks[seen["c"]]["causal"][0]]
        assert [float(x) for x in seen["marks"]] == pytest.approx(want)
        assert seen["busy"] == 8 * 8


def test_threshold_marks_sit_at_f_over_b(tab: Tab, data: dict) -> None:
    """On the block-size slider, F/B and 2 F/B (overlap_threshold) sit where a thumb at that
    block size would be: between the stops, on the slider's log scale."""
    got = tab.run(
        """
        choose(8, 'zigzag', 'causal', 'forward', 0);
        const out = [];
        for (let b = 0; b <= Number($('#rx-bw').max); b++) {
          set('#rx-bw', b);
          const input = box($('#rx-block'));
          out.push({b, input, marks: $$('#rx-block-scale .rx-mark').map((m) => ({
            kind: m.dataset.kind, value: Number(m.dataset.value), hidden: m.hidden,
            box: box(m), text: m.textContent}))});
        }
        return out;
        """
    )
    lab = data["lab"]
    grid = np.log(lab["block_tokens"])
    thumb = 16
    for row in got:
        b = lab["bandwidths"][row["b"]]
        left, _, right, _ = row["input"]
        for mark in row["marks"]:
            c_star = ex.lab_threshold(b, "forward") * (2 if mark["kind"] == "causal" else 1)
            assert mark["value"] == pytest.approx(c_star, rel=1e-9)
            if not grid[0] <= math.log(c_star) <= grid[-1]:
                assert mark["hidden"]
                continue
            f = np.interp(math.log(c_star), grid, np.arange(len(grid))) / (len(grid) - 1)
            want = left + thumb / 2 + (right - left - thumb) * f
            centre = (mark["box"][0] + mark["box"][2]) / 2
            assert centre == pytest.approx(want, abs=1.5), (b, mark)
            assert mark["text"] == ("F/B" if mark["kind"] == "full" else "2 F/B")


def test_lanes_are_the_timers_intervals(tab: Tab, data: dict) -> None:
    """Busy bars are the timer's compute intervals, idle bars the rest of the run, the link
    bars its messages; each drawn where its time is on the axis."""
    cases = [
        (8, "contiguous", True, "forward", 32768, 12.5e9),
        (4, "zigzag", True, "backward", 8192, 100e9),
        (16, "striped", False, "forward", 1024, 300e9),
    ]
    lab = data["lab"]
    for hosts, layout, causal, pass_, block, bandwidth in cases:
        ci, bi = lab["block_tokens"].index(block), lab["bandwidths"].index(bandwidth)
        mask = "causal" if causal else "full"
        got = tab.run(
            f"""
            choose({hosts}, '{layout}', '{mask}', '{pass_}', {ci}, {bi});
            const read = (sel) => $$(sel).map((r) => ({{
              host: Number(r.closest('.rx-lane').dataset.host), step: Number(r.dataset.step),
              start: Number(r.dataset.start), end: Number(r.dataset.end),
              x: Number(r.getAttribute('x')), w: Number(r.getAttribute('width'))}}));
            const frame = $('#rx-lanes .rx-lane rect[stroke="#ddd"]');
            return {{busy: read('#rx-lanes .rx-busy'), idle: read('#rx-lanes .rx-idle'),
                     kv: read('#rx-lanes .rx-send-kv'), grad: read('#rx-lanes .rx-send-grad'),
                     x0: Number(frame.getAttribute('x')), w: Number(frame.getAttribute('width'))}};
            """
        )
        result = _timeline(hosts, layout, causal, pass_, block, bandwidth)
        tl, span = result.timeline, result.makespan
        tol = 2 * span / lab["time_units"]
        for h in range(hosts):
            busy = sorted((b for b in got["busy"] if b["host"] == h), key=lambda b: b["start"])
            want = [
                (s, tl.compute_start[s, h], tl.compute_end[s, h])
                for s in range(tl.steps)
                if tl.compute_end[s, h] > tl.compute_start[s, h]
            ]
            assert [b["step"] for b in busy] == [s for s, _, _ in want]
            for b, (_, start, end) in zip(busy, want, strict=True):
                assert b["start"] == pytest.approx(start, abs=tol)
                assert b["end"] == pytest.approx(end, abs=tol)
                assert b["x"] == pytest.approx(got["x0"] + b["start"] / span * got["w"], abs=0.01)
            idle = [b for b in got["idle"] if b["host"] == h]
            covered = sum(b["end"] - b["start"] for b in busy + idle)
            assert covered == pytest.approx(span, abs=tol), "busy and idle tile the run"
            idle_time = sum(b["end"] - b["start"] for b in idle)
            assert idle_time == pytest.approx(span - tl.busy("compute")[h], abs=tol * hosts)
            sends = {"kv": (tl.send_start, tl.send_end)}
            if pass_ == "backward":
                sends = {"kv": kv_messages(tl)["send"], "grad": (tl.send_start, tl.send_end)}
            for name, (start, end) in sends.items():
                drawn = sorted((b for b in got[name] if b["host"] == h), key=lambda b: b["step"])
                want = [s for s in range(tl.steps) if end[s, h] > start[s, h]]
                assert [b["step"] for b in drawn] == want, name
                for b in drawn:
                    assert b["start"] == pytest.approx(start[b["step"], h], abs=tol)
                    assert b["end"] == pytest.approx(end[b["step"], h], abs=tol)


def test_host_click_shows_its_running_max_sum_and_error(tab: Tab, data: dict) -> None:
    got = tab.run(
        """
        choose(8, 'zigzag', 'causal', 'forward');
        $('#rx-step').click(); $('#rx-step').click(); $('#rx-step').click();
        const host = $('#rx-ring .rx-host[data-host="5"]');
        host.dispatchEvent(new MouseEvent('click', {bubbles: true}));
        await until(() => $('#rx-inspect').dataset.host === '5', 'the inspector');
        const hostDone = Number($('#rx-inspect').dataset.done);
        const cells = (tr) => [...tr.cells].map((c) => c.textContent);
        const rows = $$('#rx-inspect tbody tr').map(cells);
        const tag = $('#rx-lanes .rx-host-tag[data-host="2"]');
        tag.dispatchEvent(new MouseEvent('click', {bubbles: true}));
        const viaLane = $('#rx-inspect').dataset.host;
        set('#rx-pass', 'backward');
        $('#rx-step').click();
        const back = {host: $('#rx-inspect').dataset.host, done: $('#rx-inspect').dataset.done,
          head: [...$$('#rx-inspect th')].map((c) => c.textContent),
          rows: $$('#rx-inspect tbody tr').map(cells)};
        return {rows, hostDone, viaLane, back};
        """
    )
    hosts = 8
    rng = np.random.default_rng(0)
    q, k, v, _ = (rng.standard_normal((hosts * 4, 8)) for _ in range(4))
    record = RingRecord()
    ringsim.ring_attention(q, k, v, hosts=hosts, layout="zigzag", causal=True, record=record)
    exact = ringsim.reference_attention(q, k, v, causal=True)
    sched = ringsim.build_schedule(hosts, "zigzag", True, seq_len=hosts * 4)
    positions = sched.positions[5]
    # the rows shown by the page before the lane click: host 5 after the steps it has done
    s = got["hostDone"] - 1
    assert s >= 2, "host 5 has done at least the three steps every host has"
    state = record.states[s][5]
    errors = relative_error(record.outputs[s][5], exact[positions])
    assert [int(r[0]) for r in got["rows"]] == positions.tolist()
    for row, m, l_sum, err in zip(got["rows"], state.row_max, state.row_sum, errors, strict=True):
        assert float(row[1]) == pytest.approx(m, rel=1e-3)
        assert float(row[2]) == pytest.approx(l_sum, rel=1e-3)
        shown = float(row[3].replace("−", "-"))
        assert abs(math.log10(shown) - math.log10(err)) < 0.1
    assert got["viaLane"] == "2", "a host's lane label selects it too"
    assert got["back"]["head"] == ["token", "error of dq"]
    assert len(got["back"]["rows"]) == 4


# ---------------------------------------------------------------------------------------------
# The page: readable at P = 2..16, at 1280 px and on a 414-px phone
# ---------------------------------------------------------------------------------------------

# For each P: every text of the ring and the lanes inside its picture, no two host labels
# overlapping, the hosts' colours; the smallest rendered text of the whole explorer.
LAYOUT_PROBE = """
const out = [];
const inside = (inner, outer) => inner[0] >= outer[0] - 0.5 && inner[1] >= outer[1] - 0.5
  && inner[2] <= outer[2] + 0.5 && inner[3] <= outer[3] + 0.5;
const overlap = (a, b) => a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3];
for (const p of window.RING_DATA.hosts) {
  choose(p, 'contiguous', 'causal', 'forward');
  set('#rx-scrub', 700);
  const clipped = [];
  for (const id of ['#rx-ring', '#rx-lanes', '#rx-grid', '#rx-errors', '#rx-strategies']) {
    const frame = box($(id));
    for (const t of $$(`${id} text`)) {
      if (t.textContent && !inside(box(t), frame)) clipped.push(`${id}: ${t.textContent}`);
    }
  }
  const labels = $$('#rx-ring .rx-label').map(box);
  const overlaps = [];
  labels.forEach((a, i) => labels.forEach((b, j) => {
    if (i < j && overlap(a, b)) overlaps.push([i, j]);
  }));
  const colours = $$('#rx-ring .rx-host > circle:not(.rx-selected)')
    .map((c) => c.getAttribute('stroke'));
  let smallest = 99, where = '';
  for (const t of $$('svg text')) {
    if (!t.textContent) continue;
    const m = t.getScreenCTM();
    const size = parseFloat(getComputedStyle(t).fontSize) * Math.hypot(m.a, m.b);
    if (size < smallest) { smallest = size; where = t.textContent; }
  }
  for (const node of root().querySelectorAll('*')) {
    if (node.closest('svg') || node.hidden) continue;
    const own = [...node.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim());
    const size = parseFloat(getComputedStyle(node).fontSize);
    if (own && size < smallest) { smallest = size; where = node.textContent.slice(0, 40); }
  }
  out.push({p, clipped, overlaps, colours, smallest, where,
            overflow: document.documentElement.scrollWidth - window.innerWidth,
            rootRight: box(root())[2], width: window.innerWidth});
}
return out;
"""


def _lab_colour(hex_colour: str) -> np.ndarray:
    """CIE L*a*b* of an sRGB colour (D65), for colour differences."""
    rgb = np.array([int(hex_colour[i : i + 2], 16) / 255 for i in (1, 3, 5)])
    rgb = np.where(rgb > 0.04045, ((rgb + 0.055) / 1.055) ** 2.4, rgb / 12.92)
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]])
    xyz = xyz @ rgb / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 0.008856, np.cbrt(xyz), 7.787 * xyz + 16 / 116)
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


@pytest.mark.parametrize("width", [1280, 414])
def test_labels_fit_and_text_is_readable_at_every_p(browser, book_html: Path, width) -> None:
    t = Tab(browser, (book_html / "explorer.html").as_uri(), width)
    try:
        got = t.run(LAYOUT_PROBE)
    finally:
        t.close()
    assert [g["p"] for g in got] == list(range(2, 17))
    for g in got:
        assert not g["clipped"], f"P={g['p']} at {width} px: text cut off: {g['clipped'][:5]}"
        assert not g["overlaps"], f"P={g['p']} at {width} px: host labels overlap {g['overlaps']}"
        assert g["smallest"] >= 9, (
            f"P={g['p']} at {width} px: {g['where']!r} is {g['smallest']:.1f} px"
        )
        assert g["overflow"] <= 0, f"P={g['p']} at {width} px: the page scrolls sideways"
        assert g["rootRight"] <= g["width"]


def test_neighbouring_hosts_have_distinct_colours(browser, book_html: Path) -> None:
    """At every P the colours of ring neighbours differ clearly (CIE76 distance > 25; the old
    ramp gave hosts 0 and 1 of 16 the same colour)."""
    t = Tab(browser, (book_html / "explorer.html").as_uri(), 1280)
    try:
        got = t.run(LAYOUT_PROBE)
    finally:
        t.close()
    for g in got:
        p, colours = g["p"], g["colours"]
        assert len(colours) == p and len(set(colours)) == p
        for h in range(p):
            distance = np.linalg.norm(_lab_colour(colours[h]) - _lab_colour(colours[(h + 1) % p]))
            assert distance > 25, f"P={p}: hosts {h} and {(h + 1) % p} look alike"


def test_explorer_is_offline_and_error_free(tab: Tab) -> None:
    tab.run(
        "set('#rx-hosts', 16); $('#rx-play').click(); await until(() => frames() > 5, 'frames');"
    )
    requests = [e["params"]["request"]["url"] for e in tab.events("Network.requestWillBeSent")]
    remote = [r for r in requests if urlsplit(r).scheme in ("http", "https")]
    assert not remote, remote
    assert not tab.events("Network.loadingFailed")
    errors = [e["params"]["exceptionDetails"] for e in tab.events("Runtime.exceptionThrown")]
    assert not errors, errors
    assert json.dumps(requests).count("explorer-data.js") == 1


# ---------------------------------------------------------------------------------------------
# Right at every frame: what a host holds, who waits, the thresholds, the backward's bytes
# ---------------------------------------------------------------------------------------------


def _holds_units(data: dict, name: str) -> tuple[np.ndarray, np.ndarray, dict]:
    """The stored hold intervals of a ring at the default sliders, in page units."""
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(DEFAULT_BLOCK), lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    entry = data["timelines"][data["timing"][name][ci][bi]]
    hosts = int(name.split("/")[0])
    start, end = _decode(entry["holds"], hosts)
    return start, end, entry


@pytest.mark.parametrize("hosts", [2, 5, 8, 16])
@pytest.mark.parametrize("pass_", RING_PASSES)
def test_a_block_is_held_by_one_host_at_a_time_and_only_after_it_arrived(hosts, pass_) -> None:
    """ringsim.views.explorer.holds on the timer's own timelines (seconds): the host holding
    a block starts no earlier than the block's arrival (the end of its message) and covers its
    compute; the next host takes it up only after this one let it go."""
    for layout in layout_names():
        for causal in (True, False):
            for block, bandwidth in ((512, 300e9), (32768, 12.5e9), (131072, 6.25e9)):
                result = _timeline(hosts, layout, causal, pass_, block, bandwidth)
                tl = result.timeline
                kv = kv_messages(tl).get("send") if pass_ == "backward" else None
                start, end = ex.holds(tl, kv or (tl.send_start, tl.send_start))
                arrival = np.zeros_like(start)
                arrival[1:] = np.roll((kv or (tl.send_start, tl.send_end))[1][:-1], 1, axis=1)
                name = f"P={hosts} {layout} causal={causal} {pass_} c={block}"
                ok = tl.compute_end > tl.compute_start  # computed blocks; a skipped one: NaN
                assert np.isnan(start[~ok]).all() and not np.isnan(start[ok]).any(), name
                assert (start[ok] >= arrival[ok] - 1e-12).all(), f"{name}: held before it arrived"
                assert (end[ok] >= tl.compute_end[ok] - 1e-9 * result.makespan).all() or (
                    # cut short only by the next host taking the block up (within rounding)
                    np.nanmax(tl.compute_end - end) < 1e-4 * result.makespan
                ), f"{name}: held shorter than its compute"
                # the same block one step later, on the next host: never before this one let go
                later = np.roll(start[1:], -1, axis=1)
                both = ~np.isnan(later) & ~np.isnan(end[:-1])
                assert (end[:-1][both] <= later[both]).all(), f"{name}: one block on two hosts"
                mine = ~np.isnan(start[1:]) & ~np.isnan(end[:-1])
                assert (end[:-1][mine] <= start[1:][mine]).all(), f"{name}: two blocks on a host"


def test_threshold_kind_is_f_over_b_or_twice_it() -> None:
    """A balanced causal ring (striped, zigzag) needs 2 F/B; a full ring and a contiguous
    causal one (its busiest host computes whole blocks) need F/B."""
    for pass_ in RING_PASSES:
        assert ex.threshold_kind(8, "zigzag", True, pass_) == "causal"
        assert ex.threshold_kind(8, "striped", True, pass_) == "causal"
        assert ex.threshold_kind(8, "contiguous", True, pass_) == "full"
        for layout in layout_names():
            assert ex.threshold_kind(8, layout, False, pass_) == "full"


@pytest.mark.parametrize(
    ("hosts", "causal", "pass_", "block", "bandwidth"),
    [(8, True, "forward", 32768, 12.5e9), (4, False, "backward", 4096, 300e9)],
)
def test_strategy_lanes_are_the_timers(data, hosts, causal, pass_, block, bandwidth) -> None:
    """The strategies panel stores each strategy's makespan and the lane of its slowest host
    as ringsim.simulate_strategy times them (ring, all-gather, Ulysses, two-node hybrid)."""
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(block), lab["bandwidths"].index(bandwidth)
    key_ = f"{hosts}/{'causal' if causal else 'full'}/{pass_}"
    entry = data["strategies"]["entries"][data["strategies"]["index"][key_][ci][bi]]
    config = ex.lab_config(hosts, "zigzag", causal, pass_, block, bandwidth)
    runs = ex.strategy_runs(config)
    assert [lane["label"] for lane in entry["lanes"]] == list(runs)
    span = max(run.makespan for run in runs.values())
    assert entry["span"] == pytest.approx(span, rel=1e-5)
    for lane, run in zip(entry["lanes"], runs.values(), strict=True):
        assert lane["makespan"] == pytest.approx(run.makespan, rel=1e-5)
        tl = run.timeline
        h = lane["host"]
        pairs = zip(tl.compute_start[:, h], tl.compute_end[:, h], strict=True)
        busy = [(a, b) for a, b in pairs if b > a]
        assert len(lane["compute"]) == len(busy)
        for (a_u, b_u), (a, b) in zip(lane["compute"], busy, strict=True):
            assert a_u / lab["time_units"] * span == pytest.approx(a, abs=span / 1000)
            assert b_u / lab["time_units"] * span == pytest.approx(b, abs=span / 1000)


def test_walk_draws_only_blocks_a_host_holds(walk: list[dict], data: dict) -> None:
    """At every frame of every ring: each filled block is the one the library says the host
    holds then, no block is filled on two hosts at once, and a host holding nothing shows an
    empty slot (waiting for a block that has not arrived, or done)."""
    problems = []
    for ring in walk:
        start, end, _ = _holds_units(data, ring["name"])
        rec = data["rings"][ring["name"]]
        for f in ring["frames"]:
            t = f["t"]
            owners = [owner for _, owner, _, _ in f["held"]]
            if len(owners) != len(set(owners)):
                problems.append(f"{ring['name']} t={t}: a block on two hosts {f['held']}")
            for host, owner, _, step in f["held"]:
                if not (start[step, host] <= t < end[step, host]):
                    problems.append(f"{ring['name']} t={t}: host {host} shows step {step}")
                if owner != int(rec["owners"][step][host], 36):
                    problems.append(f"{ring['name']} t={t}: host {host} shows kv{owner}")
            for host, state, _ in f["slots"]:
                if ((start[:, host] <= t) & (t < end[:, host])).any():
                    problems.append(f"{ring['name']} t={t}: host {host} holds, drawn {state}")
    assert not problems, problems[:5]


def test_walk_step_ends_say_who_waits(walk: list[dict], data: dict) -> None:
    """At each step's end the status numbers the step as "Step k of n" (k = s + 1, n the
    steps) and names the hosts that wait for their next block, as the timeline has them."""
    problems = []
    for ring in walk[::5]:
        hosts = int(ring["name"].split("/")[0])
        entry = _holds_units(data, ring["name"])[2]
        compute_start, compute_end = _decode(entry["compute"], hosts)
        steps = len(entry["step_ends"])
        for f in ring["frames"]:
            t = f["t"]
            if not f["status"].startswith(f"Step {f['step'] + 1} of {steps} (s = {f['step']})"):
                problems.append(f"{ring['name']} t={t}: {f['status'][:40]}")
            done = (compute_end <= t).sum(axis=0)
            computing = ((compute_start <= t) & (t < compute_end)).any(axis=0)
            waits = [h for h in range(hosts) if not computing[h] and done[h] < steps]
            said = re.search(r"(\d+) hosts? waits? for the next block", f["status"])
            if (int(said.group(1)) if said else 0) != len(waits):
                problems.append(f"{ring['name']} t={t}: waiting {waits}, status {f['status']}")
            if waits and "(" not in f["status"].split("for the next block")[1][:3]:
                problems.append(f"{ring['name']} t={t}: no reason given: {f['status']}")
    assert not problems, problems[:5]


def test_walk_clock_names_the_threshold_that_applies_and_counts_dk_dv(walk, data) -> None:
    """The clock names F/B or 2 F/B as the ring needs (threshold_kind), with its value, and a
    backward clock times the dk, dv message beside k, v."""
    lab = data["lab"]
    bi = lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    problems = []
    for ring in walk:
        pass_ = ring["name"].split("/")[3]
        kind = data["threshold_kind"][ring["name"]]
        marks = lab["thresholds"][pass_]
        need = marks["by_bandwidth"][bi][kind][0]
        want = f"needs c ≥ {marks['names'][kind]} = {round(need):,} tokens"
        clock = ring["frames"][-1]["clock"]
        if want not in clock:
            problems.append(f"{ring['name']}: {want!r} not in {clock!r}")
        if (pass_ == "backward") != ("dk, dv" in clock):
            problems.append(f"{ring['name']}: dk, dv in the clock: {clock!r}")
    assert not problems, problems[:5]


def test_keyboard_drives_the_explorer(tab: Tab, data: dict) -> None:
    got = tab.run(
        """
        choose(8, 'contiguous', 'causal', 'forward');
        const key = (k) => document.body.dispatchEvent(
          new KeyboardEvent('keydown', {key: k, bubbles: true}));
        document.activeElement && document.activeElement.blur();
        key('ArrowRight'); key('ArrowRight');
        const two = Number(state().t);
        key('ArrowLeft');
        const one = Number(state().t);
        const speed0 = state().speed;
        key('+');
        const faster = state().speed;
        key(' ');
        const playing = state().playing;
        key(' ');
        const paused = state().playing;
        key('Home');
        return {two, one, speed0, faster, playing, paused, t: Number(state().t)};
        """
    )
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(DEFAULT_BLOCK), lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    ends = data["timelines"][data["timing"]["8/contiguous/causal/forward"][ci][bi]]["step_ends"]
    assert got["two"] == ends[1] and got["one"] == ends[0]
    assert float(got["faster"]) == 2 * float(got["speed0"])
    assert (got["playing"], got["paused"], got["t"]) == ("1", "0", 0)


def test_reduced_motion_plays_step_by_step(browser, book_html: Path, data: dict) -> None:
    """With prefers-reduced-motion the page says so (data-motion) and play only ever shows
    the start and the ends of steps, never a moment in between."""
    reduce = [{"name": "prefers-reduced-motion", "value": "reduce"}]
    t = Tab(browser, (book_html / "explorer.html").as_uri(), 1280, media=reduce)
    try:
        got = t.run(
            """
            choose(4, 'zigzag', 'causal', 'forward');
            set('#rx-speed', 4);
            const seen = new Set();
            $('#rx-play').click();
            while (state().playing === '1') { seen.add(Number(state().t)); await sleep(10); }
            seen.add(Number(state().t));
            return {motion: state().motion, seen: [...seen]};
            """
        )
    finally:
        t.close()
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(DEFAULT_BLOCK), lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    ends = data["timelines"][data["timing"]["4/zigzag/causal/forward"][ci][bi]]["step_ends"]
    assert got["motion"] == "reduced"
    assert set(got["seen"]) <= {0, *ends, lab["time_units"]}, got["seen"]
    assert len(got["seen"]) >= 3, "play moved through the steps"


def test_strategies_panel_draws_the_stored_lanes(tab: Tab, data: dict) -> None:
    got = tab.run(
        """
        choose(8, 'zigzag', 'causal', 'forward');
        const lanes = $$('#rx-strategies .rx-strategy').map((g) => ({label: g.dataset.label,
          makespan: Number(g.dataset.makespan),
          compute: [...g.querySelectorAll('.rx-strategy-compute')].map((r) =>
            [Number(r.dataset.start), Number(r.dataset.end)])}));
        const note = $('#rx-strategies-note').textContent;
        choose(5, 'zigzag', 'causal', 'forward');
        return {lanes, note, other: $('#rx-strategies-note').textContent,
                empty: $$('#rx-strategies .rx-strategy').length};
        """
    )
    lab = data["lab"]
    ci, bi = lab["block_tokens"].index(DEFAULT_BLOCK), lab["bandwidths"].index(DEFAULT_BANDWIDTH)
    entry = data["strategies"]["entries"][data["strategies"]["index"]["8/causal/forward"][ci][bi]]
    assert [lane["label"] for lane in got["lanes"]] == [lane["label"] for lane in entry["lanes"]]
    for drawn, stored in zip(got["lanes"], entry["lanes"], strict=True):
        assert drawn["makespan"] == stored["makespan"]
        assert drawn["compute"] == stored["compute"]
    fastest = min(entry["lanes"], key=lambda lane: lane["makespan"])["label"]
    assert f"the fastest is {fastest}" in got["note"]
    assert got["empty"] == 0 and "P = 4, 8, 16" in got["other"]


def test_things_to_try_name_the_threshold_and_the_strategies_right(data: dict) -> None:
    """ "Things to try" says 2 F/B where a balanced causal ring needs it (the transfers come out
    as the 2 F/B mark passes c), and that below the ring's threshold Ulysses and the hybrid
    beat the ring while a fast link lets the ring win."""
    text = (ROOT / "book" / "explorer.md").read_text()
    assert "the 2 F/B mark on the block-size" in text
    lab = data["lab"]
    ci = lab["block_tokens"].index(32768)
    for bi, b in enumerate(lab["bandwidths"]):
        entry = data["timelines"][data["timing"]["8/zigzag/causal/forward"][ci][bi]]
        need = lab["thresholds"]["forward"]["by_bandwidth"][bi]["causal"][0]
        if 32768 > 1.05 * need:
            assert entry["exposed"] < 0.02, (b, need)
        elif 32768 < 0.95 * need:
            assert entry["exposed"] > 0.02, (b, need)
    index = data["strategies"]["index"]["8/causal/forward"]
    slow = data["strategies"]["entries"][index[lab["block_tokens"].index(4096)][1]]
    times = {lane["label"].split(" ")[0]: lane["makespan"] for lane in slow["lanes"]}
    assert times["Ulysses"] < times["ring"] and times["hybrid"] < times["ring"]
    assert "Ulysses and the two-node hybrid" in text
    fast = data["strategies"]["entries"][index[lab["block_tokens"].index(4096)][-1]]
    times = {lane["label"].split(" ")[0]: lane["makespan"] for lane in fast["lanes"]}
    assert times["ring"] == min(times.values())


# ---------------------------------------------------------------------------------------------
# The sliding window: the steps a windowed ring skips and its jumps
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "layout", "pass_"),
    [(8, "zigzag", "forward"), (8, "contiguous", "backward"), (5, "striped", "forward")],
)
def test_window_data_are_the_librarys_windowed_schedules(data, hosts, layout, pass_) -> None:
    windows = data["windows"]
    assert windows["tokens"] == list(ex.WINDOW_TOKENS)
    assert set(windows["rings"]) == set(data["rings"])
    entries = windows["rings"][ex.key(hosts, layout, True, pass_)]
    for w, entry in zip(windows["tokens"], entries, strict=True):
        sched = ringsim.build_schedule(
            hosts, layout, True, pass_, seq_len=hosts * 4, sliding_window=w
        )
        assert entry["steps"] == list(sched.ring_steps)
        assert entry["hops"] == [sched.hops_after(s) for s in sched.ring_steps]
        assert entry["kinds"] == ["".join(map(str, sched.kind_at(s))) for s in range(hosts)]


def test_things_to_try_under_a_window_are_the_schedules(data: dict) -> None:
    """The page's claims: at 2 tokens contiguous and striped run two steps, zigzag jumps six
    hosts from its second step to its last; at 8 tokens contiguous runs three."""
    rings, tokens = data["windows"]["rings"], data["windows"]["tokens"]
    two, eight = tokens.index(2), tokens.index(8)
    steps = lambda layout, w: rings[ex.key(8, layout, True, "forward")][w]["steps"]
    assert steps("contiguous", two) == steps("striped", two) == [0, 1]
    assert steps("zigzag", two) == [0, 1, 7]
    assert rings[ex.key(8, "zigzag", True, "forward")][two]["hops"][1] == 6
    assert len(steps("contiguous", eight)) == 3
    assert len(steps("striped", eight)) == len(steps("zigzag", eight)) == 8


def test_window_panel_draws_the_skipped_steps_and_the_jumps(tab: Tab, data: dict) -> None:
    got = tab.run(
        """
        choose(8, 'zigzag', 'causal', 'forward');
        const pick = (value) => {
          const sel = $('#rx-window'); sel.value = value;
          sel.dispatchEvent(new Event('change'));
          return {skipped: $$('#rx-window-fig .rx-skipped').length,
                  jumps: $$('#rx-window-fig .rx-jump').map((t) => t.textContent),
                  note: $('#rx-window-note').textContent};
        };
        return {two: pick('1'), none: pick('none')};
        """
    )
    entry = data["windows"]["rings"][ex.key(8, "zigzag", True, "forward")][1]
    assert got["two"]["skipped"] == 8 - len(entry["steps"]) == 5
    assert got["two"]["jumps"] == ["→ +1", "→ +6", "stop"]
    assert "runs 3 of its 8 steps" in got["two"]["note"]
    assert got["none"]["skipped"] == 0 and "No window" in got["none"]["note"]
