// Monitoring: latency trend (p50/p95/p99 per hour, one stage) and quality curves (produced vs valid per hour)
// for a chosen day and scope, the device health table, and the map with unhealthy devices marked.
// Clicking a device (table row or map checkpoint) shows its history: its quality curve and its state.
"use strict";

(() => {
  const { api, t, el, fillRows, showError, number, time } = Console;
  const error = document.getElementById("mon-error");
  const form = document.getElementById("mon-controls");
  const dayInput = document.getElementById("mon-day");
  const stageSelect = document.getElementById("mon-stage");
  const deviceSelect = document.getElementById("mon-device");
  const recognizerSelect = document.getElementById("mon-recognizer");
  const STATE_COLORS = { healthy: "#2f9e44", recovering: "#1d5fa8", degraded: "#e8590c", silent: "#c92a2a" };
  const UNHEALTHY = new Set(["degraded", "silent", "recovering"]);
  const REFRESH_MS = 10000;
  let devices = [];
  let city = null;
  let latencyChart = null;
  let qualityChart = null;
  let latency = [];

  /** Today in the city (UTC+8) as YYYY-MM-DD. */
  function cityToday() {
    return new Date(Date.now() + 8 * 3600000).toISOString().slice(0, 10);
  }

  function dayStart(day) {
    return Date.parse(`${day}T00:00:00+08:00`) / 1000;
  }

  function hourAxis(day) {
    const start = dayStart(day);
    return Array.from({ length: 24 }, (_, h) => start + h * 3600);
  }

  function chart(existing, container, series, data, day, yLabel) {
    const start = dayStart(day);
    if (existing) existing.destroy();
    const made = Console.timeChart(container, series, data, () => [start, start + 23 * 3600], yLabel);
    return made;
  }

  function drawLatency() {
    const day = dayInput.value;
    const stage = stageSelect.value;
    document.getElementById("latency-stage").textContent = t(`stage.${stage}`);
    const pick = (q) => latency.map((p) => p.stages[stage][q]);
    latencyChart = chart(latencyChart, document.getElementById("latency-chart"), [
      { label: "p50", stroke: "#2f9e44" }, { label: "p95", stroke: "#e8590c" }, { label: "p99", stroke: "#c92a2a" },
    ], [hourAxis(day), pick("p50_ms"), pick("p95_ms"), pick("p99_ms")], day, t("unit.ms"));
  }

  function drawQuality(points) {
    const day = dayInput.value;
    const pick = (k) => points.map((p) => p[k]);
    qualityChart = chart(qualityChart, document.getElementById("quality-chart"), [
      { label: t("mon.produced"), stroke: "#1d5fa8" }, { label: t("mon.valid"), stroke: "#2f9e44" },
      { label: t("mon.unrecognized"), stroke: "#e8590c" }, { label: t("mon.invalid"), stroke: "#c92a2a" },
    ], [hourAxis(day), pick("produced"), pick("valid"), pick("unrecognized"), pick("invalid")], day, t("mon.records"));
  }

  function scope() {
    if (deviceSelect.value) return { device_ip: deviceSelect.value };
    if (recognizerSelect.value) return { recognizer_ip: recognizerSelect.value };
    return {};
  }

  function describeScope() {
    if (deviceSelect.value) return `${t("field.device_ip")} ${deviceSelect.value}`;
    if (recognizerSelect.value) return `${t("field.recognizer_ip")} ${recognizerSelect.value}`;
    return t("mon.whole_city");
  }

  async function loadCharts() {
    const day = dayInput.value;
    const query = new URLSearchParams({ day, stage: stageSelect.value, ...scope() });
    window.history.replaceState(null, "", `?${query}`);
    document.getElementById("quality-scope").textContent = describeScope();
    try {
      const [lat, quality] = await Promise.all([
        api("/api/v1/monitoring/latency", { params: { day } }),
        api("/api/v1/monitoring/quality", { params: { day, ...scope() } }),
      ]);
      latency = lat.data;
      drawLatency();
      drawQuality(quality.data);
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
    showDevice();
  }

  function where(d) {
    const loc = d.location;
    if (!loc.known) return t("mon.unknown_location");
    return `${loc.district} · ${t("map.crossroad")} ${loc.crossroad} · ${t(`direction.${loc.direction}`)}`;
  }

  function stateBadge(state) {
    return el("span", { class: `state-badge state-${state}` }, t(`health.${state}`));
  }

  /** Why a device is (or, recovering, was) degraded: its records, its capture images, its video (with the problem). */
  function reasons(d) {
    if (!d.reason) return null;
    return d.reason.split(",").map((r) => (r === "video" && d.video_problem
      ? `${t("reason.video")}: ${t(`video_problem.${d.video_problem}`)}` : t(`reason.${r}`))).join(" · ");
  }

  function share(value) {
    return value === null || value === undefined ? null : `${number(value * 100)} %`;
  }

  function showDevice() {
    const panel = document.getElementById("device-panel");
    const d = devices.find((x) => x.device_ip === deviceSelect.value);
    panel.hidden = !d;
    if (!d) return;
    document.getElementById("dev-ip").textContent = d.device_ip;
    const pairs = [
      [t("mon.state"), stateBadge(d.state)], [t("mon.since"), d.since ? time(d.since * 1000) : null],
      [t("mon.last_seen"), d.last_seen ? time(d.last_seen * 1000) : null],
      [t("mon.reason"), reasons(d)], [t("mon.bad_share"), share(d.bad_share)],
      [t("mon.images_bad_share"), share(d.images_bad_share)],
      [t("field.location"), where(d)], [t("field.checkpoint_id"), d.checkpoint_id],
      [t("field.recognizer_ip"), d.recognizer_ip],
    ];
    document.getElementById("dev-facts").replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k),
      el("dd", {}, v === null || v === undefined ? "—" : v)]));
    if (city && d.checkpoint_id) city.select(d.checkpoint_id, false);
  }

  function chooseDevice(ip) {
    deviceSelect.value = ip;
    recognizerSelect.value = "";
    loadCharts();
    document.getElementById("quality-chart").scrollIntoView({ behavior: "smooth", block: "center" });
  }

  function fillSelect(select, values) {
    const chosen = select.value;
    select.replaceChildren(el("option", { value: "" }, t("mon.whole_city")), ...values.map((v) => el("option", { value: v }, v)));
    if (values.includes(chosen)) select.value = chosen;
  }

  function drawHealth() {
    const counts = {};
    for (const d of devices) counts[d.state] = (counts[d.state] || 0) + 1;
    document.getElementById("health-counts").textContent = ["healthy", "recovering", "degraded", "silent"]
      .map((s) => `${t(`health.${s}`)} ${counts[s] || 0}`).join(" · ");
    const order = { silent: 0, degraded: 1, recovering: 2, healthy: 3 };
    const onlyBad = document.getElementById("unhealthy-only").checked;
    const shown = devices.filter((d) => !onlyBad || UNHEALTHY.has(d.state))
      .sort((a, b) => order[a.state] - order[b.state] || a.device_ip.localeCompare(b.device_ip));
    const tbody = document.querySelector("#health-table tbody");
    if (!shown.length) {
      fillRows(tbody, [[t("mon.all_healthy"), null, null, null, null, null]]);
      return;
    }
    tbody.replaceChildren(...shown.map((d) => el("tr", {
      dataset: { device: d.device_ip, state: d.state }, onclick: () => chooseDevice(d.device_ip),
      class: d.device_ip === deviceSelect.value ? "selected" : undefined,
    }, el("td", { class: "mono" }, d.device_ip), el("td", {}, stateBadge(d.state)), el("td", {}, reasons(d) || "—"),
    el("td", { class: "num" }, share(d.bad_share) || "—"),
    el("td", {}, where(d)), el("td", { class: "mono" }, d.recognizer_ip))));
  }

  /** Colour each checkpoint by its worst device; an unhealthy one is drawn larger with a dark ring. */
  function markMap() {
    if (!city) return;
    const rank = { silent: 3, degraded: 2, recovering: 1, healthy: 0 };
    const worst = new Map();
    for (const d of devices) {
      const now = worst.get(d.checkpoint_id);
      if (!now || rank[d.state] > rank[now.state]) worst.set(d.checkpoint_id, d);
    }
    for (const [id, marker] of city.markers) {
      const d = worst.get(id);
      const state = d ? d.state : "silent";
      const bad = UNHEALTHY.has(state);
      marker.setStyle({ fillColor: STATE_COLORS[state], color: bad ? "#1f2933" : STATE_COLORS[state], weight: bad ? 3 : 1,
        fillOpacity: 0.9 });
      marker.options.fillColor = STATE_COLORS[state];
      marker.setRadius(bad ? 11 : 6);
      marker.getElement().dataset.state = state;
      if (bad) marker.bringToFront();
    }
  }

  async function loadDevices() {
    try {
      ({ data: devices } = await api("/api/v1/monitoring/devices"));
    } catch (e) {
      showError(error, e);
      return;
    }
    fillSelect(deviceSelect, devices.map((d) => d.device_ip));
    fillSelect(recognizerSelect, [...new Set(devices.map((d) => d.recognizer_ip))].sort());
    drawHealth();
    markMap();
    showDevice();
  }

  async function loadMap() {
    try {
      const { data } = await api("/api/v1/map");
      city = CityMap.create(document.getElementById("map"), data, {
        onCheckpoint: (cp) => {
          const here = devices.filter((d) => d.checkpoint_id === cp.checkpoint_id);
          const pick = here.find((d) => UNHEALTHY.has(d.state)) || here[0];
          if (pick) chooseDevice(pick.device_ip);
        },
      });
      markMap();
    } catch (e) {
      showError(error, e);
    }
  }

  const params = new URLSearchParams(window.location.search);
  dayInput.value = params.get("day") || cityToday();
  if (params.get("stage")) stageSelect.value = params.get("stage");
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    loadCharts();
  });
  stageSelect.addEventListener("change", () => {
    if (latency.length) drawLatency();
  });
  deviceSelect.addEventListener("change", () => {
    if (deviceSelect.value) recognizerSelect.value = "";
  });
  recognizerSelect.addEventListener("change", () => {
    if (recognizerSelect.value) deviceSelect.value = "";
  });
  document.getElementById("unhealthy-only").addEventListener("change", drawHealth);
  document.getElementById("dev-clear").addEventListener("click", () => {
    deviceSelect.value = "";
    city.select(null);
    loadCharts();
  });
  window.addEventListener("resize", () => {
    for (const [c, id] of [[latencyChart, "latency-chart"], [qualityChart, "quality-chart"]]) {
      if (c) c.setSize({ width: document.getElementById(id).clientWidth, height: 240 });
    }
  });

  (async () => {
    await Promise.all([loadDevices(), loadMap()]);
    markMap();
    // The scope in the address (a shared link, a reload) once the selects know the devices.
    if (params.get("device_ip")) deviceSelect.value = params.get("device_ip");
    else if (params.get("recognizer_ip")) recognizerSelect.value = params.get("recognizer_ip");
    await loadCharts();
    setInterval(() => {
      loadDevices();
      if (dayInput.value === cityToday()) loadCharts();
    }, REFRESH_MS);
  })();
})();
