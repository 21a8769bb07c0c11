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
      else fillRows(captures, latest.map((c) => [time(c.capture_time), t(`kind.${c.kind}`), c.plate_number, c.device_ip]));
    } catch (e) {
      devices.replaceChildren();
      showError(error, e);
    }
  }

  function closeCheckpoint() {
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
