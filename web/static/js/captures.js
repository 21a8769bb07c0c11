// Capture search: by plate (the trajectory, drawn on the map), by checkpoint and time range, or vehicles by any
// mix of conditions in a time range (their checkpoints marked on the map, a histogram of the matches over the
// range); pages by cursor. A plate or vehicle search needs a reason (a case number, say), sent with every page and
// kept in the audit trail; a checkpoint search sends one when given. The reason never goes into the page's address
// (a link carries no reason: whoever opens it gives their own).
// The vehicle search reads a bounded number of index rows per request, so a page may hold fewer matches than asked
// for and still have a next page: the page says so, and Next keeps going. Its histogram is drawn from the pages
// fetched so far (the API gives no total count: counting would read the whole range), and says so.
"use strict";

(async () => {
  const { api, t, el, showError, time, cityIso, cityLocalInput } = Console;
  const error = document.getElementById("search-error");
  const tbody = document.querySelector("#results tbody");
  const empty = document.getElementById("results-empty");
  const prev = document.getElementById("prev-page");
  const next = document.getElementById("next-page");
  const pageNo = document.getElementById("page-no");
  const heading = document.getElementById("results-heading");
  const detail = document.getElementById("detail");
  const reasonInput = document.getElementById("reason");
  const reasonError = document.getElementById("reason-error");
  /** The reason field says why a plate search did not go out (or why the API refused it), until it is edited. */
  const { flag: flagReason, clear: clearReason } = Console.fieldMessage(reasonInput, reasonError);
  const vsReason = document.getElementById("vs-reason");
  const vsReasonField = Console.fieldMessage(vsReason, document.getElementById("vs-reason-error"));
  const partial = document.getElementById("results-partial");
  const VEHICLES = "/api/v1/captures/vehicles";
  /** The vehicle search's optional conditions (query parameter -> its label). */
  const VEHICLE_FIELDS = {
    district: "field.district", checkpoint: "field.checkpoint_id", lane: "field.lane", direction: "map.direction",
    plate: "vs.plate", plate_color: "field.plate_color", vehicle_color: "field.vehicle_color",
    vehicle_type: "field.vehicle_type", brand: "field.vehicle_brand",
  };
  let city = null;
  // The current search: its query, the cursor of each page seen so far, and the page shown.
  let search = null;

  /** Where a capture was: the district's name (its code when the map has no name) and the crossroad. */
  function place(location) {
    if (!location) return "—";
    return `${location.district_name || location.district} · ${t("map.crossroad")} ${location.crossroad} · ${t(`direction.${location.direction}`)}`;
  }

  function byTime(a, b) {
    return Date.parse(a.capture_time) - Date.parse(b.capture_time);
  }

  /** A vehicle hit's searchable attributes in one line: colours, type, brand, lane. */
  function attributes(item) {
    return `${item.vehicle_color} ${item.vehicle_type} · ${item.vehicle_brand} · ${t("vs.lane", { n: item.lane })}`;
  }

  function render(items, isPlate) {
    // A plate's page is listed as a trajectory: oldest first, numbered as drawn on the map, each with its thumbnail
    // (an audited read like the search, with the search's reason).
    const rows = isPlate ? [...items].sort(byTime) : items;
    const isVehicles = search.path === VEHICLES;
    const reason = search.params.reason;
    document.getElementById("kind-heading").textContent = isVehicles ? t("vs.vehicle") : t("field.kind");
    tbody.replaceChildren(...rows.map((item, i) => el("tr", {
      tabindex: "0", dataset: { recordId: item.record_id },
      onclick: () => openDetail(item), onkeydown: (e) => { if (e.key === "Enter") openDetail(item); },
    },
    el("td", {}, String(i + 1)),
    el("td", { class: "mono nowrap" }, time(item.capture_time)),
    isVehicles ? el("td", { class: "vehicle-attributes" }, attributes(item)) : el("td", { class: "nowrap" }, t(`kind.${item.kind}`)),
    el("td", { class: "plate nowrap", title: isVehicles ? item.plate_color : undefined }, item.plate_number || "—",
      isVehicles && el("small", { class: "plate-color" }, ` ${item.plate_color}`)),
    el("td", { class: "mono nowrap" }, item.checkpoint_id),
    el("td", { class: "wrap" }, place(item.location)),
    el("td", { class: "mono nowrap" }, item.device_ip || "—"),
    el("td", { class: "thumb-cell" }, Console.captureImage(item, { size: "thumb", reason })))));
    empty.hidden = rows.length > 0;
    if (city) {
      if (isPlate) city.showTrajectory(rows);
      else city.clearTrajectory();
      // A vehicle search's hits: their checkpoints marked on the map, and the map framed on them.
      const hit = isVehicles ? [...new Set(rows.map((item) => item.checkpoint_id))] : [];
      city.highlight(hit);
      const where = hit.map((id) => city.markers.get(id)).filter(Boolean).map((m) => m.getLatLng());
      if (where.length) city.map.fitBounds(L.latLngBounds(where).pad(0.5), { maxZoom: 15, animate: false });
      if (!isPlate && search.params.checkpoint) city.select(search.params.checkpoint, true);
    }
  }

  /** Bucket width for a histogram of about 24 bars over ``span`` ms: a round number of minutes or hours. */
  function bucketMs(span) {
    const steps = [1, 5, 10, 15, 30, 60, 120, 180, 360, 720, 1440].map((m) => m * 60000);
    return steps.find((step) => span / step <= 24) || Math.ceil(span / 24 / 86400000) * 86400000;
  }

  function bucketLabel(step) {
    return step < 3600000 ? t("unit.minutes", { n: step / 60000 }) : t("unit.hours", { n: step / 3600000 });
  }

  /** Matches per time bucket over the query's range, as SVG bars, from every page fetched so far in this search. */
  function drawHistogram() {
    const box = document.getElementById("vs-histogram");
    box.hidden = search.path !== VEHICLES;
    if (box.hidden) return;
    const from = Date.parse(search.params.from);
    const to = Date.parse(search.params.to);
    const step = bucketMs(to - from);
    const counts = new Array(Math.max(1, Math.ceil((to - from) / step))).fill(0);
    for (const item of search.seen.values()) {
      const at = Math.floor((Date.parse(item.capture_time) - from) / step);
      if (at >= 0 && at < counts.length) counts[at] += 1;
    }
    document.getElementById("vs-histogram-title").textContent = t("vs.histogram",
      { bucket: bucketLabel(step), pages: search.fetched.size, n: search.seen.size });
    const svg = document.getElementById("vs-histogram-chart");
    const width = 600;
    const height = 140;
    const bottom = 18;
    const top = Math.max(1, ...counts);
    const bar = width / counts.length;
    const ns = "http://www.w3.org/2000/svg";
    const node = (tag, attrs, text) => {
      const n = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
      if (text !== undefined) n.textContent = text;
      return n;
    };
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const parts = counts.flatMap((n, i) => {
      const h = (n / top) * (height - bottom - 14);
      const x = i * bar;
      const rect = node("rect", { x: x + 1, y: height - bottom - h, width: Math.max(1, bar - 2), height: h, class: "bar" });
      rect.append(node("title", {}, `${time(from + i * step).slice(5, 16)} · ${n}`));
      return n ? [rect, node("text", { x: x + bar / 2, y: height - bottom - h - 3, class: "count" }, String(n))] : [rect];
    });
    const ticks = [0, Math.floor(counts.length / 2), counts.length].map((i) =>
      node("text", { x: Math.min(width - 40, Math.max(40, i * bar)), y: height - 4, class: "tick" }, time(from + i * step).slice(5, 16)));
    svg.replaceChildren(node("line", { x1: 0, y1: height - bottom, x2: width, y2: height - bottom, class: "axis" }), ...parts, ...ticks);
  }

  /** What a vehicle search asked for, in one line (its conditions, or "the time range"). */
  function conditions(params) {
    const given = Object.entries(VEHICLE_FIELDS).filter(([k]) => params[k]).map(([k, label]) => `${t(label)} ${params[k]}`);
    return given.length ? given.join(" · ") : t("vs.all");
  }

  async function load() {
    const cursor = search.cursors[search.page];
    showError(error, null);
    const isVehicles = search.path === VEHICLES;
    try {
      const { data } = await api(search.path, { params: { ...search.params, cursor } });
      search.cursors[search.page + 1] = data.next;
      render(data.items, !isVehicles && Boolean(search.params.plate));
      const label = isVehicles ? t("vs.results", { conditions: conditions(search.params) })
        : search.params.plate ? t("captures.results_plate", { plate: search.params.plate })
          : t("captures.results_checkpoint", { checkpoint: search.params.checkpoint });
      heading.textContent = `${label} · ${t("captures.n_items", { n: data.items.length })}`;
      pageNo.textContent = t("pager.page", { n: search.page + 1 });
      prev.disabled = search.page === 0;
      next.disabled = !data.next;
      partial.hidden = !(isVehicles && data.next && data.items.length < Number(search.params.limit));
      if (isVehicles && !search.fetched.has(search.page)) {
        search.fetched.add(search.page);
        for (const item of data.items) search.seen.set(item.record_id, item);
      }
      drawHistogram();
    } catch (e) {
      tbody.replaceChildren();
      empty.hidden = true;
      partial.hidden = true;
      prev.disabled = true;
      next.disabled = true;
      showError(error, e);
      const refusal = isVehicles || search.params.plate ? reasonRefusal(e) : null;
      const field = isVehicles ? vsReasonField : { flag: flagReason };
      if (refusal) {
        field.flag(refusal === t("captures.reason_required") && isVehicles ? t("vs.reason_required") : refusal);
        (isVehicles ? vsReason : reasonInput).focus();
      }
    }
  }

  /** The API's 422 about ``reason`` (missing, too long...) as the field's message, or null for any other error. */
  function reasonRefusal(e) {
    const detail = e instanceof Console.ApiError && e.status === 422 && e.body && e.body.detail;
    const about = Array.isArray(detail) ? detail.find((d) => (d.loc || []).includes("reason")) : null;
    if (!about) return null;
    return about.type === "missing" || /required/.test(about.msg) ? t("captures.reason_required") : about.msg;
  }

  // The field says why itself, in the page's language (the browser's bubble would cover it and then vanish).
  reasonInput.addEventListener("invalid", (event) => {
    event.preventDefault();
    if (reasonInput.validity.valueMissing) flagReason(t("captures.reason_required"));
    reasonInput.focus();
  });
  reasonInput.addEventListener("input", clearReason);
  vsReason.addEventListener("invalid", (event) => {
    event.preventDefault();
    if (vsReason.validity.valueMissing) vsReasonField.flag(t("vs.reason_required"));
    vsReason.focus();
  });
  vsReason.addEventListener("input", vsReasonField.clear);

  function start(params, path = "/api/v1/captures") {
    // ``seen``/``fetched``: a vehicle search's matches on the pages fetched so far (its histogram's data).
    search = { params, path, cursors: [null], page: 0, seen: new Map(), fetched: new Set() };
    detail.hidden = true;
    const query = new URLSearchParams(Object.entries(params).filter(([k, v]) => v && k !== "reason"));
    history.replaceState(null, "", `/captures?${query}`);
    return load();
  }

  async function openDetail(item) {
    for (const row of tbody.children) row.classList.toggle("selected", row.dataset.recordId === item.record_id);
    detail.hidden = false;
    document.getElementById("detail-id").textContent = item.record_id;
    const dl = document.getElementById("detail-fields");
    const picture = document.getElementById("detail-image");
    dl.replaceChildren(el("dt", {}, t("common.loading")));
    picture.replaceChildren();
    try {
      // The search's reason goes with the detail read too: the trail shows why the record was opened.
      const { data } = await api(`/api/v1/captures/${encodeURIComponent(item.kind)}/${encodeURIComponent(item.record_id)}`,
        { params: { reason: search && search.params.reason } });
      const record = data;
      picture.replaceChildren(Console.captureImage(record, { size: "full", reason: search && search.params.reason,
        explain: true }));
      const first = ["record_id", "kind", "capture_time", "ingest_time", "latency_ms"];
      const keys = [...first.filter((k) => k in record), ...Object.keys(record).filter((k) => !first.includes(k)).sort()];
      dl.replaceChildren(...keys.filter((k) => record[k] !== undefined).flatMap((k) => {
        let value = record[k];
        if (k === "latency_ms" && value !== null) value = `${value} ${t("unit.ms")}`;
        else if (k === "location" && value) value = `${place(value)} (${value.lat}, ${value.lon})`;
        else if (k === "kind") value = t(`kind.${value}`);
        else if (typeof value === "boolean") value = value ? t("common.yes") : t("common.no");
        else if (value !== null && typeof value === "object") value = JSON.stringify(value);
        else if (k.endsWith("_time")) value = `${time(value)} (${value})`;
        const text = value === null ? "—" : String(value);
        return [el("dt", {}, t(`field.${k}`) === `field.${k}` ? k : t(`field.${k}`)),
          el("dd", { class: "mono", title: text.length > 200 ? text : undefined }, text.length > 200 ? `${text.slice(0, 200)}…` : text)];
      }));
      if (city && record.checkpoint_id) city.select(record.checkpoint_id);
      watchButton(record);
      const lock = EvidenceLock.button("capture", record.record_id, { id: "lock-capture" });
      if (lock) document.getElementById("detail-actions").append(" ", lock);
    } catch (e) {
      dl.replaceChildren();
      showError(error, e);
    }
  }

  /** A face capture's "Search this face" (the face search page with the capture filled in; it asks for its own
   *  reason); operators may also watch what a capture shows: its plate, or its face (the service matches the
   *  record's feature). */
  function watchButton(record) {
    const actions = document.getElementById("detail-actions");
    actions.replaceChildren();
    if (record.kind === "face") {
      actions.append(el("a", { href: `/faces?capture=${encodeURIComponent(record.record_id)}`, id: "search-this-face",
        class: "face-search-link" }, t("faces.search_this")), " ");
    }
    const body = record.kind === "face" ? { kind: "face", capture: record.record_id }
      : record.plate_number ? { kind: "plate", plate: record.plate_number } : null;
    if (!body || !Console.hasRole("operator")) return;
    actions.append(el("button", {
      type: "button", class: "primary", id: "watch-this",
      onclick: async () => {
        try {
          const { data } = await api("/api/v1/watchlist", { method: "POST", json: body });
          actions.replaceChildren(el("a", { href: `/watchlist?watch=${encodeURIComponent(data.watch_id)}` },
            t("sv.watch_added", { id: data.watch_id })));
        } catch (e) {
          showError(error, e);
        }
      },
    }, t(record.kind === "face" ? "sv.watch_this_face" : "sv.watch_this_plate")));
  }

  document.getElementById("plate-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    const reason = form.get("reason").trim();
    if (!reason) { // only spaces: as good as empty
      flagReason(t("captures.reason_required"));
      reasonInput.reportValidity();
      return;
    }
    start({ plate: form.get("plate").trim().toUpperCase(), reason, limit: form.get("limit") });
  });
  document.getElementById("checkpoint-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    start({
      checkpoint: form.get("checkpoint").trim(), start: cityIso(form.get("start")), end: cityIso(form.get("end")),
      reason: form.get("reason").trim(), limit: form.get("limit"),
    });
  });
  document.getElementById("vehicle-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const form = new FormData(e.target);
    const reason = form.get("reason").trim();
    if (!reason) {
      vsReasonField.flag(t("vs.reason_required"));
      vsReason.reportValidity();
      return;
    }
    const params = { from: cityIso(form.get("from")), to: cityIso(form.get("to")), reason, limit: form.get("limit") };
    for (const k of Object.keys(VEHICLE_FIELDS)) {
      const value = form.get(k).trim();
      if (value) params[k] = k === "plate" ? value.toUpperCase() : value;
    }
    start(params, VEHICLES);
  });
  prev.addEventListener("click", () => {
    search.page -= 1;
    load();
  });
  next.addEventListener("click", () => {
    search.page += 1;
    load();
  });

  const now = new Date();
  for (const [start, end] of [["start", "end"], ["vs-from", "vs-to"]]) {
    document.getElementById(end).value = cityLocalInput(now);
    document.getElementById(start).value = cityLocalInput(new Date(now.getTime() - 3600000));
  }

  try {
    const { data } = await api("/api/v1/map");
    city = CityMap.create(document.getElementById("map"), data);
    document.getElementById("checkpoint-options").replaceChildren(
      ...data.checkpoints.map((c) => el("option", { value: c.checkpoint_id })));
    document.getElementById("vs-district").append(
      ...data.districts.map((d) => el("option", { value: d.code }, `${d.name} (${d.code})`)));
    // A direction is the third field of a checkpoint id; the map names it (N, E, S, W).
    const directions = new Map(data.checkpoints.map((c) => [c.checkpoint_id.split("#")[2], c.direction]));
    document.getElementById("vs-direction").append(...[...directions].sort().map(([field, name]) =>
      el("option", { value: field }, t(`direction.${name}`))));
  } catch (e) {
    showError(error, e);
  }

  const query = new URLSearchParams(window.location.search);
  if (query.get("from")) {
    // A link to a vehicle search: its conditions are filled in, the search waits for this user's reason.
    const form = document.getElementById("vehicle-form").elements;
    form.from.value = query.get("from").slice(0, 19);
    if (query.get("to")) form.to.value = query.get("to").slice(0, 19);
    for (const k of [...Object.keys(VEHICLE_FIELDS), "limit"]) if (query.get(k)) form[k].value = query.get(k);
    vsReason.focus();
  } else if (query.get("plate")) {
    // A link to a plate's trajectory: the plate is filled in, the search waits for this user's reason.
    document.getElementById("plate").value = query.get("plate");
    if (query.get("limit")) document.getElementById("plate-form").elements.limit.value = query.get("limit");
    reasonError.textContent = t("captures.reason_for_link", { plate: query.get("plate") });
    reasonError.hidden = false;
    reasonInput.focus();
  } else if (query.get("checkpoint")) {
    document.getElementById("checkpoint").value = query.get("checkpoint");
    if (query.get("start")) document.getElementById("start").value = query.get("start").slice(0, 19);
    if (query.get("end")) document.getElementById("end").value = query.get("end").slice(0, 19);
    start({
      checkpoint: query.get("checkpoint"), start: query.get("start") || cityIso(document.getElementById("start").value),
      end: query.get("end") || cityIso(document.getElementById("end").value), limit: query.get("limit") || "50",
    });
  }
})();
