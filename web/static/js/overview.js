// Overview: the figures come from GET /api/v1/overview (the server's in-memory state); every ingest.stats
// or alerts event pushed over SSE triggers a re-read, so the page is live without recomputing anything here.
"use strict";

(() => {
  const { api, t, el, fillRows, number, time } = Console;
  const updated = document.getElementById("updated-at");
  const topics = Console.page.event_topics;
  const history = { at: [], records: [], rows: [] };
  const HISTORY_POINTS = 720;
  let chart = null;
  let pending = null;

  function setFigure(key, value) {
    document.getElementById(`fig-${key}`).textContent = number(value);
  }

  function drawChart() {
    const container = document.getElementById("throughput-chart");
    const data = [history.at, history.records, history.rows];
    if (!chart) {
      chart = Console.timeChart(container, [
        { label: `${t("overview.records_in")} (${t("overview.records_in.unit")})`, stroke: "#1d5fa8" },
        { label: `${t("overview.rows_written")} (${t("overview.rows_written.unit")})`, stroke: "#2ca02c" },
      ], data, (now) => [Math.min(history.at[0], now - 300), now + 5]);
      window.addEventListener("resize", () => chart.setSize({ width: container.clientWidth, height: 240 }));
    } else {
      chart.setData(data);
    }
  }

  function render(o) {
    const ingest = o.ingest;
    setFigure("records_in", ingest.records_per_s);
    setFigure("rows_written", ingest.rows_per_s);
    setFigure("latency_p50", ingest.latency_ms.p50);
    setFigure("latency_p99", ingest.latency_ms.p99);
    setFigure("rejected_invalid", ingest.invalid);
    setFigure("rejected_unrecognized", ingest.unrecognized);
    setFigure("open_alerts", o.open_alerts);
    document.querySelector('[data-figure="open_alerts"]').classList.toggle("alerting", Boolean(o.open_alerts));
    document.getElementById("no-stats").hidden = ingest.batches > 0;
    updated.textContent = `${t("overview.updated", { time: time(Date.now()) })} · ${t("overview.window", { seconds: number(ingest.window_s) })}`;
    if (ingest.last_batch_age_s !== null && ingest.last_batch_age_s !== undefined) {
      updated.textContent += ` · ${t("overview.last_batch", { seconds: number(ingest.last_batch_age_s) })}`;
    }
    const rows = Object.entries(o.health || {}).map(([name, h]) => [
      el("span", { class: "nowrap" }, t(`component.${name}`)),
      el("span", { class: `nowrap ${h.up ? "state-up" : "state-down"}` }, h.up ? t("overview.up") : t("overview.down")),
      h.error || null,
    ]);
    fillRows(document.querySelector("#health-table tbody"), rows);
    if (ingest.records_per_s !== null) {
      history.at.push(Date.now() / 1000);
      history.records.push(ingest.records_per_s);
      history.rows.push(ingest.rows_per_s);
      for (const series of Object.values(history)) if (series.length > HISTORY_POINTS) series.shift();
      drawChart();
    }
  }

  async function refresh() {
    pending = null;
    try {
      const { data } = await api("/api/v1/overview");
      render(data);
    } catch (e) {
      updated.textContent = `${t("error.http", { status: e.status || "?" })}: ${e.message}`;
    }
  }

  /** Several events in a burst cost one re-read. */
  function soon() {
    if (!pending) pending = setTimeout(refresh, 250);
  }

  refresh();
  Console.liveEvents({ [topics.ingest_stats]: soon, [topics.alerts]: soon });
  setInterval(refresh, 10000);
})();
