// The ring explorer, a timing lab. Everything it shows comes from window.RING_DATA_GZ, which
// ringsim.views.explorer exports at book build time: the library's schedules (kv owners,
// block kinds, payloads), the numerics' running rows (row_max, row_sum, errors) and the event
// timer's timelines for each block size and bandwidth on the sliders, with the thresholds
// from ringsim.timer.cost.overlap_threshold. This script only looks entries up, draws them
// and interpolates between the stored times. No network, no kernel.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const KIND = { 0: "skip", 1: "partial", 2: "full" };
  const KIND_FILL = { full: "#2c7fb8", partial: "#7fcdbb", skip: "#d9d9d9" };
  const IDLE_FILL = "#f9cfc8";
  const MESSAGE_FILL = { kv: "#e6820e", grad: "#8e5ea2" };
  const NOW = "#d7301f";
  // tab10, then six light tab20 tones ordered so that ring neighbours never share a hue
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf", "#ffbb78", "#98df8a", "#f7b6d2", "#dbdb8d", "#c5b0d5",
    "#ff9896"];
  const SECONDS_PER_STEP = 1.5; // playback at 1x: one ring step's share of the run per 1.5 s
  const SPEEDS = [0.25, 0.5, 1, 2, 4];
  const THUMB = 16; // px, the range inputs' thumb width (explorer.css): marks line up with it
  const LABEL_W = 48, LABEL_H = 28; // px, a host's two-line label in the ring ("host 15")

  // ------------------------------------------------------------------------------------------
  // data
  // ------------------------------------------------------------------------------------------

  async function loadData() {
    if (window.RING_DATA) return window.RING_DATA;
    if (!window.RING_DATA_GZ || typeof DecompressionStream === "undefined") return null;
    const bytes = Uint8Array.from(atob(window.RING_DATA_GZ), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    window.RING_DATA = JSON.parse(await new Response(stream).text());
    return window.RING_DATA;
  }

  // a stored row: null (nothing), one number (the same on every host) or one per host
  function row(value, p) {
    if (value === null) return new Array(p).fill(NaN);
    if (typeof value === "number") return new Array(p).fill(value);
    return value;
  }

  // [starts, durations] -> {start, end}, (steps x hosts) in time units
  function intervals(pair, p) {
    if (!pair) return null;
    const start = pair[0].map((r) => row(r, p));
    const end = start.map((r, s) => {
      const d = row(pair[1][s], p);
      return r.map((x, h) => x + d[h]);
    });
    return { start, end };
  }

  function timeline(data, raw, p) {
    return {
      ...raw,
      units: data.lab.time_units,
      compute: intervals(raw.compute, p),
      kv: intervals(raw.kv, p),
      grad: intervals(raw.grad, p),
      holds: intervals(raw.holds, p),
    };
  }

  function colours(p) {
    return PALETTE.slice(0, p);
  }

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function tokens(c) {
    return c >= 1024 ? `${c / 1024}K` : String(c);
  }

  function seconds(x) {
    if (x >= 1) return `${x.toPrecision(3)} s`;
    if (x >= 1e-3) return `${(x * 1e3).toPrecision(3)} ms`;
    return `${(x * 1e6).toPrecision(3)} µs`;
  }

  function gbps(b) {
    return `${b / 1e9} GB/s`;
  }

  function percent(x) {
    return `${Math.round(x * 100)}%`;
  }

  function fromTenths(tenths, floor) {
    if (tenths / 10 <= floor + 0.05) return "0";
    const x = Math.pow(10, tenths / 10);
    return x >= 0.01 ? x.toPrecision(2) : x.toExponential(1).replace("e-", "e−");
  }

  // ------------------------------------------------------------------------------------------
  // what the timeline says at time t (looked up, never recomputed)
  // ------------------------------------------------------------------------------------------

  // per host at t: steps computed, the block it holds (ringsim.views.explorer.holds: from the
  // start of its compute until it has computed and sent the block on; never before the block
  // arrived, never on two hosts at once) and what it does with it; a host that holds nothing
  // waits for its next block, or is done
  function hostStates(ring, tl, p, t) {
    const steps = ring.kinds.length;
    const states = [];
    for (let h = 0; h < p; h++) {
      let done = 0;
      while (done < steps && tl.compute.end[done][h] <= t) done += 1;
      let held = -1;
      for (let s = 0; s < steps; s++) {
        if (tl.holds.start[s][h] <= t && t < tl.holds.end[s][h]) held = s;
      }
      if (held >= 0) {
        const kind = KIND[ring.kinds[held][h]];
        const computing = tl.compute.start[held][h] <= t && t < tl.compute.end[held][h];
        const what = kind === "skip" ? "passes" : computing ? "computes" : "sends";
        states.push({ done, what, kind, step: held, owner: parseInt(ring.owners[held][h], 36) });
      } else if (done < steps) {
        states.push({ done, what: "waits", kind: null, step: done,
          owner: parseInt(ring.owners[done][h], 36) });
      } else {
        states.push({ done, what: "done", kind: null, step: steps - 1, owner: null });
      }
    }
    return states;
  }

  // why host h waits at t for the block of step s: where that block is (looked up)
  function waitingFor(tl, p, h, s, t) {
    if (s === 0) return "its own block";
    const from = (h - 1 + p) % p, a = tl.kv.start[s - 1][from], b = tl.kv.end[s - 1][from];
    if (!(t >= a)) return `host ${from} has not sent it yet`;
    return t < b ? `on the link from host ${from}` : `arriving from host ${from}`;
  }

  // "0-3, 5": host numbers as ranges
  function hostList(hosts) {
    const parts = [];
    for (let i = 0; i < hosts.length; i++) {
      let j = i;
      while (j + 1 < hosts.length && hosts[j + 1] === hosts[j] + 1) j += 1;
      parts.push(j > i + 1 ? `${hosts[i]} to ${hosts[j]}` : j === i + 1 ? `${hosts[i]}, ${hosts[j]}`
        : String(hosts[i]));
      i = j;
    }
    return parts.join(", ");
  }

  // messages on the links at t: {h, step, type, progress in [0, 1)}
  function messages(tl, p, t) {
    const found = [];
    for (const type of ["kv", "grad"]) {
      const iv = tl[type];
      if (!iv) continue;
      for (let s = 0; s < iv.start.length; s++) {
        for (let h = 0; h < p; h++) {
          const a = iv.start[s][h], b = iv.end[s][h];
          if (a <= t && t < b) found.push({ h, step: s, type, progress: (t - a) / (b - a) });
        }
      }
    }
    return found;
  }

  function niceStep(span, count) {
    const raw = span / count, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * mag >= raw) return m * mag;
    return 10 * mag;
  }

  // ------------------------------------------------------------------------------------------
  // the page
  // ------------------------------------------------------------------------------------------

  function init(root, data) {
    const $ = (sel) => root.querySelector(sel);
    const lab = data.lab;
    const hostsSel = $("#rx-hosts"), layoutSel = $("#rx-layout"), maskSel = $("#rx-mask");
    const passSel = $("#rx-pass"), blockIn = $("#rx-block"), bwIn = $("#rx-bw");
    const scrub = $("#rx-scrub"), speedSel = $("#rx-speed"), windowSel = $("#rx-window");
    windowSel.add(new Option("none", "none"));
    data.windows.tokens.forEach((w, i) => {
      const blocks = w / data.tokens_per_host;
      const size = blocks < 1 ? `1/${1 / blocks} block` : `${blocks} block${blocks > 1 ? "s" : ""}`;
      windowSel.add(new Option(`${w} token${w > 1 ? "s" : ""} (${size})`, String(i)));
    });
    windowSel.value = "1";
    for (const p of data.hosts) hostsSel.add(new Option(String(p), String(p)));
    hostsSel.value = "8";
    for (const l of data.layouts) layoutSel.add(new Option(l, l));
    layoutSel.value = data.layouts.includes("zigzag") ? "zigzag" : data.layouts[0];
    for (const p of data.passes) passSel.add(new Option(p, p));
    for (const s of SPEEDS) speedSel.add(new Option(`${s}×`, String(s)));
    speedSel.value = "1";
    blockIn.max = String(lab.block_tokens.length - 1);
    blockIn.value = String(Math.max(0, lab.block_tokens.indexOf(32768)));
    bwIn.max = String(lab.bandwidths.length - 1);
    bwIn.value = String(Math.max(0, lab.bandwidths.indexOf(12.5e9)));
    scrub.max = String(lab.time_units);
    const state = { t: 0, playing: false, last: null, host: 0, frames: 0, cache: new Map(),
      widths: {} };

    function config() {
      return {
        p: Number(hostsSel.value), layout: layoutSel.value, mask: maskSel.value,
        pass: passSel.value, ci: Number(blockIn.value), bi: Number(bwIn.value),
      };
    }
    function current() {
      const c = config();
      const name = `${c.p}/${c.layout}/${c.mask}/${c.pass}`;
      const index = data.timing[name][c.ci][c.bi];
      const cacheKey = `${c.p}/${index}`;
      if (!state.cache.has(cacheKey)) {
        state.cache.set(cacheKey, timeline(data, data.timelines[index], c.p));
      }
      return { c, name, ring: data.rings[name], tl: state.cache.get(cacheKey),
        col: colours(c.p), thresholds: lab.thresholds[c.pass],
        kind: data.threshold_kind[name] };
    }

    // -- the sliders and their threshold marks ----------------------------------------------
    function scale(box, labels, marks, names, stops, active) {
      const out = document.createDocumentFragment();
      const at = (f) => `calc(${THUMB / 2}px + (100% - ${THUMB}px) * ${f})`;
      labels.forEach((text, i) => {
        const span = document.createElement("span");
        span.className = "rx-stop";
        span.textContent = text;
        span.style.left = at(i / (stops - 1));
        out.appendChild(span);
      });
      for (const kind of ["full", "causal"]) {
        const [value, pos] = marks[kind];
        const mark = document.createElement("span");
        mark.className = `rx-mark rx-mark-${kind}` + (kind === active ? " rx-mark-active" : "");
        mark.dataset.kind = kind;
        mark.dataset.value = String(value);
        mark.dataset.position = pos === null ? "" : String(pos);
        if (pos === null) {
          mark.hidden = true;
        } else {
          mark.style.left = at(pos / (stops - 1));
          mark.textContent = names[kind];
          mark.title = kind === "full" ? "a full block's compute hides its transfer here"
            : "a balanced causal ring (zigzag, striped) needs about twice the block";
        }
        out.appendChild(mark);
      }
      box.replaceChildren(out);
    }

    function drawSliders(v) {
      const { c, thresholds } = v;
      const drawn = `${c.pass}/${c.mask}/${c.ci}/${c.bi}/${v.kind}`;
      if (root.dataset.sliders === drawn) return;
      root.dataset.sliders = drawn;
      const active = v.kind;
      const b = lab.bandwidths[c.bi], block = lab.block_tokens[c.ci];
      const name = lab.bandwidth_names[String(b)];
      $("#rx-block-out").textContent = `${tokens(block)} tokens per host`;
      $("#rx-bw-out").textContent = `${gbps(b)}` + (name ? ` (${name})` : "");
      const byB = thresholds.by_bandwidth[c.bi], byC = thresholds.by_block[c.ci];
      scale($("#rx-block-scale"), lab.block_tokens.map(tokens), byB, thresholds.names,
        lab.block_tokens.length, active);
      scale($("#rx-bw-scale"), lab.bandwidths.map((x) => `${x / 1e9}`), byC,
        thresholds.names, lab.bandwidths.length, active);
      const count = (x) => Math.round(x).toLocaleString("en");
      const [speed, where] = byC[active];
      const off = where !== null ? ""
        : ` A block of ${tokens(block)} is ${thresholds.names[active]}` +
        ` at ${(speed / 1e9).toPrecision(3)} GB/s, off the bandwidth slider.`;
      $("#rx-thresholds").textContent =
        `At ${gbps(b)}, ${thresholds.names.full} = ${count(byB.full[0])} tokens and ` +
        `${thresholds.names.causal} = ${count(byB.causal[0])} tokens (overlap_threshold, ` +
        `latency left out); the marks on the bandwidth slider are where c = ${tokens(block)} ` +
        `would be exactly that.${off}`;
    }

    // -- the ring ----------------------------------------------------------------------------
    function drawRing(svg, v, states, flying) {
      const { c, ring, col } = v, p = c.p;
      const out = document.createDocumentFragment(); // one DOM change per picture
      const W = Math.max(260, state.widths.ring || 360), H = Math.min(W, 460);
      svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
      svg.setAttribute("height", String(H));
      const r = p <= 6 ? 24 : p <= 10 ? 19 : 14;
      // each label is a box of about LABEL_W x LABEL_H px set just outside its host, along the
      // host's direction from the centre, so that neighbouring labels never meet
      const R = Math.min(W / 2 - r - 10 - LABEL_W, H / 2 - r - 10 - LABEL_H);
      const cx = W / 2, cy = H / 2;
      const pos = (h, extra = 0) => {
        const a = Math.PI / 2 - (2 * Math.PI * h) / p;
        return [cx + (R + extra) * Math.cos(a), cy - (R + extra) * Math.sin(a), a];
      };
      const heads = col.map((colour, i) => `<marker id="rx-head-${i}" viewBox="0 0 10 10" ` +
        `refX="8" refY="5" markerWidth="5" markerHeight="5" orient="auto">` +
        `<path d="M0,0 L10,5 L0,10 z" fill="${colour}"/></marker>`).join("");
      el("defs", {}, out).innerHTML =
        '<pattern id="rx-hatch" width="5" height="5" patternUnits="userSpaceOnUse" ' +
        'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="5" stroke="black" ' +
        'stroke-width="1.2"/></pattern>' + heads;
      // the hop from h to h + 1: a quadratic curve [start, control, end]
      const hop = (h) => {
        const [x1, y1] = pos(h), [x2, y2] = pos((h + 1) % p);
        const len = Math.hypot(x2 - x1, y2 - y1), ux = (x2 - x1) / len, uy = (y2 - y1) / len;
        const gap = r + 3;
        const sx = x1 + ux * gap, sy = y1 + uy * gap, ex = x2 - ux * gap, ey = y2 - uy * gap;
        // bulge outwards: (uy, -ux) points away from the centre for a clockwise hop
        const bulge = (p === 2 ? 0.3 : 0.12) * len;
        const qx = (sx + ex) / 2 + uy * bulge, qy = (sy + ey) / 2 - ux * bulge;
        return [[sx, sy], [qx, qy], [ex, ey]];
      };
      const arc = (h) => {
        const [[sx, sy], [qx, qy], [ex, ey]] = hop(h);
        return `M${sx},${sy} Q${qx},${qy} ${ex},${ey}`;
      };
      // a point along the hop, a share f of the way (interpolation only)
      const along = (h, f) => {
        const [a, q, b] = hop(h), g = 1 - f;
        return [0, 1].map((i) => g * g * a[i] + 2 * g * f * q[i] + f * f * b[i]);
      };
      for (let h = 0; h < p; h++) {
        el("path", { d: arc(h), fill: "none", stroke: "#ccc", "stroke-width": 1, class: "rx-link" },
          out);
      }
      for (const m of flying) {
        const owner = parseInt(ring.owners[m.step][m.h], 36);
        el("path", { d: arc(m.h), fill: "none", stroke: col[owner],
          "stroke-width": 2.5, "marker-end": `url(#rx-head-${owner})`, class: "rx-msg",
          "data-type": m.type, "data-host": m.h, "data-step": m.step }, out);
        const [px, py] = along(m.h, m.progress);
        el("circle", { cx: px, cy: py, r: 4.5, fill: MESSAGE_FILL[m.type], stroke: "white",
          "stroke-width": 1.5, class: "rx-packet" }, out);
      }
      for (let h = 0; h < p; h++) {
        const [x, y, a] = pos(h);
        const st = states[h];
        const owner = st.owner;
        const g = el("g", { class: "rx-host", "data-host": h, tabindex: 0, role: "button",
          "aria-label": `host ${h}: ${st.what}; inspect it` }, out);
        if (h === state.host) {
          el("circle", { cx: x, cy: y, r: r + 5, fill: "none", stroke: "#222",
            "stroke-width": 1.5, "stroke-dasharray": "3 2", class: "rx-selected" }, g);
        }
        el("circle", { cx: x, cy: y, r, fill: "white", stroke: col[h], "stroke-width": 3.5 }, g);
        const b = r * 1.15;
        const box = { x: x - b / 2, y: y - b / 2, width: b, height: b };
        if (st.what === "computes" || st.what === "sends" || st.what === "passes") {
          const faded = st.what !== "computes";
          el("rect", { ...box, fill: col[owner], "fill-opacity": faded ? 0.3 : 1,
            stroke: faded ? "grey" : "black", class: "rx-held", "data-owner": owner,
            "data-state": st.what, "data-step": st.step, "data-kind": st.kind }, g);
          if (st.what === "computes" && st.kind === "partial") {
            el("rect", { ...box, fill: "url(#rx-hatch)" }, g);
          }
          el("text", { x, y: y + 4, "text-anchor": "middle", class: "rx-kv" }, g,
            p <= 10 ? `kv${owner}` : String(owner));
        } else {  // nothing held: an empty slot, waiting for a block still elsewhere, or done
          el("rect", { ...box, fill: "none", stroke: "#999", "stroke-dasharray": "3 2",
            class: "rx-slot", "data-state": st.what,
            "data-awaits": st.what === "waits" ? owner : "" }, g);
        }
        const cos = Math.cos(a), sin = Math.sin(a);
        const [lx, ly] = pos(h, r + 6 + (LABEL_W * Math.abs(cos) + LABEL_H * Math.abs(sin)) / 2);
        const t = el("text", { x: lx, y: ly - 2, "text-anchor": "middle", class: "rx-label" }, g);
        el("tspan", { x: lx }, t, `host ${h}`);
        const doing = st.what === "computes" ? st.kind : st.what;
        el("tspan", { x: lx, dy: "1.15em", class: `rx-kind rx-kind-${doing}` }, t, doing);
      }
      svg.replaceChildren(out);
    }

    // -- the lanes ----------------------------------------------------------------------------
    // the lanes depend on the run, not on the moment: redrawn when the run, the selected host
    // or the width changes; between those only the playhead moves
    function drawLanes(svg, v, t) {
      const { c, tl } = v;
      const W = Math.max(280, state.widths.lanes || 500);
      const x0 = 60, x1 = W - 14, w = x1 - x0;
      const drawn = `${v.name}/${c.ci}/${c.bi}/${state.host}/${W}`;
      if (svg.dataset.drawn !== drawn) drawRun(svg, v, W, x0, x1, w);
      svg.dataset.drawn = drawn;
      const px = x0 + (t / tl.units) * w;
      const head = svg.querySelector(".rx-playhead");
      head.setAttribute("x1", px);
      head.setAttribute("x2", px);
    }

    function drawRun(svg, v, W, x0, x1, w) {
      const { c, ring, tl, col } = v, p = c.p, U = tl.units;
      const out = document.createDocumentFragment(); // one DOM change per picture
      const top = 16;
      const laneH = Math.max(17, Math.min(30, 240 / p));
      const bottom = top + p * laneH, H = bottom + 46;
      svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
      svg.setAttribute("height", String(H));
      const X = (u) => x0 + (u / U) * w;
      const sec = (u) => (u / U) * tl.span;
      const steps = ring.kinds.length;
      for (let h = 0; h < p; h++) {
        const y = top + h * laneH;
        const lane = el("g", { class: "rx-lane", "data-host": h }, out);
        el("rect", { x: 0, y, width: W, height: laneH, fill: h === state.host ? "#eef3fb" : "none",
          class: "rx-lane-bg" }, lane);
        const tag = el("g", { class: "rx-host-tag", "data-host": h, tabindex: 0, role: "button",
          "aria-label": `host ${h}: inspect it` }, lane);
        el("circle", { cx: 8, cy: y + laneH / 2, r: 5, fill: col[h] }, tag);
        el("text", { x: 17, y: y + laneH / 2 + 4, class: "rx-lane-label" }, tag, `host ${h}`);
        const cTop = y + 2, cH = laneH * 0.56, mTop = y + laneH * 0.64, mH = laneH * 0.28;
        el("rect", { x: x0, y: cTop, width: w, height: cH, fill: "#fff", stroke: "#ddd",
          "stroke-width": 0.5 }, lane);
        let free = 0;
        for (let s = 0; s < steps; s++) {
          const a = tl.compute.start[s][h], b = tl.compute.end[s][h];
          if (!(b > a)) continue;
          if (a > free) {
            el("rect", { x: X(free), y: cTop, width: X(a) - X(free), height: cH, fill: IDLE_FILL,
              class: "rx-idle", "data-start": sec(free), "data-end": sec(a) }, lane);
          }
          const kind = KIND[ring.kinds[s][h]];
          el("rect", { x: X(a), y: cTop, width: Math.max(X(b) - X(a), 0.5), height: cH,
            fill: KIND_FILL[kind], stroke: "white", "stroke-width": 0.6, class: "rx-busy",
            "data-step": s, "data-kind": kind, "data-start": sec(a), "data-end": sec(b) }, lane);
          free = b;
        }
        if (free < U) {
          el("rect", { x: X(free), y: cTop, width: X(U) - X(free), height: cH, fill: IDLE_FILL,
            class: "rx-idle", "data-start": sec(free), "data-end": sec(U) }, lane);
        }
        for (const type of ["kv", "grad"]) {
          const iv = tl[type];
          if (!iv) continue;
          for (let s = 0; s < iv.start.length; s++) {
            const a = iv.start[s][h], b = iv.end[s][h];
            if (!(b > a)) continue;
            el("rect", { x: X(a), y: mTop, width: Math.max(X(b) - X(a), 0.5), height: mH,
              fill: MESSAGE_FILL[type], class: `rx-send rx-send-${type}`, "data-step": s,
              "data-start": sec(a), "data-end": sec(b) }, lane);
          }
        }
      }
      // time axis, the busiest host's compute and the exposed rest, the playhead
      el("line", { x1: x0, x2: x1, y1: bottom + 2, y2: bottom + 2, stroke: "#555" }, out);
      const tick = niceStep(tl.span, Math.max(2, Math.floor(w / 80)));
      for (let x = 0; x <= tl.span * 1.0001; x += tick) {
        const px = X((x / tl.span) * U);
        el("line", { x1: px, x2: px, y1: bottom + 2, y2: bottom + 6, stroke: "#555" }, out);
        const anchor = px > W - 30 ? "end" : "middle";
        el("text", { x: px, y: bottom + 18, "text-anchor": anchor, class: "rx-tick" }, out,
          x === 0 ? "0" : seconds(x));
      }
      const cx = X((tl.compute_s / tl.span) * U);
      el("line", { x1: cx, x2: cx, y1: top - 6, y2: bottom + 2, stroke: "#333",
        "stroke-dasharray": "4 3", class: "rx-compute-line" }, out);
      el("text", { x: x1, y: H - 8, "text-anchor": "end", class: "rx-axis rx-exposed" }, out,
        tl.exposed >= 0.005 ? `${percent(tl.exposed)} exposed` : "nothing exposed");
      el("line", { x1: x0, x2: x0, y1: top - 8, y2: bottom + 2, stroke: NOW, "stroke-width": 2,
        class: "rx-playhead" }, out);
      svg.replaceChildren(out);
    }

    // -- the (query block, kv block) pairs done so far ---------------------------------------
    function drawGrid(svg, v, states) {
      const { c, ring } = v, p = c.p;
      const out = document.createDocumentFragment(); // one DOM change per picture
      const W = Math.max(220, state.widths.grid || 300);
      const size = Math.min(W - 50, 300), cell = size / p, x0 = 40, y0 = 8;
      const H = y0 + size + 40;
      svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
      svg.setAttribute("height", String(H));
      for (let q = 0; q < p; q++) {
        const label = p <= 10 || q % 2 === 0 ? String(q) : "";
        el("text", { x: x0 - 6, y: y0 + (q + 0.5) * cell + 4, "text-anchor": "end",
          class: "rx-tick" }, out, label);
        el("text", { x: x0 + (q + 0.5) * cell, y: y0 + size + 14, "text-anchor": "middle",
          class: "rx-tick" }, out, label);
      }
      el("text", { x: x0 + size / 2, y: y0 + size + 32, "text-anchor": "middle",
        class: "rx-axis" }, out, "kv block (owner)");
      el("text", { x: 11, y: y0 + size / 2, "text-anchor": "middle", class: "rx-axis",
        transform: `rotate(-90 11 ${y0 + size / 2})` }, out, "query block (host)");
      const done = {};
      for (let h = 0; h < p; h++) {
        for (let s = 0; s < states[h].done; s++) {
          done[`${h},${parseInt(ring.owners[s][h], 36)}`] = KIND[ring.kinds[s][h]];
        }
      }
      for (let q = 0; q < p; q++) {
        for (let k = 0; k < p; k++) {
          const kind = done[`${q},${k}`];
          el("rect", { x: x0 + k * cell, y: y0 + q * cell, width: cell, height: cell,
            fill: kind ? KIND_FILL[kind] : "white", stroke: "#bbb", "stroke-width": 0.5,
            class: kind ? "rx-cell rx-done" : "rx-cell" }, out);
        }
      }
      for (let h = 0; h < p; h++) {
        if (states[h].what !== "computes") continue;
        const k = parseInt(ring.owners[states[h].step][h], 36);
        el("rect", { x: x0 + k * cell + 1, y: y0 + h * cell + 1, width: cell - 2,
          height: cell - 2, fill: "none", stroke: NOW, "stroke-width": 2.5,
          class: "rx-now" }, out);
      }
      svg.replaceChildren(out);
    }

    // -- the ring under a sliding window ---------------------------------------------------------
    function drawWindow(svg, note, v) {
      const { c, ring } = v, p = c.p;
      const out = document.createDocumentFragment();
      const W = Math.max(260, state.widths.window || 600);
      if (windowSel.value === "none") {
        svg.setAttribute("viewBox", `0 0 ${W} 1`);
        svg.setAttribute("height", "1");
        svg.replaceChildren(out);
        note.textContent = "No window: every step is a ring step and every block moves one host.";
        return;
      }
      const wi = Number(windowSel.value), tokens = data.windows.tokens[wi];
      const win = data.windows.rings[v.name][wi];
      const x0 = 52, right = 92, cell = Math.min(28, (W - x0 - right) / p), row = 18, y0 = 16;
      const H = y0 + p * row + 8;
      svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
      svg.setAttribute("height", String(H));
      for (let h = 0; h < p; h++) {
        el("text", { x: x0 + (h + 0.5) * cell, y: 11, "text-anchor": "middle",
          class: "rx-tick" }, out, p <= 10 || h % 2 === 0 ? String(h) : "");
      }
      for (let s = 0; s < p; s++) {
        const y = y0 + s * row, at = win.steps.indexOf(s);
        el("text", { x: x0 - 6, y: y + row * 0.7, "text-anchor": "end", class: "rx-tick" },
          out, `step ${s}`);
        if (at < 0) {
          el("rect", { x: x0, y: y + 2, width: p * cell, height: row - 4, fill: "#f2f2f2",
            stroke: "#ccc", "stroke-dasharray": "3 2", class: "rx-skipped" }, out);
          el("text", { x: x0 + (p * cell) / 2, y: y + row * 0.7, "text-anchor": "middle",
            class: "rx-tick" }, out, "skipped: no host computes");
          continue;
        }
        for (let h = 0; h < p; h++) {
          const kind = KIND[win.kinds[s][h]];
          el("rect", { x: x0 + h * cell, y: y + 2, width: cell, height: row - 4,
            fill: KIND_FILL[kind], stroke: "#fff", class: `rx-cell rx-${kind}` }, out);
          if (cell >= 16) {
            el("text", { x: x0 + (h + 0.5) * cell, y: y + row * 0.7, "text-anchor": "middle",
              class: "rx-tick", fill: kind === "full" ? "#fff" : "#333" }, out,
              ring.owners[s][h]);
          }
        }
        const hops = win.hops[at], home = win.sends[at] === "dk,dv";
        const label = hops === 0 ? "stop" : `${home ? "home" : "→"} +${hops}`;
        el("text", { x: x0 + p * cell + 8, y: y + row * 0.7, class: "rx-tick rx-jump" }, out,
          label);
      }
      svg.replaceChildren(out);
      const jumps = win.hops.filter((h) => h > 1).length;
      note.textContent = `Window of ${tokens} token${tokens > 1 ? "s" : ""}: the ring runs ` +
        `${win.steps.length} of its ${p} steps; ${win.hops.filter((h) => h > 0).length} ` +
        `message${win.hops.filter((h) => h > 0).length === 1 ? "" : "s"} per host, ` +
        `${jumps} of them jump${jumps === 1 ? "s" : ""} over hosts. Each cell names the ` +
        "owner of the block the host holds.";
    }

    // -- each host's running error ------------------------------------------------------------
    function drawErrors(svg, v, states) {
      const { c, ring, col } = v, p = c.p;
      const out = document.createDocumentFragment(); // one DOM change per picture
      const W = Math.max(280, state.widths.errors || 560), H = 210;
      svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
      svg.setAttribute("height", String(H));
      const x0 = 50, y0 = 10, w = W - x0 - 14, hgt = H - 54;
      const lo = data.error_floor_log10, hi = 1, steps = ring.kinds.length;
      const X = (s) => x0 + (steps === 1 ? 0 : (s * w) / (steps - 1));
      const Y = (tenths) => y0 + ((hi - Math.max(tenths / 10, lo)) * hgt) / (hi - lo);
      for (let d = -16; d <= 0; d += 4) {
        el("line", { x1: x0, x2: x0 + w, y1: Y(d * 10), y2: Y(d * 10), class: "rx-gridline" },
          out);
        el("text", { x: x0 - 6, y: Y(d * 10) + 4, "text-anchor": "end", class: "rx-tick" },
          out, `1e${d}`);
      }
      for (let s = 0; s < steps; s++) {
        el("text", { x: X(s), y: y0 + hgt + 16, "text-anchor": "middle", class: "rx-tick" },
          out, steps <= 10 || s % 2 === 0 ? String(s) : "");
      }
      el("text", { x: x0 + w / 2, y: y0 + hgt + 34, "text-anchor": "middle", class: "rx-axis" },
        out, "after step");
      for (let h = 0; h < p; h++) {
        const n = states[h].done, pts = [];
        for (let s = 0; s < n; s++) pts.push(`${X(s)},${Y(ring.errors[s][h])}`);
        const chosen = h === state.host;
        el("polyline", { points: pts.join(" "), fill: "none", stroke: col[h],
          "stroke-width": chosen ? 3.5 : 1.6, "stroke-opacity": chosen ? 1 : 0.75,
          class: "rx-line", "data-host": h }, out);
        for (let s = 0; s < n; s++) {
          el("circle", { cx: X(s), cy: Y(ring.errors[s][h]), r: chosen ? 3.5 : 2.2,
            fill: col[h] }, out);
        }
      }
      svg.replaceChildren(out);
    }

    function drawLegend(p, col) {
      const box = $("#rx-hosts-key");
      if (box.children.length === p) return;
      const out = document.createDocumentFragment();
      for (let h = 0; h < p; h++) {
        const item = document.createElement("span");
        item.className = "rx-key-item";
        item.innerHTML = `<i style="background:${col[h]}"></i>host ${h}`;
        out.appendChild(item);
      }
      box.replaceChildren(out);
    }

    // -- ring, all-gather, Ulysses and a two-node hybrid, timed side by side -----------------
    // looked up in data.strategies (ringsim.views.explorer.strategy_entry): one lane per
    // strategy, the host that finishes last; redrawn when the run or the width changes
    function drawStrategies(svg, v, t) {
      const { c, tl } = v;
      const index = data.strategies.index[`${c.p}/${c.mask}/${c.pass}`];
      const note = $("#rx-strategies-note");
      const W = Math.max(280, state.widths.strategies || 560);
      if (!index) {
        const ps = Object.keys(data.strategies.index).map((k) => Number(k.split("/")[0]));
        note.textContent = `The strategies are timed for P = ${[...new Set(ps)].join(", ")}: ` +
          "choose one of them to compare.";
        svg.replaceChildren();
        svg.setAttribute("height", "0");
        svg.dataset.drawn = "";
        return;
      }
      const entry = data.strategies.entries[index[c.ci][c.bi]];
      const x0 = 150, x1 = W - 60, w = x1 - x0, laneH = 30, top = 8;
      const X = (u) => x0 + (u / lab.time_units) * w;
      const drawn = `${c.p}/${c.mask}/${c.pass}/${c.ci}/${c.bi}/${W}`;
      if (svg.dataset.drawn !== drawn) {
        const out = document.createDocumentFragment();
        const H = top + entry.lanes.length * laneH + 34;
        svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
        svg.setAttribute("height", String(H));
        entry.lanes.forEach((lane, i) => {
          const y = top + i * laneH;
          const g = el("g", { class: "rx-strategy", "data-label": lane.label,
            "data-makespan": lane.makespan }, out);
          el("text", { x: x0 - 6, y: y + laneH / 2 + 4, "text-anchor": "end",
            class: "rx-lane-label" }, g, lane.label.replace(", two nodes", " (2 nodes)"));
          for (const [a, b] of lane.compute) {
            el("rect", { x: X(a), y: y + 3, width: Math.max(X(b) - X(a), 0.5),
              height: laneH * 0.5, fill: KIND_FILL.full, class: "rx-strategy-compute",
              "data-start": a, "data-end": b }, g);
          }
          for (const [a, b] of lane.comm) {
            el("rect", { x: X(a), y: y + 3 + laneH * 0.55, width: Math.max(X(b) - X(a), 0.5),
              height: laneH * 0.25, fill: MESSAGE_FILL.kv, class: "rx-strategy-comm",
              "data-start": a, "data-end": b }, g);
          }
          const end = X((lane.makespan / entry.span) * lab.time_units);
          el("text", { x: end + 4, y: y + laneH / 2 + 4, class: "rx-tick" }, g,
            seconds(lane.makespan));
        });
        const bottom = top + entry.lanes.length * laneH;
        el("line", { x1: x0, x2: x1, y1: bottom, y2: bottom, stroke: "#555" }, out);
        const tick = niceStep(entry.span, Math.max(2, Math.floor(w / 90)));
        for (let x = 0; x <= entry.span * 1.0001; x += tick) {
          const px = x0 + (x / entry.span) * w;
          el("line", { x1: px, x2: px, y1: bottom, y2: bottom + 4, stroke: "#555" }, out);
          el("text", { x: px, y: bottom + 16, "text-anchor": "middle", class: "rx-tick" }, out,
            x === 0 ? "0" : seconds(x));
        }
        el("line", { x1: x0, x2: x0, y1: top - 4, y2: bottom, stroke: NOW, "stroke-width": 2,
          class: "rx-strategy-now" }, out);
        svg.replaceChildren(out);
        svg.dataset.drawn = drawn;
        const fastest = entry.lanes.reduce((a, b) => (b.makespan < a.makespan ? b : a));
        note.textContent = `The same attention (P = ${c.p}, zigzag, c = ` +
          `${tokens(lab.block_tokens[c.ci])}, B = ${gbps(lab.bandwidths[c.bi])}) timed four ` +
          `ways; the fastest is ${fastest.label} (${seconds(fastest.makespan)}). The red ` +
          "line is the ring's clock above.";
      }
      const now = ((t / tl.units) * tl.span) / entry.span;  // the ring's moment, in seconds
      const px = x0 + Math.min(1, now) * w;
      const head = svg.querySelector(".rx-strategy-now");
      head.setAttribute("x1", px);
      head.setAttribute("x2", px);
    }

    // -- the host inspector --------------------------------------------------------------------
    function drawInspector(box, v, states) {
      const { c, ring } = v, h = state.host, st = states[h], n = st.done;
      const forward = c.pass === "forward";
      const merged = [];
      for (let s = 0; s < n; s++) {
        const kind = KIND[ring.kinds[s][h]];
        merged.push(`kv${parseInt(ring.owners[s][h], 36)}${kind === "skip" ? " (skipped)" : ""}`);
      }
      const doing = st.what === "computes" ? `computing with kv${st.owner} (${st.kind})`
        : st.what === "sends" ? `done with kv${st.owner}, sending it on`
        : st.what === "passes" ? `passing kv${st.owner} on (every pair masked: skipped)`
        : st.what === "waits" ? `waiting for kv${st.owner}, its step-${st.step} block: ` +
          waitingFor(v.tl, c.p, h, st.step, state.t)
        : "done";
      const head = document.createElement("p");
      head.className = "rx-inspect-head";
      head.textContent = `host ${h}: ${n} of ${ring.kinds.length} steps done` +
        (merged.length ? ` (${merged.join(", ")})` : "") + `; now ${doing}.`;
      const table = document.createElement("table");
      table.className = "rx-inspect-table";
      const cols = forward ? ["token", "running max", "running sum", "error of out"]
        : ["token", "error of dq"];
      table.innerHTML = `<thead><tr>${cols.map((x) => `<th>${x}</th>`).join("")}</tr></thead>`;
      const body = document.createElement("tbody");
      ring.positions[h].forEach((token, i) => {
        const tr = document.createElement("tr");
        const cells = [String(token)];
        if (n === 0) {
          if (forward) cells.push("−∞", "0");
          cells.push("—");
        } else {
          const s = n - 1;
          if (forward) {
            const m = ring.row_max[s][h][i];
            const l = ring.row_sum[s][h][i];
            cells.push(m === null ? "−∞" : m.toPrecision(4), l.toPrecision(4));
          }
          cells.push(fromTenths(ring.row_errors[s][h][i], data.error_floor_log10));
        }
        tr.innerHTML = cells.map((x) => `<td>${x}</td>`).join("");
        body.appendChild(tr);
      });
      table.appendChild(body);
      const note = document.createElement("p");
      note.className = "rx-inspect-note";
      note.textContent = forward
        ? "The running max m and sum ℓ of exp(score − m) of each of its query rows after the " +
          "last block it merged; the error is of acc / ℓ against exact attention (a small " +
          "random problem, head dim 8, float64)."
        : "The backward reads row_max and row_sum (as lse) from the forward; dq stays home " +
          "and grows one block at a time; the error is against the exact gradient.";
      box.replaceChildren(head, table, note);
      box.dataset.host = String(h);
      box.dataset.done = String(n);
    }

    // -- the status: counted from the schedule's kinds and the timeline at t -----------------
    function describe(v, states, flying, t) {
      const { c, ring, tl } = v, p = c.p, steps = ring.kinds.length;
      const ends = tl.step_ends;
      let k = 0;
      while (k < steps && ends[k] <= t) k += 1;
      const atEnd = k > 0 && ends[k - 1] === t;
      const s = atEnd ? k - 1 : Math.min(k, steps - 1);
      const counts = { full: 0, partial: 0, skip: 0 };
      for (let h = 0; h < p; h++) counts[KIND[ring.kinds[s][h]]] += 1;
      const n = (count, one, many) => `${count} ${count === 1 ? one : many}`;
      const parts = [];
      if (counts.full) {
        parts.push(`${n(counts.full, "host computes", "hosts compute")} a full block`);
      }
      if (counts.partial) {
        parts.push(`${n(counts.partial, "host computes", "hosts compute")} a partial block ` +
          "(the mask cuts through it)");
      }
      if (counts.skip) {
        parts.push(`${n(counts.skip, "host skips", "hosts skip")} a block the mask hides`);
      }
      const sends = ring.sends[s];
      const what = !sends ? "nothing is sent after it"
        : sends === "dk,dv" ? "then each host sends dk, dv one hop home to the block's owner"
        : `then each host sends ${sends.replace(/,/g, ", ")} to the next host`;
      const when = t === 0 ? "starts" : atEnd ? (k === steps ? "done: the run is over" : "done")
        : "under way";
      // who does what now, host by host: computing; waiting for the next block (where that
      // block is), some of them still passing their last one on; done
      const by = (test) => states.map((x, h) => (test(x) ? h : -1)).filter((h) => h >= 0);
      const computing = by((x) => x.what === "computes");
      const waiting = by((x) => x.what !== "computes" && x.what !== "done" && x.done < steps);
      const sending = by((x) => x.what === "sends" || x.what === "passes");
      const finished = by((x) => x.what === "done" || (x.what !== "computes" && x.done >= steps));
      const now = [];
      if (computing.length) now.push(`${n(computing.length, "host", "hosts")} computing ` +
        `(${hostList(computing)})`);
      if (waiting.length) {
        const why = {};
        for (const h of waiting) {
          const reason = waitingFor(tl, p, h, states[h].done, t)
            .replace(/host \d+/, "the host before it");
          (why[reason] = why[reason] || []).push(h);
        }
        const reasons = Object.entries(why).map(([r, hs]) => `${hostList(hs)}: ${r}`);
        now.push(`${n(waiting.length, "host waits", "hosts wait")} for the next block ` +
          `(${reasons.join("; ")})` + (sending.length
          ? `, ${hostList(sending)} still passing the last one on` : ""));
      }
      if (finished.length) now.push(`${n(finished.length, "host", "hosts")} finished ` +
        `(${hostList(finished)})`);
      const exact = states.filter((x, h) => x.done > 0 && ring.errors[x.done - 1][h] <= -100)
        .length;
      $(".rx-status").textContent =
        `Step ${s + 1} of ${steps} (s = ${s}) ${when}. The schedule: ${parts.join(", ")}; ` +
        `${what}. Now: ${now.join("; ")}; ${n(flying.length, "message", "messages")} on the ` +
        `links; ${exact} of ${p} hosts exact so far (error below 1e-10).`;
      root.dataset.step = String(s);
      root.dataset.stepsDone = String(k);
      root.dataset.computing = String(computing.length);
      root.dataset.waiting = String(waiting.length);
      root.dataset.kinds = `${counts.full},${counts.partial},${counts.skip}`;
      const block = lab.block_tokens[c.ci], b = lab.bandwidths[c.bi];
      const backward = c.pass === "backward";
      const link = backward
        ? `its k, v take ${seconds(tl.step_kv_s)} and its dk, dv ${seconds(tl.step_grad_s)} on ` +
          "the link"
        : `its k, v take ${seconds(tl.step_kv_s)} on the link`;
      const kind = v.kind, mark = v.thresholds.names[kind];
      const need = v.thresholds.by_bandwidth[c.bi][kind][0];
      const why = kind === "causal"
        ? "a balanced causal ring computes about half a block per step"
        : c.mask === "causal" ? "its busiest host computes whole blocks"
        : "every step computes a whole block";
      $(".rx-clock").textContent =
        `t = ${seconds((t / tl.units) * tl.span)} of ${seconds(tl.span)}. ` +
        `With c = ${tokens(block)} and B = ${gbps(b)} a step's compute takes up to ` +
        `${seconds(tl.step_compute_s)} and ${link}. This ring needs c ≥ ${mark} = ` +
        `${Math.round(need).toLocaleString("en")} tokens to hide its transfers (${why}): ` +
        `c is ${block >= need ? "above" : "below"} it. The busiest host computes ` +
        `${seconds(tl.compute_s)} of the run: ` +
        (tl.exposed >= 0.005 ? `${percent(tl.exposed)} of it is exposed communication`
          : "the transfers hide behind the compute") +
        `, hosts idle ${percent(tl.idle)} of the time.`;
      root.dataset.threshold = kind;
    }

    function render() {
      const v = current(), t = state.t;
      const states = hostStates(v.ring, v.tl, v.c.p, t);
      const flying = messages(v.tl, v.c.p, t);
      if (state.host >= v.c.p) state.host = 0;
      drawSliders(v);
      drawRing($("#rx-ring"), v, states, flying);
      drawLanes($("#rx-lanes"), v, t);
      drawGrid($("#rx-grid"), v, states);
      drawErrors($("#rx-errors"), v, states);
      drawLegend(v.c.p, v.col);
      drawInspector($("#rx-inspect"), v, states);
      drawStrategies($("#rx-strategies"), v, t);
      drawWindow($("#rx-window-fig"), $("#rx-window-note"), v);
      describe(v, states, flying, t);
      scrub.value = String(Math.round(t));
      root.dataset.t = String(t);
      root.dataset.host = String(state.host);
      root.dataset.playing = state.playing ? "1" : "0";
      root.dataset.speed = speedSel.value;
      root.dataset.rate = String(rate(v));
      state.frames += 1;
      root.dataset.frames = String(state.frames);
      const ends = v.tl.step_ends;
      $("#rx-step").disabled = t >= ends[ends.length - 1];
      $("#rx-back").disabled = t <= 0;
    }

    // time units of the run per second of playback
    function rate(v) {
      return (v.tl.units / (v.ring.kinds.length * SECONDS_PER_STEP)) * Number(speedSel.value);
    }

    // -- playback -------------------------------------------------------------------------------
    // With prefers-reduced-motion, play moves from one step's end to the next (one step per
    // SECONDS_PER_STEP at 1x) instead of sliding the clock: nothing glides across the page.
    const reducedMotion = window.matchMedia
      ? window.matchMedia("(prefers-reduced-motion: reduce)") : { matches: false };
    function frame(now) {
      if (!state.playing) return;
      const v = current(), U = v.tl.units;
      if (reducedMotion.matches) {
        if (state.last === null) state.last = now;
        const wait = (SECONDS_PER_STEP * 1000) / Number(speedSel.value);
        if (now - state.last >= wait) {
          state.last = now;
          const next = v.tl.step_ends.find((e) => e > state.t);
          state.t = next === undefined ? U : next;
          render();
        }
      } else {
        if (state.last !== null) {
          state.t = Math.min(U, state.t + ((now - state.last) / 1000) * rate(v));
        }
        state.last = now;
        render();
      }
      if (state.t >= U) {
        state.t = U;
        stop();
        render();
      }
      if (state.playing) requestAnimationFrame(frame);
    }
    function stop() {
      state.playing = false;
      state.last = null;
      $("#rx-play").textContent = "▶ play";
      root.dataset.playing = "0";
    }
    function play() {
      if (state.playing) {
        stop();
        render();
        return;
      }
      const v = current();
      if (state.t >= v.tl.units) state.t = 0;
      state.playing = true;
      state.last = null;
      $("#rx-play").textContent = "❚❚ pause";
      render();
      requestAnimationFrame(frame);
    }
    function stepTo(direction) {
      stop();
      const ends = current().tl.step_ends, t = state.t;
      if (direction > 0) {
        const next = ends.find((e) => e > t);
        state.t = next === undefined ? ends[ends.length - 1] : next;
      } else {
        const before = ends.filter((e) => e < t);
        state.t = before.length ? before[before.length - 1] : 0;
      }
      render();
    }
    function reset() {
      stop();
      state.t = 0;
      render();
    }
    function select(h) {
      state.host = h;
      render();
    }

    $("#rx-step").addEventListener("click", () => stepTo(1));
    $("#rx-back").addEventListener("click", () => stepTo(-1));
    $("#rx-reset").addEventListener("click", reset);
    $("#rx-play").addEventListener("click", play);
    scrub.addEventListener("input", () => {
      stop();
      state.t = Number(scrub.value);
      render();
    });
    speedSel.addEventListener("change", () => {
      state.last = null;
      render();
    });
    windowSel.addEventListener("change", render);
    for (const sel of [hostsSel, layoutSel, maskSel, passSel]) {
      sel.addEventListener("change", reset);
    }
    // the sliders keep the moment of the run (as a share of it) and the play state
    for (const input of [blockIn, bwIn]) input.addEventListener("input", render);
    root.addEventListener("click", (event) => {
      const target = event.target.closest("[data-host].rx-host, [data-host].rx-host-tag");
      if (target) select(Number(target.dataset.host));
    });
    root.addEventListener("keydown", (event) => {
      const target = event.target.closest("[data-host].rx-host, [data-host].rx-host-tag");
      if (target && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        select(Number(target.dataset.host));
      }
    });
    // keys (not while a menu or a slider has the focus, which use them themselves): space or
    // k play/pause, the arrows (or j, l) a step back and forward, Home (or 0) back to the
    // start, + and - the speed
    document.addEventListener("keydown", (event) => {
      const target = event.target;
      if (event.altKey || event.ctrlKey || event.metaKey) return;
      if (target.closest && target.closest("select, input, textarea")) return;
      if (target !== document.body && !(target.closest && target.closest(".ring-explorer"))) return;
      const key = event.key;
      const speeds = [...speedSel.options].map((o) => o.value);
      const at = speeds.indexOf(speedSel.value);
      if (key === " " || key === "k") {
        if (target.closest && target.closest("button")) return;  // the button's own click
        play();
      } else if (key === "ArrowRight" || key === "l") {
        stepTo(1);
      } else if (key === "ArrowLeft" || key === "j") {
        stepTo(-1);
      } else if (key === "Home" || key === "0") {
        reset();
      } else if (key === "+" || key === "=" || key === "-") {
        const next = Math.max(0, Math.min(speeds.length - 1, at + (key === "-" ? -1 : 1)));
        speedSel.value = speeds[next];
        state.last = null;
        render();
      } else {
        return;
      }
      event.preventDefault();
    });
    const motion = () => { root.dataset.motion = reducedMotion.matches ? "reduced" : "full"; };
    motion();
    if (reducedMotion.addEventListener) reducedMotion.addEventListener("change", motion);
    // the pictures are drawn in CSS pixels (text keeps its size on a phone): their widths are
    // read once here and again when the page's width changes, never inside a render
    function measure() {
      const widths = {};
      for (const name of ["ring", "lanes", "grid", "errors", "strategies", "window-fig"]) {
        widths[name === "window-fig" ? "window" : name] = $(`#rx-${name}`).clientWidth;
      }
      const changed = JSON.stringify(widths) !== JSON.stringify(state.widths);
      state.widths = widths;
      return changed;
    }
    measure();
    new ResizeObserver(() => {
      if (measure()) render();
    }).observe(root);
    reset();
    root.dataset.ready = "1";
  }

  async function start() {
    const roots = document.querySelectorAll(".ring-explorer");
    let data = null;
    try {
      data = await loadData();
    } catch (err) {
      data = null;
    }
    for (const root of roots) {
      if (!data) {
        root.querySelector(".rx-status").textContent =
          "explorer data missing (or this browser cannot inflate it: it needs DecompressionStream)";
        continue;
      }
      init(root, data);
    }
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
