// Live statistics: running statistics with the service's verdict; the selected one's values per window and
// group as a uPlot chart that moves as partial and final results arrive over SSE. Operators start and stop.
"use strict";

(() => {
  const { api, t, el, showError, time, number } = Console;
  const topics = Console.page.event_topics;
  const error = document.getElementById("st-error");
  const state = document.getElementById("live-state");
  const canCommand = Console.hasRole("operator");
  const PALETTE = ["#1d5fa8", "#c81e1e", "#2f9e44", "#9467bd", "#e8590c", "#17becf", "#8c564b", "#e377c2"];
  const MAX_GROUPS = PALETTE.length;
  let stats = [];
  let selected = new URLSearchParams(window.location.search).get("stat");
  let results = new Map();  // "window_start|group" -> result
  let chart = null;
  let chartGroups = "";
  let pendingList = null;
  let pendingChart = null;

  function describe(s) {
    return `${t(`st.measure.${s.measure}`)} · ${t(`st.group.${s.group_by}`)} · ${t("st.every", { s: s.window_s })}`;
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
    el("td", {}, t(`st.group.${s.group_by}`)),
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
      document.getElementById("chart-panel").hidden = false;
      document.getElementById("chart-heading").textContent = describe(data.stat);
      drawChart(data.stat);
    } catch (e) {
      showError(error, e);
    }
  }

  /** One series per group (the busiest MAX_GROUPS), x = window start; a partial value shows as it grows. */
  function drawChart(stat) {
    const all = [...results.values()];
    const totals = new Map();
    for (const r of all) totals.set(r.group, (totals.get(r.group) || 0) + (r.value || 0));
    const groups = [...totals.keys()].sort((a, b) => totals.get(b) - totals.get(a)).slice(0, MAX_GROUPS).sort();
    const xs = [...new Set(all.map((r) => Date.parse(r.window_start) / 1000))].sort((a, b) => a - b);
    const index = new Map(xs.map((x, i) => [x, i]));
    const columns = groups.map(() => xs.map(() => null));
    for (const r of all) {
      const g = groups.indexOf(r.group);
      if (g >= 0) columns[g][index.get(Date.parse(r.window_start) / 1000)] = r.value;
    }
    const data = [xs, ...columns];
    const open = all.filter((r) => !r.final).length;
    document.getElementById("chart-note").textContent = all.length
      ? t("st.chart_note", { windows: xs.length, groups: totals.size, open }) : t("st.waiting");
    const container = document.getElementById("stat-chart");
    const key = groups.join(",");
    const span = () => (xs.length ? [xs[0], xs[xs.length - 1] + stat.window_s] : [Date.now() / 1000 - 60, Date.now() / 1000]);
    if (chart && key === chartGroups) {
      chart.setData(data);
    } else {
      if (chart) chart.destroy();
      container.replaceChildren();
      chartGroups = key;
      chart = Console.timeChart(container, groups.map((g, i) => ({ label: g, stroke: PALETTE[i % PALETTE.length] })), data, span,
        t(`st.measure.${stat.measure}`));
    }
    const latest = new Map();
    for (const r of all) if (!latest.has(r.group) || latest.get(r.group).window_start < r.window_start) latest.set(r.group, r);
    document.querySelector("#latest-table tbody").replaceChildren(...[...latest.values()]
      .sort((a, b) => String(a.group).localeCompare(String(b.group)))
      .map((r) => el("tr", { dataset: { group: r.group } },
        el("td", { class: "mono" }, r.group),
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

  function connect() {
    const wanted = [topics.surveillance_stats, topics.surveillance_replies, topics.control_stats].join(",");
    const source = new EventSource(`/api/v1/events?topics=${encodeURIComponent(wanted)}`);
    source.addEventListener("open", () => {
      state.textContent = t("overview.live");
      state.className = "badge live";
    });
    source.addEventListener("error", () => {
      state.textContent = t("overview.reconnecting");
      state.className = "badge down";
    });
    source.addEventListener(topics.surveillance_stats, onResult);
    source.addEventListener(topics.surveillance_replies, soon);
    source.addEventListener(topics.control_stats, soon);
    window.addEventListener("pagehide", () => source.close());
  }

  const form = document.getElementById("stat-form");
  if (form) {
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const f = form.elements;
      const field = f.filter_field.value.trim();
      const body = { measure: f.measure.value, group_by: f.group_by.value, window_s: Number(f.window_s.value) };
      if (field) body.filter = { [field]: f.filter_value.value };
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
  connect();
})();
