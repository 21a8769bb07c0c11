// Watchlist: watched plates and faces with the service's verdict and hit counts; live hits over SSE with a
// sound and a visual cue; the selected watch's trajectory on the map. Operators add and remove watches; the
// API enforces the role again (the forms are simply not drawn for viewers).
"use strict";

(async () => {
  const { api, t, el, showError, time } = Console;
  const topics = Console.page.event_topics;
  const error = document.getElementById("sv-error");
  const banner = document.getElementById("hit-banner");
  const canCommand = Console.hasRole("operator");
  const LIVE_ROWS = 30;
  let city = null;
  let selected = new URLSearchParams(window.location.search).get("watch");
  let watches = [];
  let pending = null;
  let audio = null;
  let shown = null;  // the selected watch: { watchId, watch, points, total }

  const districtNames = new Map();  // code -> name, once the map is loaded

  function place(location) {
    if (!location) return "—";
    const district = location.district_name || districtNames.get(location.district) || location.district || "?";
    return location.crossroad !== undefined ? `${district} · ${t("map.crossroad")} ${location.crossroad}` : district;
  }

  function target(w) {
    if (w.kind === "plate") return el("span", { class: "plate" }, w.plate);
    if (w.kind !== "face") return "—"; // a command the service rejected, of no known kind
    if (!w.capture) return el("span", { class: "mono" }, t("sv.face_feature"));
    return el("span", {}, el("span", { class: "mono" }, t("sv.face_of", { capture: w.capture })), " ",
      faceSearchLink(w.capture));
  }

  /** "Search this face": the face search page with the capture filled in (it asks for the user's own reason). */
  function faceSearchLink(recordId) {
    return el("a", { href: `/faces?capture=${encodeURIComponent(recordId)}`, class: "face-search-link" },
      t("faces.search_this"));
  }

  function statusBadge(w) {
    const badge = el("span", { class: `state-badge sv-${w.status}` }, t(`sv.status.${w.status}`));
    return w.status === "rejected" ? [badge, el("br"), el("span", { class: "error" }, w.status_reason)] : badge;
  }

  function scope(w) {
    const parts = [...w.districts, ...w.checkpoints];
    const text = parts.length ? parts.join(", ") : t("sv.whole_city");
    return w.expires_at ? `${text} · ${t("sv.until", { time: time(w.expires_at) })}` : text;
  }

  function drawWatches() {
    const tbody = document.querySelector("#watch-table tbody");
    document.getElementById("watch-count").textContent = String(watches.length);
    if (!watches.length) {
      tbody.replaceChildren(el("tr", {}, el("td", { colspan: canCommand ? 8 : 7, class: "muted" }, t("sv.no_watches"))));
      return;
    }
    tbody.replaceChildren(...watches.map((w) => el("tr", {
      tabindex: "0", class: w.watch_id === selected ? "selected" : "", dataset: { watch: w.watch_id, status: w.status },
      onclick: () => select(w.watch_id), onkeydown: (e) => { if (e.key === "Enter") select(w.watch_id); },
    },
    el("td", { class: "nowrap" }, t(`sv.kind.${w.kind}`)),
    el("td", {}, target(w), w.reason ? [el("br"), el("span", { class: "muted" }, w.reason)] : null),
    el("td", {}, statusBadge(w)),
    el("td", { class: "num hit-count" }, `${w.hits}${w.hits_capped ? "+" : ""}`),
    el("td", { class: "nowrap" }, w.last_hit ? time(w.last_hit) : "—"),
    el("td", {}, scope(w)),
    el("td", { class: "nowrap" }, w.requested_by, el("br"), el("span", { class: "muted" }, time(w.requested_at))),
    canCommand ? el("td", {}, el("button", {
      type: "button", class: "danger", onclick: (e) => { e.stopPropagation(); remove(w); },
    }, t("sv.remove"))) : null)));
  }

  async function refresh() {
    pending = null;
    try {
      const { data } = await api("/api/v1/watchlist", { params: { limit: 500 } });
      watches = data.items;
      drawWatches();
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  function soon() {
    if (!pending) pending = setTimeout(refresh, 300);
  }

  /** Operators lock a hit as evidence from its row (a cell with the button and its outcome); none for a viewer. */
  function lockCell(hit) {
    if (!canCommand) return null;
    return el("td", { class: "wrap" }, hit.hit_id ? EvidenceLock.button("hit", hit.hit_id) : null);
  }

  /** A hit's capture image(s), thumbnails: a cloned-plate hit shows both sightings side by side (the same plate on
   * two vehicles is what an operator checks by eye); a plate or face hit, the capture that matched. */
  function hitImages(hit, captureKind) {
    const cell = el("td", { class: "thumb-cell" });
    if (hit.kind === "cloned_plate" && Array.isArray(hit.sightings)) {
      cell.append(el("div", { class: "image-pair" }, ...hit.sightings.map((s, i) => {
        const figure = Console.captureImage({ kind: "vehicle", record_id: s.record_id }, { size: "thumb" });
        figure.title = `${t(i === 0 ? "image.pair_first" : "image.pair_second")} · ${time(s.capture_time)}`;
        return figure;
      })));
    } else if (hit.record_id) {
      const kind = captureKind || (hit.kind === "face" ? "face" : "vehicle");
      cell.append(Console.captureImage({ kind, record_id: hit.record_id }, { size: "thumb" }));
      if (kind === "face") cell.append(faceSearchLink(hit.record_id));
    }
    return cell;
  }

  /** The selected watch's trajectory: its hits (from HBase, then merged live from SSE) oldest first, on the map. */
  function drawSelected() {
    const { watch: w, points, total } = shown;
    document.getElementById("trajectory-heading").textContent =
      `${t("sv.trajectory")} · ${w.kind === "plate" ? w.plate : t("sv.kind.face")} · ${t("sv.n_hits", { n: total })}`;
    points.sort((a, b) => Date.parse(a.capture_time) - Date.parse(b.capture_time));
    document.querySelector("#hit-table tbody").replaceChildren(...points.map((p, i) => el("tr", { dataset: { hit: p.hit_id } },
      el("td", {}, String(i + 1)),
      el("td", { class: "mono nowrap" }, time(p.capture_time)),
      el("td", { class: "mono nowrap" }, p.checkpoint_id),
      el("td", { class: "wrap" }, place(p.location)),
      el("td", {}, p.match ? t(`sv.match.${p.match}`) : "—"),
      el("td", { class: "num" }, p.score === undefined || p.score === null ? "—" : p.score.toFixed(3)),
      lockCell(p),
      hitImages(p, w.kind === "face" ? "face" : "vehicle"))));
    if (city) {
      if (points.length) city.showTrajectory(points);
      else city.clearTrajectory();
    }
  }

  async function select(watchId) {
    selected = watchId;
    history.replaceState(null, "", `/watchlist?watch=${encodeURIComponent(watchId)}`);
    drawWatches();
    try {
      const { data } = await api(`/api/v1/watchlist/${encodeURIComponent(watchId)}/hits`, { params: { limit: 200 } });
      const hits = new Map(data.items.map((h) => [h.hit_id, h]));
      // The API's trajectory has the map's location where a hit carries none; the match and score come from the hit.
      const points = data.trajectory.map((p) => ({ ...hits.get(p.hit_id), ...p }));
      if (selected !== watchId) return;  // another watch was clicked meanwhile
      shown = { watchId, watch: data.watch, points, total: Math.max(data.watch.hits, points.length) };
      drawSelected();
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  /** A live hit of the selected watch joins its trajectory at once (the loader writes HBase a moment later). */
  function addToSelected(hit) {
    if (!shown || shown.watchId !== hit.watch_id || shown.points.some((p) => p.hit_id === hit.hit_id)) return;
    shown.points.push(hit);
    shown.total += 1;
    drawSelected();
  }

  async function remove(w) {
    if (!window.confirm(t("sv.confirm_remove", { target: w.plate || w.capture || w.watch_id }))) return;
    try {
      await api(`/api/v1/watchlist/${encodeURIComponent(w.watch_id)}`, { method: "DELETE" });
    } catch (e) {
      showError(error, e);
    }
    refresh();
  }

  // -- live hits: a row, a banner, a beep ------------------------------------------------------------
  function beep() {
    if (!document.getElementById("sound-on").checked) return;
    try {
      audio = audio || new AudioContext();
      const oscillator = audio.createOscillator();
      const gain = audio.createGain();
      oscillator.frequency.value = 880;
      gain.gain.value = 0.12;
      oscillator.connect(gain).connect(audio.destination);
      oscillator.start();
      oscillator.stop(audio.currentTime + 0.3);
    } catch {
      // no audio device: the visual cue remains
    }
  }

  function hitTarget(hit) {
    if (hit.kind === "cloned_plate") return el("span", { class: "plate" }, hit.plate || "?");
    const w = watches.find((x) => x.watch_id === hit.watch_id);
    return w ? target(w) : el("span", { class: "mono" }, hit.watch_id || "—");
  }

  function hitRow(hit, className) {
    return el("tr", { class: className, dataset: { hit: hit.hit_id, watch: hit.watch_id || "" } },
      el("td", { class: "mono nowrap" }, time(hit.capture_time)),
      el("td", { class: "nowrap" }, t(`sv.hit_kind.${hit.kind}`)),
      el("td", { class: "nowrap" }, hitTarget(hit)),
      el("td", {}, hit.kind === "cloned_plate" && hit.speed_kmh ? t("sv.implied_speed", { speed: Math.round(hit.speed_kmh) })
        : hit.match ? t(`sv.match.${hit.match}`) : hit.score ? hit.score.toFixed(3) : "—"),
      el("td", { class: "wrap" }, place(hit.location)),
      lockCell(hit),
      hitImages(hit));
  }

  /** The city's newest hits as the page opens (from HBase), so a reload does not start from an empty list. */
  async function recentHits() {
    const { data } = await api("/api/v1/hits", { params: { limit: LIVE_ROWS } });
    const tbody = document.querySelector("#live-hits tbody");
    for (const hit of data) {  // after any that arrived live meanwhile (those are newer)
      if (!tbody.querySelector(`tr[data-hit="${CSS.escape(hit.hit_id)}"]`) && tbody.children.length < LIVE_ROWS) {
        tbody.append(hitRow(hit, ""));
      }
    }
  }

  function onHit(event) {
    const hit = JSON.parse(event.data);
    const tbody = document.querySelector("#live-hits tbody");
    if (tbody.querySelector(`tr[data-hit="${CSS.escape(hit.hit_id)}"]`)) return;  // a replayed hit: same id, shown once
    tbody.prepend(hitRow(hit, "flash"));
    while (tbody.children.length > LIVE_ROWS) tbody.lastChild.remove();
    banner.hidden = false;
    banner.textContent = `${t("sv.new_hit")}: ${t(`sv.hit_kind.${hit.kind}`)} · ${hitTarget(hit).textContent} · ${place(hit.location)} · ${time(hit.capture_time)}`;
    banner.classList.remove("flash");
    void banner.offsetWidth;  // restart the animation
    banner.classList.add("flash");
    beep();
    addToSelected(hit);
    soon();
  }

  // -- commands (operators) --------------------------------------------------------------------------
  async function submit(form, body) {
    try {
      const { data } = await api("/api/v1/watchlist", { method: "POST", json: body });
      form.reset();
      showError(error, null);
      await refresh();
      select(data.watch_id);
    } catch (e) {
      showError(error, e);
    }
  }

  const plateForm = document.getElementById("plate-watch-form");
  if (plateForm) {
    plateForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const f = plateForm.elements;
      const hours = Number(f.hours.value);
      submit(plateForm, {
        kind: "plate", plate: f.plate.value.trim(), reason: f.reason.value,
        districts: f.districts.value ? [f.districts.value] : undefined,
        expires_at: hours ? new Date(Date.now() + hours * 3600000).toISOString() : undefined,
      });
    });
  }
  const faceForm = document.getElementById("face-watch-form");
  if (faceForm) {
    const fromCapture = new URLSearchParams(window.location.search).get("capture");
    if (fromCapture) faceForm.elements.capture.value = fromCapture;
    faceForm.addEventListener("submit", (e) => {
      e.preventDefault();
      const f = faceForm.elements;
      submit(faceForm, { kind: "face", capture: f.capture.value.trim(), threshold: Number(f.threshold.value), reason: f.reason.value });
    });
  }

  await refresh();
  Console.liveEvents({ [topics.surveillance_hits]: onHit, [topics.surveillance_replies]: soon,
    [topics.control_watchlist]: soon });
  recentHits().catch((e) => showError(error, e));
  try {
    const { data } = await api("/api/v1/map");
    city = CityMap.create(document.getElementById("map"), data);
    for (const d of data.districts) districtNames.set(d.code, d.name);
    const districts = document.getElementById("plate-districts");
    if (districts) districts.append(...data.districts.map((d) => el("option", { value: d.code }, `${d.name} (${d.code})`)));
  } catch (e) {
    showError(error, e);
  }
  if (selected) select(selected);
  setInterval(refresh, 30000);
})();
