// The DR page: which site is active and the last switchover, the mirror's lag (live and the last hour), the image copier's lag
// and counts, checkpoints, drill reports; admins switch the business over to the other site (and back) and start drills.
"use strict";

(() => {
  const { api, el, fillRows, showError, time, number, t, timeChart } = Console;
  const error = document.getElementById("dr-error");
  let chart = null;
  let selected = null;

  async function loadLag() {
    const node = document.getElementById("lag-error");
    try {
      const { data } = await api("/api/v1/dr/lag");
      document.getElementById("lag-total").textContent = t("dr.total", { n: number(data.total) });
      const { rpo } = data;
      document.getElementById("rpo-now").textContent = rpo.records === 0 ? t("dr.rpo_none")
        : rpo.seconds === null ? t("dr.rpo_now_unknown", { n: number(rpo.records) })
          : t("dr.rpo_now", { n: number(rpo.records), s: number(rpo.seconds) });
      fillRows(document.querySelector("#lag-table tbody"), data.partitions.map((p) => [
        p.topic, String(p.partition), number(p.lag), number(p.lag_seconds),
        p.stopped ? t("dr.stopped") : t("dr.running")]),
      (i) => (data.partitions[i].stopped ? { class: "stopped" } : {}));
      showError(node, null);
    } catch (e) {
      document.getElementById("lag-total").textContent = "—";
      document.getElementById("rpo-now").textContent = "—";
      showError(node, e);
    }
  }

  async function loadSite() {
    const badge = document.getElementById("active-site");
    try {
      const { data } = await api("/api/v1/dr/site");
      const site = t(`dr.site_${data.active}`);
      badge.textContent = data.since === null ? t("dr.active_site", { site })
        : t("dr.active_site_since", { site, since: time(data.since) });
      badge.title = data.reason;
      badge.className = data.active === "primary" ? "badge live" : "badge down";
      if (data.switching_to !== null) {
        badge.textContent = t("dr.switching_to", { site: t(`dr.site_${data.switching_to}`) });
        badge.className = "badge down";
      }
      const last = document.getElementById("last-switchover");
      last.hidden = data.last === null;
      if (data.last !== null) {
        const known = (value) => (value === null || value === undefined ? t("dr.unknown") : number(value));
        const from = t(`dr.site_${data.last.from}`);
        last.textContent = data.last.planned
          ? t("dr.last_planned", { site: from, n: known(data.last.records_lost), d: known(data.last.drained_s),
            s: known(data.last.switch_s) })
          : t("dr.last_unplanned", { site: from, n: known(data.last.records_lost), l: known(data.last.seconds_lost),
            s: known(data.last.switch_s) });
      }
    } catch (e) {
      badge.textContent = "—";
      showError(error, e);
    }
  }

  async function loadImages() {
    const node = document.getElementById("images-error");
    const badge = document.getElementById("images-lag");
    try {
      const { data } = await api("/api/v1/dr/images");
      badge.textContent = t("dr.images_behind", { n: number(data.lag_records), s: number(data.lag_seconds) });
      const setAside = (data.skipped.malformed || 0) + (data.skipped.foreign || 0) + (data.skipped.error || 0);
      fillRows(document.querySelector("#images-table tbody"), [[
        number(data.lag_records), number(data.lag_seconds), number(data.copied), number(data.missing_at_source),
        number(setAside), number(data.videos_pending), number(data.videos_lag_seconds), number(data.videos_copied)]],
      () => (data.missing_at_source > 0 ? { class: "stopped" } : {}));
      showError(node, null);
    } catch (e) {
      badge.textContent = "—";
      fillRows(document.querySelector("#images-table tbody"), []);
      showError(node, e);
    }
  }

  async function loadHistory() {
    const { data } = await api("/api/v1/dr/lag/history");
    document.getElementById("lag-history-empty").hidden = data.length > 0;
    const series = [data.map((s) => s.time_ms / 1000), data.map((s) => s.total)];
    const container = document.getElementById("lag-chart");
    if (chart) chart.setData(series);
    else chart = timeChart(container, [{ label: t("dr.lag"), stroke: "#b42318" }], series,
      (now) => [now - 3600, now], t("dr.records"));
  }

  async function loadCheckpoints() {
    const node = document.getElementById("checkpoints-error");
    try {
      const { data } = await api("/api/v1/dr/checkpoints");
      fillRows(document.querySelector("#checkpoints-table tbody"), data.map((c) => [
        c.group, c.topic, String(c.partition), number(c.upstream_offset), number(c.downstream_offset), time(c.time_ms)]));
      document.getElementById("checkpoints-empty").hidden = data.length > 0;
      showError(node, null);
    } catch (e) {
      showError(node, e);
    }
  }

  function figure(report, keys) {
    for (const key of keys) if (report[key] !== undefined && report[key] !== null) return `${number(report[key])}`;
    return null;
  }

  async function showDrill(name) {
    selected = name;
    const { data } = await api(`/api/v1/dr/drills/${encodeURIComponent(name)}`);
    const base = `/api/v1/dr/drills/${encodeURIComponent(name)}`;
    document.getElementById("drill-panel").hidden = false;
    document.getElementById("drill-title").textContent = name;
    document.getElementById("drill-json").href = `${base}/json`;
    document.getElementById("drill-md-link").href = `${base}/md`;
    const img = document.getElementById("drill-chart");
    img.hidden = !data.has_chart;
    if (data.has_chart) img.src = `${base}/png`;
    document.getElementById("drill-md").textContent = data.markdown || JSON.stringify(data.report, null, 2);
    for (const row of document.querySelectorAll("#drills-table tbody tr")) row.classList.toggle("selected", row.dataset.name === name);
  }

  async function loadDrills() {
    const { data } = await api("/api/v1/dr/drills");
    fillRows(document.querySelector("#drills-table tbody"), data.map((d) => [
      time(d.finished), t(`dr.scenario.${d.scenario}`),
      figure(d.report, ["rpo_records", "behind_at_restart_records"]),
      figure(d.report, ["rto_rows_s", "rto_producers_s", "catch_up_s"]),
      figure(d.report, ["missing_in_dr_hbase", "missing_in_primary_hbase", "lost_in_dr_topics", "missing_at_dr"]),
      el("a", { href: "#", class: "mono", onclick: (ev) => { ev.preventDefault(); showDrill(d.name).catch((e) => showError(error, e)); } }, d.name)]),
    (i) => ({ dataset: { name: data[i].name }, class: data[i].name === selected ? "selected" : "" }));
    document.getElementById("drills-empty").hidden = data.length > 0;
  }

  async function loadRunning() {
    const { data } = await api("/api/v1/dr/drills/running");
    const node = document.getElementById("drill-running");
    node.hidden = !data;
    if (data) node.textContent = data.running ? t("dr.drill_running", { name: data.name }) : t("dr.drill_ended", { name: data.name, code: data.exit_code });
    const button = document.getElementById("drill-start");
    if (button) button.disabled = Boolean(data && data.running);
  }

  async function loadSwitchover() {
    const form = document.getElementById("switchover-form");
    if (!form) return;  // not an admin: no switchover panel
    const { data } = await api("/api/v1/dr/switchover");
    const state = document.getElementById("switchover-state");
    const said = document.getElementById("switchover-said");
    state.hidden = !data;
    said.hidden = !data || data.running || data.exit_code === 0;
    document.getElementById("switchover-start").disabled = Boolean(data && data.running);
    if (!data) return;
    const site = t(`dr.site_${data.to}`);
    state.className = data.running || data.exit_code === 0 ? "muted" : "error";
    state.textContent = data.running ? t("dr.switchover_running", { site })
      : data.exit_code === 0 ? t("dr.switchover_done", { site })
        : t("dr.switchover_refused", { site, code: data.exit_code });
    said.textContent = data.said;
  }

  async function refresh() {
    await Promise.all([loadSite(), loadLag(), loadImages()]);
    try {
      await Promise.all([loadHistory(), loadCheckpoints(), loadDrills(), loadRunning(), loadSwitchover()]);
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  const form = document.getElementById("drill-form");
  if (form) {
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      try {
        await api("/api/v1/dr/drills", { method: "POST", json: { scenario: document.getElementById("drill-scenario").value } });
        await loadRunning();
        showError(error, null);
      } catch (e) {
        showError(error, e);
      }
    });
  }
  const switchoverForm = document.getElementById("switchover-form");
  if (switchoverForm) {
    switchoverForm.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      const to = document.getElementById("switchover-to").value;
      if (!window.confirm(t("dr.switchover_confirm", { site: t(`dr.site_${to}`) }))) return;
      try {
        await api("/api/v1/dr/switchover", { method: "POST", json: {
          to, reason: document.getElementById("switchover-reason").value,
          force: document.getElementById("switchover-force").checked } });
        await loadSwitchover();
        showError(error, null);
      } catch (e) {
        showError(error, e);
      }
    });
  }
  refresh();
  setInterval(refresh, 5000);
})();
