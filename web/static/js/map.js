// The map page: the whole deployment; a checkpoint's panel lists its devices and latest captures.
"use strict";

(async () => {
  const { api, t, el, fillRows, showError, time } = Console;
  const error = document.getElementById("map-error");
  const summary = document.getElementById("map-summary");
  const panel = document.getElementById("checkpoint-panel");
  let city;
  let data;

  function facts(dl, pairs) {
    dl.replaceChildren(...pairs.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v === null || v === undefined ? "—" : v)]));
  }

  async function openCheckpoint(cp) {
    city.select(cp.checkpoint_id, true);
    summary.hidden = true;
    panel.hidden = false;
    document.getElementById("cp-id").textContent = cp.checkpoint_id;
    const district = city.districts.get(cp.district);
    facts(document.getElementById("cp-facts"), [
      [t("field.district"), district ? `${district.name} (${cp.district})` : cp.district],
      [t("map.crossroad"), cp.crossroad],
      [t("map.direction"), t(`direction.${cp.direction}`)],
      [t("map.lanes"), cp.lanes],
      [t("map.coordinates"), `${cp.lat.toFixed(5)}, ${cp.lon.toFixed(5)}`],
    ]);
    openWall(cp.checkpoint_id);
    const search = document.getElementById("cp-search");
    search.href = `/captures?checkpoint=${encodeURIComponent(cp.checkpoint_id)}`;
    const devices = document.querySelector("#cp-devices tbody");
    const captures = document.querySelector("#cp-captures tbody");
    fillRows(devices, [[t("common.loading"), null, null]]);
    captures.replaceChildren();
    try {
      const { data: detail } = await api(`/api/v1/checkpoints/${encodeURIComponent(cp.checkpoint_id)}`);
      showError(error, null);
      fillRows(devices, (detail.devices || []).map((d) => [d.device_ip, t(`kind.${d.kind}`), d.recognizer_ip]));
      const latest = detail.latest || [];
      if (!latest.length) fillRows(captures, [[t("map.no_captures"), null, null, null]]);
      else {
        fillRows(captures, latest.map((c) => [time(c.capture_time), t(`kind.${c.kind}`), c.plate_number, c.device_ip,
          Console.captureImage(c, { size: "thumb" })]));
        for (const row of captures.children) row.lastChild.classList.add("thumb-cell");
      }
    } catch (e) {
      devices.replaceChildren();
      showError(error, e);
    }
  }

  // -- the checkpoint's live image wall: its captures as they arrive (SSE), newest first ----------------------------
  const WALL_SIZE = 12;
  let wall = null;

  function closeWall() {
    if (wall) wall.close();
    wall = null;
    document.getElementById("cp-wall").replaceChildren();
    document.getElementById("cp-wall-state").textContent = "";
  }

  function openWall(checkpointId) {
    closeWall();
    const grid = document.getElementById("cp-wall");
    const state = document.getElementById("cp-wall-state");
    grid.replaceChildren(el("p", { class: "muted wall-empty" }, t("image.wall_empty")));
    const source = new EventSource(`/api/v1/captures/live?checkpoint=${encodeURIComponent(checkpointId)}`);
    wall = source;
    source.addEventListener("open", () => { state.textContent = t("overview.live"); state.className = "badge live"; });
    source.addEventListener("error", () => { state.textContent = "…"; state.className = "badge"; });
    source.addEventListener("closed", () => source.close());
    source.addEventListener("capture", (event) => {
      const capture = JSON.parse(event.data);
      grid.querySelector(".wall-empty")?.remove();
      grid.prepend(el("div", { class: "wall-cell", dataset: { recordId: capture.record_id } },
        Console.captureImage(capture, { size: "thumb", retries: 3 }),
        el("div", { class: "wall-item" },
          `${time(capture.capture_time).slice(11)} · ${capture.plate_number || t(`kind.${capture.kind}`)}`)));
      while (grid.children.length > WALL_SIZE) grid.lastChild.remove();
    });
  }

  function closeCheckpoint() {
    closeWall();
    city.select(null);
    city.overview();
    panel.hidden = true;
    summary.hidden = false;
  }

  function drawSummary() {
    facts(document.getElementById("map-counts"), [
      [t("map.districts"), data.districts.length],
      [t("map.checkpoints"), data.checkpoints.length],
      [t("map.devices"), data.devices.length],
      [t("map.recognizers"), data.recognizers.length],
    ]);
    const perDistrict = new Map();
    for (const cp of data.checkpoints) perDistrict.set(cp.district, (perDistrict.get(cp.district) || 0) + 1);
    document.getElementById("district-list").replaceChildren(...data.districts.map((d) => el("li", {},
      el("span", { class: "swatch area", style: `border-color:${city.districts.get(d.code).color}` }),
      `${d.name} (${d.code}) · ${t("map.n_checkpoints", { n: perDistrict.get(d.code) || 0 })}`)));
    const checkpointOf = new Map(data.devices.map((d) => [d.device_ip, d.checkpoint_id]));
    document.getElementById("recognizer-list").replaceChildren(...data.recognizers.map((r) => el("li", {},
      el("button", {
        type: "button", class: "link-button",
        onclick: () => city.highlight(r.devices.map((ip) => checkpointOf.get(ip))),
      }, r.recognizer_ip), ` · ${t("map.n_devices", { n: r.devices.length })}`)));
  }

  document.getElementById("checkpoint-close").addEventListener("click", closeCheckpoint);
  try {
    ({ data } = await api("/api/v1/map"));
  } catch (e) {
    showError(error, e);
    return;
  }
  city = CityMap.create(document.getElementById("map"), data, { onCheckpoint: openCheckpoint });
  drawSummary();
  const wanted = new URLSearchParams(window.location.search).get("checkpoint");
  const cp = wanted && data.checkpoints.find((c) => c.checkpoint_id === wanted);
  if (cp) openCheckpoint(cp);
})();
