// The ring explorer: draws one ring step at a time from window.RING_DATA, the schedules that
// ringsim.views.explorer exports (kv owners, block kinds, payloads, running errors). No
// network, no kernel: the data arrive as a script beside this one.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const KIND = { 0: "skip", 1: "partial", 2: "full" };
  const KIND_FILL = { full: "#2c7fb8", partial: "#7fcdbb", skip: "#d9d9d9" };
  const NOW = "#d7301f";
  // tab10 up to 10 hosts, then an evenly spaced viridis-like ramp (as the lesson figures)
  const TAB10 = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
    "#7f7f7f", "#bcbd22", "#17becf"];
  const VIRIDIS = ["#440154", "#482475", "#414487", "#355f8d", "#2a788e", "#21918c", "#22a884",
    "#44bf70", "#7ad151", "#bddf26", "#fde725"];

  function colours(p) {
    if (p <= 10) return TAB10.slice(0, p);
    return Array.from({ length: p }, (_, h) => VIRIDIS[Math.round((h * 10) / (p - 1))]);
  }

  function el(name, attrs, parent, text) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    if (parent) parent.appendChild(node);
    return node;
  }

  function init(root) {
    const data = window.RING_DATA;
    if (!data) {
      root.querySelector(".rx-status").textContent = "explorer data missing";
      return;
    }
    const $ = (sel) => root.querySelector(sel);
    const hostsSel = $("#rx-hosts");
    for (const p of data.hosts) hostsSel.add(new Option(String(p), String(p)));
    hostsSel.value = "6";
    const layoutSel = $("#rx-layout");
    for (const l of data.layouts) layoutSel.add(new Option(l, l));
    const passSel = $("#rx-pass");
    for (const p of data.passes) passSel.add(new Option(p, p));
    const state = { step: 0, timer: null, frames: 0 };

    function config() {
      return {
        hosts: Number(hostsSel.value),
        layout: layoutSel.value,
        mask: $("#rx-mask").value,
        pass: passSel.value,
      };
    }
    function entry() {
      const c = config();
      return data.entries[`${c.hosts}/${c.layout}/${c.mask}/${c.pass}`];
    }

    function drawRing(svg, e, p, s, col) {
      svg.replaceChildren();
      const R = 115, cx = 175, cy = 178, r = p <= 8 ? 24 : p <= 12 ? 17 : 13;
      const heads = col.map((c, i) => `<marker id="rx-head-${i}" viewBox="0 0 10 10" ` +
        `refX="8" refY="5" markerWidth="6" markerHeight="6" orient="auto">` +
        `<path d="M0,0 L10,5 L0,10 z" fill="${c}"/></marker>`).join("");
      el("defs", {}, svg).innerHTML =
        '<pattern id="rx-hatch" width="5" height="5" patternUnits="userSpaceOnUse" ' +
        'patternTransform="rotate(45)"><line x1="0" y1="0" x2="0" y2="5" stroke="black" ' +
        'stroke-width="1.2"/></pattern>' + heads;
      const pos = (h) => {
        const a = Math.PI / 2 - (2 * Math.PI * h) / p;
        return [cx + R * Math.cos(a), cy - R * Math.sin(a), a];
      };
      const sends = e.sends[s];
      for (let h = 0; h < p && sends; h++) {
        const [x1, y1] = pos(h), [x2, y2] = pos((h + 1) % p);
        const len = Math.hypot(x2 - x1, y2 - y1), ux = (x2 - x1) / len, uy = (y2 - y1) / len;
        const gap = r + 4;
        const sx = x1 + ux * gap, sy = y1 + uy * gap, ex = x2 - ux * gap, ey = y2 - uy * gap;
        const mx = (sx + ex) / 2, my = (sy + ey) / 2;
        const bx = cx + (mx - cx) * 1.18, by = cy + (my - cy) * 1.18;
        const owner = parseInt(e.owners[s][h], 36);
        el("path", {
          d: `M${sx},${sy} Q${bx},${by} ${ex},${ey}`, fill: "none", stroke: col[owner],
          "stroke-width": 2.2, "marker-end": `url(#rx-head-${owner})`, class: "rx-msg",
        }, svg);
      }
      for (let h = 0; h < p; h++) {
        const [x, y, a] = pos(h);
        const owner = parseInt(e.owners[s][h], 36);
        const kind = KIND[e.kinds[s][h]];
        el("circle", { cx: x, cy: y, r, fill: "white", stroke: col[h], "stroke-width": 3 }, svg);
        const b = r * 1.1;
        const box = { x: x - b / 2, y: y - b / 2, width: b, height: b, class: "rx-held",
          "data-owner": owner, "data-kind": kind };
        el("rect", { ...box, fill: col[owner], "fill-opacity": kind === "skip" ? 0.25 : 1,
          stroke: kind === "skip" ? "grey" : "black" }, svg);
        if (kind === "partial") el("rect", { ...box, fill: "url(#rx-hatch)", class: "" }, svg);
        el("text", { x, y: y + 4, "text-anchor": "middle", class: "rx-kv" }, svg, `kv${owner}`);
        const lx = cx + (R + r + 22) * Math.cos(a), ly = cy - (R + r + 16) * Math.sin(a);
        const t = el("text", { x: lx, y: ly, "text-anchor": "middle", class: "rx-label" }, svg);
        el("tspan", { x: lx, dy: "-0.2em" }, t, `host ${h}`);
        el("tspan", { x: lx, dy: "1.1em", class: "rx-kind" }, t, kind);
      }
    }

    function drawGrid(svg, e, p, s) {
      svg.replaceChildren();
      const size = 260, cell = size / p, x0 = 40, y0 = 16;
      for (let q = 0; q < p; q++) {
        el("text", { x: x0 - 6, y: y0 + (q + 0.5) * cell + 4, "text-anchor": "end",
          class: "rx-tick" }, svg, p <= 12 || q % 2 === 0 ? q : "");
        el("text", { x: x0 + (q + 0.5) * cell, y: y0 + size + 14, "text-anchor": "middle",
          class: "rx-tick" }, svg, p <= 12 || q % 2 === 0 ? q : "");
      }
      el("text", { x: x0 + size / 2, y: y0 + size + 32, "text-anchor": "middle",
        class: "rx-axis" }, svg, "kv block (owner)");
      el("text", { x: 10, y: y0 + size / 2, "text-anchor": "middle", class: "rx-axis",
        transform: `rotate(-90 10 ${y0 + size / 2})` }, svg, "query block (host)");
      const done = {};
      for (let t = 0; t <= s; t++) {
        for (let h = 0; h < p; h++) done[`${h},${parseInt(e.owners[t][h], 36)}`] =
          KIND[e.kinds[t][h]];
      }
      for (let q = 0; q < p; q++) {
        for (let k = 0; k < p; k++) {
          const kind = done[`${q},${k}`];
          el("rect", { x: x0 + k * cell, y: y0 + q * cell, width: cell, height: cell,
            fill: kind ? KIND_FILL[kind] : "white", stroke: "#bbb", "stroke-width": 0.5,
            class: kind ? "rx-cell rx-done" : "rx-cell" }, svg);
        }
      }
      for (let h = 0; h < p; h++) {
        const k = parseInt(e.owners[s][h], 36);
        el("rect", { x: x0 + k * cell + 1, y: y0 + h * cell + 1, width: cell - 2,
          height: cell - 2, fill: "none", stroke: NOW, "stroke-width": 2.5,
          class: "rx-now" }, svg);
      }
    }

    function drawErrors(svg, e, p, s, col) {
      svg.replaceChildren();
      const W = 560, H = 200, x0 = 56, y0 = 10, w = W - x0 - 12, hgt = H - 44;
      const lo = data.error_floor_log10, hi = 2;
      const X = (t) => x0 + (p === 1 ? 0 : (t * w) / (p - 1));
      const Y = (tenths) => y0 + ((hi - Math.max(tenths / 10, lo)) * hgt) / (hi - lo);
      for (let d = -16; d <= 0; d += 4) {
        el("line", { x1: x0, x2: x0 + w, y1: Y(d * 10), y2: Y(d * 10), class: "rx-gridline" },
          svg);
        el("text", { x: x0 - 6, y: Y(d * 10) + 4, "text-anchor": "end", class: "rx-tick" },
          svg, `1e${d}`);
      }
      for (let t = 0; t < p; t++) {
        el("text", { x: X(t), y: y0 + hgt + 16, "text-anchor": "middle", class: "rx-tick" },
          svg, p <= 12 || t % 2 === 0 ? t : "");
      }
      el("text", { x: x0 + w / 2, y: H - 4, "text-anchor": "middle", class: "rx-axis" }, svg,
        "step");
      for (let h = 0; h < p; h++) {
        const pts = [];
        for (let t = 0; t <= s; t++) pts.push(`${X(t)},${Y(e.errors[t][h])}`);
        el("polyline", { points: pts.join(" "), fill: "none", stroke: col[h],
          "stroke-width": 1.8, class: "rx-line" }, svg);
        for (let t = 0; t <= s; t++) {
          el("circle", { cx: X(t), cy: Y(e.errors[t][h]), r: 2.5, fill: col[h] }, svg);
        }
      }
    }

    function drawLegend(p, col) {
      const box = $("#rx-hosts-key");
      box.replaceChildren();
      for (let h = 0; h < p; h++) {
        const item = document.createElement("span");
        item.className = "rx-key-item";
        item.innerHTML = `<i style="background:${col[h]}"></i>host ${h}`;
        box.appendChild(item);
      }
    }

    function render() {
      const e = entry(), c = config(), p = c.hosts, s = state.step, col = colours(p);
      drawRing($("#rx-ring"), e, p, s, col);
      drawGrid($("#rx-grid"), e, p, s);
      drawErrors($("#rx-errors"), e, p, s, col);
      drawLegend(p, col);
      const sends = e.sends[s];
      const what = !sends ? "nothing is sent: the run is over"
        : sends === "dk,dv" ? "each host sends dk, dv one hop home to the block's owner"
        : `each host sends ${sends.replace(/,/g, ", ")} to the next host`;
      const exact = e.errors[s].filter((x) => x <= -100).length;
      $(".rx-status").textContent =
        `step ${s} of ${p - 1}: every host computes with the block it holds, then ${what}. ` +
        `${exact} of ${p} hosts already exact (error below 1e-10).`;
      root.dataset.step = String(s);
      root.dataset.steps = String(p);
      state.frames += 1;
      root.dataset.frames = String(state.frames);
      $("#rx-step").disabled = s >= p - 1;
    }

    function stop() {
      if (state.timer) clearInterval(state.timer);
      state.timer = null;
      $("#rx-play").textContent = "play";
    }
    function step() {
      const p = config().hosts;
      if (state.step < p - 1) state.step += 1;
      else stop();
      render();
    }
    function reset() {
      stop();
      state.step = 0;
      render();
    }
    function play() {
      if (state.timer) return stop();
      if (state.step >= config().hosts - 1) state.step = 0;
      $("#rx-play").textContent = "pause";
      render();
      state.timer = setInterval(step, 900);
    }
    $("#rx-step").addEventListener("click", () => { stop(); step(); });
    $("#rx-reset").addEventListener("click", reset);
    $("#rx-play").addEventListener("click", play);
    for (const sel of [hostsSel, layoutSel, $("#rx-mask"), passSel]) {
      sel.addEventListener("change", reset);
    }
    reset();
  }

  function start() {
    for (const root of document.querySelectorAll(".ring-explorer")) init(root);
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
