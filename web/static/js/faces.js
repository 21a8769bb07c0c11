// Face search: the face captures that look like a capture (or a feature) in a time range and place, best score
// first, each with its thumbnail, and on the map as a trajectory in time order. Every search needs a reason (it is
// audited with it); thumbnails are read with the same reason. Operators may watch a face they found.
"use strict";

(async () => {
  const { api, t, el, showError, time, cityIso, cityLocalInput } = Console;
  const form = document.getElementById("face-form");
  const error = document.getElementById("search-error");
  const tbody = document.querySelector("#results tbody");
  const empty = document.getElementById("results-empty");
  const heading = document.getElementById("results-heading");
  const state = document.getElementById("index-state");
  const reasonInput = document.getElementById("reason");
  const reasonError = document.getElementById("reason-error");
  const { flag: flagReason, clear: clearReason } = Console.fieldMessage(reasonInput, reasonError);
  let city = null;

  /** Where a capture was: the district's name (its code when the map has no name) and the crossroad. */
  function place(location) {
    if (!location) return "—";
    return `${location.district_name || location.district} · ${t("map.crossroad")} ${location.crossroad} · ${t(`direction.${location.direction}`)}`;
  }

  /** The index's state in a badge: ready (faces, days) or still building (how far). */
  async function showState() {
    try {
      const { data } = await api("/api/v1/captures/faces/status");
      state.textContent = data.ready ? t("faces.ready", { n: data.faces, days: data.days })
        : t("faces.building", { n: data.scanned });
      state.className = `badge ${data.ready ? "live" : ""}`;
      if (!data.ready) setTimeout(showState, 3000);
    } catch (e) {
      state.textContent = e.message;
      state.className = "badge down";
    }
  }

  /** Operators watch a face they found (the watchlist API matches the capture's feature from now on). */
  function watchCell(item, reason) {
    const cell = el("td", { class: "nowrap face-actions" });
    cell.append(el("div", {}, el("a", { href: `/faces?capture=${encodeURIComponent(item.record_id)}` }, t("faces.search_this"))));
    if (!Console.hasRole("operator")) return cell;
    const button = el("button", {
      type: "button", class: "watch-face", dataset: { recordId: item.record_id },
      onclick: async () => {
        button.disabled = true;
        try {
          const { data } = await api("/api/v1/watchlist", { method: "POST", json: { kind: "face", capture: item.record_id, reason } });
          button.replaceWith(el("a", { href: `/watchlist?watch=${encodeURIComponent(data.watch_id)}`, class: "watch-added" },
            t("sv.watch_added", { id: data.watch_id })));
        } catch (e) {
          button.disabled = false;
          showError(error, e);
        }
      },
    }, t("sv.watch_this_face"));
    cell.append(el("div", {}, button));
    return cell;
  }

  function render(body, reason) {
    // Listed best first; numbered as the map draws them, in time order, so a row and its stop share a number.
    const byTime = [...body.items].sort((a, b) => Date.parse(a.capture_time) - Date.parse(b.capture_time));
    const order = new Map(byTime.map((item, i) => [item.record_id, i + 1]));
    tbody.replaceChildren(...body.items.map((item) => el("tr", { dataset: { recordId: item.record_id, checkpoint: item.checkpoint_id } },
      el("td", {}, String(order.get(item.record_id))),
      el("td", { class: "num" }, item.score.toFixed(3)),
      el("td", { class: "mono nowrap" }, time(item.capture_time)),
      el("td", { class: "wrap" }, place(item.location), el("div", { class: "mono muted" }, item.checkpoint_id)),
      el("td", { class: "thumb-cell" }, Console.captureImage({ kind: "face", record_id: item.record_id }, { size: "thumb", reason })),
      watchCell(item, reason))));
    empty.hidden = body.items.length > 0;
    heading.textContent = `${t("captures.results")} · ${t("faces.n_found", { n: body.items.length, matched: body.matched, faces: body.searched_faces })}`;
    if (city) city.showTrajectory(byTime);
  }

  async function search(params) {
    showError(error, null);
    const query = { ...params };
    for (const key of Object.keys(query)) if (query[key] === "" || query[key] === null) delete query[key];
    try {
      const { data } = await api("/api/v1/captures/faces/similar", { method: "POST", json: query });
      render(data, params.reason);
    } catch (e) {
      tbody.replaceChildren();
      empty.hidden = true;
      if (city) city.clearTrajectory();
      if (e instanceof Console.ApiError && e.status === 503 && e.body && e.body.progress) {
        showError(error, new Error(t("faces.not_ready", { n: e.body.progress.scanned })));
        showState();
        return;
      }
      showError(error, e);
      const detail = e instanceof Console.ApiError && e.status === 422 && e.body && e.body.detail;
      const about = Array.isArray(detail) ? detail.find((d) => (d.loc || []).includes("reason")) : null;
      if (about) flagReason(about.msg);
    }
  }

  reasonInput.addEventListener("invalid", (event) => {
    event.preventDefault();
    flagReason(t("faces.reason_required"));
    reasonInput.focus();
  });
  reasonInput.addEventListener("input", clearReason);

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new FormData(form);
    const reason = f.get("reason").trim();
    if (!reason) {
      flagReason(t("faces.reason_required"));
      return;
    }
    history.replaceState(null, "", f.get("capture").trim() ? `/faces?capture=${encodeURIComponent(f.get("capture").trim())}` : "/faces");
    search({
      capture: f.get("capture").trim(), feature: f.get("feature").trim(), from: cityIso(f.get("from")),
      to: cityIso(f.get("to")), district: f.get("district"), checkpoint: f.get("checkpoint").trim(),
      min_score: Number(f.get("min_score")), limit: Number(f.get("limit")), reason,
    });
  });

  const now = new Date();
  document.getElementById("to").value = cityLocalInput(now);
  document.getElementById("from").value = cityLocalInput(new Date(now.getTime() - 7 * 86400000));
  const capture = new URLSearchParams(window.location.search).get("capture");
  if (capture) {
    // A link from a hit, a watch or a capture: the capture is filled in, the search waits for this user's reason.
    document.getElementById("capture").value = capture;
    reasonError.textContent = t("faces.reason_for_link");
    reasonError.hidden = false;
    reasonInput.focus();
  }
  showState();

  try {
    const { data } = await api("/api/v1/map");
    city = CityMap.create(document.getElementById("map"), data);
    document.getElementById("district").append(...data.districts.map((d) => el("option", { value: d.code }, `${d.name} (${d.code})`)));
    document.getElementById("checkpoint-options").replaceChildren(
      ...data.checkpoints.map((c) => el("option", { value: c.checkpoint_id })));
  } catch (e) {
    showError(error, e);
  }
})();
