// Live statistics: running statistics with the service's verdict; the selected one's values per window and
// group as a uPlot chart that moves as partial and final results arrive over SSE. Operators start and stop.
// A statistic grouped by lane (groups "<checkpoint>/lane-<n>") is drawn per checkpoint, chosen with a picker: its
// lanes side by side as grouped bars per window (hand-drawn SVG: uPlot draws lines), and over time in the chart.
"use strict";

(() => {
  const { api, t, el, showError, time, number } = Console;
  const topics = Console.page.event_topics;
  const error = document.getElementById("st-error");
  const canCommand = Console.hasRole("operator");
  const PALETTE = ["#1d5fa8", "#c81e1e", "#2f9e44", "#9467bd", "#e8590c", "#17becf", "#8c564b", "#e377c2"];
  const MAX_GROUPS = PALETTE.length;
  const BAR_WINDOWS = 12;  // the newest windows drawn as grouped bars (older ones stay in the time chart)
  const SVG = "http://www.w3.org/2000/svg";
  let stats = [];
  let selected = new URLSearchParams(window.location.search).get("stat");
  let results = new Map();  // "window_start|group" -> result
  let chart = null;
  let chartGroups = "";
  let chartSpan = null;  // the chart's x range, read on every redraw (a chart kept across results must widen)
  let pendingList = null;
  let pendingChart = null;
  let lanes = null;  // a lane statistic's checkpoint -> its lane count on the map (from the results API)
  let laneCheckpoint = null;  // the checkpoint whose lanes are drawn

  /** A grouping's name; "lane" reuses the capture field's name (车道 / Lane). */
  function groupName(groupBy) {
    return groupBy === "lane" ? t("field.lane") : t(`st.group.${groupBy}`);
  }

  function laneName(lane) {
    return `${t("field.lane")} ${lane}`;
  }

  function describe(s) {
    return `${t(`st.measure.${s.measure}`)} · ${groupName(s.group_by)} · ${t("st.every", { s: s.window_s })}`;
  }

  function filterText(filter) {
    const entries = Object.entries(filter || {});
    return entries.length ? entries.map(([k, v]) => `${k} = ${v}`).join(", ") : "—";
  }

  function drawList() {
    const tbody = document.querySelector("#stat-table tbody");
    if (!stats.length) {
      tbody.replaceChildren(el("tr", {}, el("td", { colspan: canCommand ? 7 : 6, class: "muted" }, t("st.none"))));
      return;
    }
    tbody.replaceChildren(...stats.map((s) => el("tr", {
      tabindex: "0", class: s.stat_id === selected ? "selected" : "", dataset: { stat: s.stat_id, status: s.status },
      onclick: () => select(s.stat_id), onkeydown: (e) => { if (e.key === "Enter") select(s.stat_id); },
    },
    el("td", {}, t(`st.measure.${s.measure}`)),
    el("td", {}, groupName(s.group_by)),
    el("td", { class: "num" }, `${s.window_s} ${t("unit.second")}`),
    el("td", { class: "mono" }, filterText(s.filter)),
    el("td", {}, el("span", { class: `state-badge sv-${s.status}` }, t(`sv.status.${s.status}`)),
      s.status === "rejected" ? [el("br"), el("span", { class: "error" }, s.status_reason)] : null),
    el("td", { class: "nowrap" }, s.requested_by, el("br"), el("span", { class: "muted" }, time(s.requested_at))),
    canCommand ? el("td", {}, el("button", {
      type: "button", class: "danger", onclick: (e) => { e.stopPropagation(); stop(s); },
    }, t("st.stop"))) : null)));
  }

  async function refresh() {
    pendingList = null;
    try {
      const { data } = await api("/api/v1/stats");
      stats = data;
      drawList();
      if (selected && !stats.some((s) => s.stat_id === selected)) {
        selected = null;
        document.getElementById("chart-panel").hidden = true;
      }
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  function keep(result) {
    const slot = `${result.window_start}|${result.group}`;
    const old = results.get(slot);
    if (old && old.final && !result.final) return;  // a late partial never replaces the final value
    results.set(slot, result);
  }

  async function select(statId) {
    selected = statId;
    history.replaceState(null, "", `/stats?stat=${encodeURIComponent(statId)}`);
    drawList();
    try {
      const { data } = await api(`/api/v1/stats/${encodeURIComponent(statId)}/results`);
      results = new Map();
      data.results.forEach(keep);
      lanes = data.lanes;
      laneCheckpoint = null;
      document.getElementById("chart-panel").hidden = false;
      document.getElementById("chart-heading").textContent = describe(data.stat);
      drawChart(data.stat);
    } catch (e) {
      showError(error, e);
    }
  }

  /** The lane of a result: from the API's fields, or from its group key when it came over SSE. */
  function placeOf(result) {
    if (result.checkpoint_id !== undefined && result.checkpoint_id !== null) return [result.checkpoint_id, result.lane];
    const match = /^(.+)\/lane-(-?\d+)$/.exec(String(result.group));
    return match ? [match[1], Number(match[2])] : [null, null];
  }

  /** The checkpoints a lane statistic can show (those with results, and the one it is filtered to), and the one
   * drawn: the operator's choice while it is there, else the filtered one, else the busiest. */
  function laneCheckpoints(stat, all) {
    const totals = new Map();
    for (const r of all) {
      const [cp] = placeOf(r);
      if (cp !== null) totals.set(cp, (totals.get(cp) || 0) + (r.count || r.value || 0));
    }
    const filtered = (stat.filter || {}).checkpoint_id;
    if (filtered && !totals.has(filtered)) totals.set(filtered, 0);
    const list = [...totals.keys()].sort();
    if (!list.includes(laneCheckpoint)) {
      laneCheckpoint = filtered || [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a))[0] || null;
    }
    return list;
  }

  function drawPicker(list) {
    const picker = document.getElementById("lane-checkpoint");
    const shown = [...picker.options].map((o) => o.value).join(",");
    if (shown !== list.join(",")) {
      picker.replaceChildren(...list.map((cp) => el("option", { value: cp }, cp)));
    }
    picker.value = laneCheckpoint || "";
  }

  /** The chosen checkpoint's lanes: 1..n from the map, plus any lane a device reported beyond it. */
  function lanesOf(checkpoint, all) {
    const set = new Set();
    const count = lanes && lanes[checkpoint];
    for (let n = 1; n <= (count || 0); n += 1) set.add(n);
    for (const r of all) {
      const [cp, lane] = placeOf(r);
      if (cp === checkpoint) set.add(lane);
    }
    return [...set].sort((a, b) => a - b);
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    return node;
  }

  /** Up to 5 round steps from 0 to at least ``max``. */
  function ticks(max) {
    const raw = max / 4;
    const magnitude = 10 ** Math.floor(Math.log10(raw || 1));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * magnitude).find((m) => m >= raw) || raw;
    const out = [];
    for (let v = 0; v <= max + step / 2 && out.length < 6; v += step) out.push(v);
    if (out[out.length - 1] < max) out.push(out[out.length - 1] + step);
    return out;
  }

  /** The checkpoint's lanes side by side: one group of bars per window (newest BAR_WINDOWS), one bar per lane.
   * A lane without a capture in a window counts 0 (the service publishes only the groups that had one); an
   * average has no value there, so no bar. An open window's bars are paler until its final value arrives. */
  function drawLaneBars(stat, laneList, windows, rows) {
    const container = document.getElementById("lane-bars");
    const byCell = new Map(rows.map((r) => [`${r.window_start}|${placeOf(r)[1]}`, r]));
    const counted = stat.measure !== "avg_speed";
    const cells = windows.map((w) => laneList.map((lane) => {
      const r = byCell.get(`${w}|${lane}`);
      return r ? { value: r.value, final: r.final } : { value: counted ? 0 : null, final: true };
    }));
    const values = cells.flat().map((c) => c.value).filter((v) => v !== null);
    const yTicks = ticks(Math.max(1, ...values));
    const top = yTicks[yTicks.length - 1];
    const width = Math.max(480, container.clientWidth || 900);
    const height = 260;
    const m = { left: 56, right: 12, top: 14, bottom: 34 };
    const plotW = width - m.left - m.right;
    const plotH = height - m.top - m.bottom;
    const y = (v) => m.top + plotH - (v / top) * plotH;
    const slot = plotW / Math.max(1, windows.length);
    const barW = Math.max(2, (slot * 0.8) / Math.max(1, laneList.length));
    const chart = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
      "aria-label": `${laneCheckpoint} · ${describe(stat)}`, class: "lane-bars" });
    for (const v of yTicks) {
      chart.append(svg("line", { x1: m.left, x2: width - m.right, y1: y(v), y2: y(v), stroke: "#d9e2ec" }),
        svg("text", { x: m.left - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#616e7c" },
          number(v)));
    }
    windows.forEach((w, i) => {
      const x0 = m.left + i * slot + slot * 0.1;
      laneList.forEach((lane, j) => {
        const { value, final } = cells[i][j];
        if (value === null) return;
        const h = Math.max(value > 0 ? 1 : 2, y(0) - y(value));  // a lane at 0 shows as a sliver, not a gap
        const bar = svg("rect", { x: x0 + j * barW, y: y(0) - h, width: Math.max(1, barW - 1), height: h,
          fill: PALETTE[j % PALETTE.length], "fill-opacity": final ? 1 : 0.45,
          "data-lane": lane, "data-window": w, "data-value": value, "data-final": final });
        bar.append(svg("title", {}, `${laneName(lane)} · ${time(w)} · ${number(value)}${final ? "" : ` (${t("st.partial")})`}`));
        chart.append(bar);
      });
      const label = time(w).slice(11, stat.window_s >= 60 ? 16 : 19);
      chart.append(svg("text", { x: m.left + (i + 0.5) * slot, y: height - m.bottom + 16, "text-anchor": "middle",
        "font-size": 11, fill: "#616e7c" }, label));
    });
    chart.append(svg("line", { x1: m.left, x2: width - m.right, y1: y(0), y2: y(0), stroke: "#616e7c" }),
      svg("text", { x: 14, y: m.top + plotH / 2, "font-size": 11, fill: "#616e7c",
        transform: `rotate(-90 14 ${m.top + plotH / 2})`, "text-anchor": "middle" }, t(`st.measure.${stat.measure}`)));
    container.replaceChildren(chart);
    document.getElementById("lane-legend").replaceChildren(...laneList.map((lane, j) => el("li", { dataset: { lane } },
      el("span", { class: "swatch", style: `background: ${PALETTE[j % PALETTE.length]}` }), laneName(lane))));
  }

  /** One series per group (the busiest MAX_GROUPS), x = window start; a partial value shows as it grows. For a
   * lane statistic the groups are the chosen checkpoint's lanes, also drawn side by side as bars. */
  function drawChart(stat) {
    const everything = [...results.values()];
    const byLane = stat.group_by === "lane";
    document.getElementById("lane-view").hidden = !byLane;
    let all = everything;
    let groups;
    let label = (g) => g;
    if (byLane) {
      drawPicker(laneCheckpoints(stat, everything));
      all = everything.filter((r) => placeOf(r)[0] === laneCheckpoint);
      const laneList = lanesOf(laneCheckpoint, everything);
      const laneOfGroup = new Map(all.map((r) => [r.group, placeOf(r)[1]]));
      groups = laneList.slice(0, MAX_GROUPS).map((lane) => `${laneCheckpoint}/lane-${lane}`);
      label = (g) => laneName(laneOfGroup.has(g) ? laneOfGroup.get(g) : g.split("/lane-")[1]);
      const windows = [...new Set(everything.map((r) => r.window_start))]
        .sort((a, b) => Date.parse(a) - Date.parse(b)).slice(-BAR_WINDOWS);
      drawLaneBars(stat, laneList, windows, all);
    } else {
      const totals = new Map();
      for (const r of all) totals.set(r.group, (totals.get(r.group) || 0) + (r.value || 0));
      groups = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a)).slice(0, MAX_GROUPS).sort();
    }
    const xs = [...new Set(everything.map((r) => Date.parse(r.window_start) / 1000))].sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const columns = groups.map(() => xs.map(() => null));
    for (const r of all) {
      const g = groups.indexOf(r.group);
      if (g >= 0) columns[g][index.get(Date.parse(r.window_start) / 1000)] = r.value;
    }
    const data = [xs, ...columns];
    const open = all.filter((r) => !r.final).length;
    const groupCount = new Set(all.map((r) => r.group)).size;
    document.getElementById("chart-note").textContent = everything.length
      ? t("st.chart_note", { windows: xs.length, groups: groupCount, open }) : t("st.waiting");
    const container = document.getElementById("stat-chart");
    const key = `${stat.stat_id}:${groups.join(",")}`;
    chartSpan = xs.length ? [xs[0], xs[xs.length - 1] + stat.window_s] : [Date.now() / 1000 - 60, Date.now() / 1000];
    const span = () => chartSpan;
    if (chart && key === chartGroups) {
      chart.setData(data);
    } else {
      if (chart) chart.destroy();
      container.replaceChildren();
      chartGroups = key;
      chart = Console.timeChart(container, groups.map((g, i) => ({ label: label(g), stroke: PALETTE[i % PALETTE.length] })),
        data, span, t(`st.measure.${stat.measure}`));
    }
    const latest = new Map();
    for (const r of all) if (!latest.has(r.group) || latest.get(r.group).window_start < r.window_start) latest.set(r.group, r);
    document.querySelector("#latest-table tbody").replaceChildren(...[...latest.values()]
      .sort((a, b) => (byLane ? placeOf(a)[1] - placeOf(b)[1] : String(a.group).localeCompare(String(b.group))))
      .map((r) => el("tr", { dataset: { group: r.group } },
        el("td", { class: byLane ? "" : "mono" }, byLane ? label(r.group) : r.group),
        el("td", { class: "mono nowrap" }, time(r.window_start)),
        el("td", { class: "num" }, number(r.value)),
        el("td", {}, r.final ? t("common.yes") : t("st.partial")))));
  }

  function onResult(event) {
    const result = JSON.parse(event.data);
    if (result.stat_id !== selected) return;
    keep(result);
    if (!pendingChart) {
      pendingChart = setTimeout(() => {
        pendingChart = null;
        const stat = stats.find((s) => s.stat_id === selected);
        if (stat) drawChart(stat);
      }, 300);
    }
  }

  async function stop(s) {
    if (!window.confirm(t("st.confirm_stop", { what: describe(s) }))) return;
    try {
      await api(`/api/v1/stats/${encodeURIComponent(s.stat_id)}`, { method: "DELETE" });
    } catch (e) {
      showError(error, e);
    }
    refresh();
  }

  function soon() {
    if (!pendingList) pendingList = setTimeout(refresh, 300);
  }

  document.getElementById("lane-checkpoint").addEventListener("change", (e) => {
    laneCheckpoint = e.target.value;
    const stat = stats.find((s) => s.stat_id === selected);
    if (stat) drawChart(stat);
  });

  /** The form's checkpoint picker (shown for a lane statistic): the map's checkpoints with their lane counts. */
  async function loadCheckpoints(select) {
    try {
      const { data } = await api("/api/v1/map");
      select.append(...data.checkpoints.map((c) => el("option", { value: c.checkpoint_id },
        `${c.checkpoint_id} · ${t("map.lanes")} ${c.lanes}`)));
    } catch (e) {
      showError(error, e);  // the whole city can still be counted per lane
    }
  }

  const form = document.getElementById("stat-form");
  if (form) {
    const f = form.elements;
    const checkpointLabel = document.getElementById("st-checkpoint");
    const showCheckpoint = () => { checkpointLabel.hidden = f.group_by.value !== "lane"; };
    f.group_by.addEventListener("change", showCheckpoint);
    showCheckpoint();
    loadCheckpoints(f.checkpoint);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const field = f.filter_field.value.trim();
      const body = { measure: f.measure.value, group_by: f.group_by.value, window_s: Number(f.window_s.value) };
      const text = f.filter_value.value;
      // A record's lane is a number: "2" typed into the form must compare as 2.
      if (field) body.filter = { [field]: field === "lane" && /^\d+$/.test(text.trim()) ? Number(text) : text };
      if (body.group_by === "lane" && f.checkpoint.value) body.filter = { ...body.filter, checkpoint_id: f.checkpoint.value };
      try {
        const { data } = await api("/api/v1/stats", { method: "POST", json: body });
        showError(error, null);
        await refresh();
        select(data.stat_id);
      } catch (err) {
        showError(error, err);
      }
    });
  }

  refresh().then(() => {
    if (selected) select(selected);
  });
  // soon() at each (re)connection: what changed between the first list and the stream (a reply, a stop) has no
  // event of its own
  Console.liveEvents({ [topics.surveillance_stats]: onResult, [topics.surveillance_replies]: soon,
    [topics.control_stats]: soon }, soon);
})();
