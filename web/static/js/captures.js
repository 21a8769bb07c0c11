// Capture search: by plate (the trajectory, drawn on the map) or by checkpoint and time range; pages by cursor.
// A plate search needs a reason (a case number, say), sent with every page and kept in the audit trail; a
// checkpoint search sends one when given. The reason never goes into the page's address (a link carries no reason:
// whoever opens it gives their own).
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

  function render(items, isPlate) {
    // A plate's page is listed as a trajectory: oldest first, numbered as drawn on the map, each with its thumbnail
    // (an audited read like the search, with the search's reason).
    const rows = isPlate ? [...items].sort(byTime) : items;
    const reason = search.params.reason;
    tbody.replaceChildren(...rows.map((item, i) => el("tr", {
      tabindex: "0", dataset: { recordId: item.record_id },
      onclick: () => openDetail(item), onkeydown: (e) => { if (e.key === "Enter") openDetail(item); },
    },
    el("td", {}, String(i + 1)),
    el("td", { class: "mono nowrap" }, time(item.capture_time)),
    el("td", { class: "nowrap" }, t(`kind.${item.kind}`)),
    el("td", { class: "plate nowrap" }, item.plate_number || "—"),
    el("td", { class: "mono nowrap" }, item.checkpoint_id),
    el("td", { class: "wrap" }, place(item.location)),
    el("td", { class: "mono nowrap" }, item.device_ip || "—"),
    el("td", { class: "thumb-cell" }, Console.captureImage(item, { size: "thumb", reason })))));
    empty.hidden = rows.length > 0;
    if (city) {
      if (isPlate) city.showTrajectory(rows);
      else city.clearTrajectory();
      if (!isPlate && search.params.checkpoint) city.select(search.params.checkpoint, true);
    }
  }

  async function load() {
    const cursor = search.cursors[search.page];
    showError(error, null);
    try {
      const { data } = await api("/api/v1/captures", { params: { ...search.params, cursor } });
      search.cursors[search.page + 1] = data.next;
      render(data.items, Boolean(search.params.plate));
      const label = search.params.plate ? t("captures.results_plate", { plate: search.params.plate })
        : t("captures.results_checkpoint", { checkpoint: search.params.checkpoint });
      heading.textContent = `${label} · ${t("captures.n_items", { n: data.items.length })}`;
      pageNo.textContent = t("pager.page", { n: search.page + 1 });
      prev.disabled = search.page === 0;
      next.disabled = !data.next;
    } catch (e) {
      tbody.replaceChildren();
      empty.hidden = true;
      prev.disabled = true;
      next.disabled = true;
      showError(error, e);
      const refusal = search.params.plate ? reasonRefusal(e) : null;
      if (refusal) {
        flagReason(refusal);
        reasonInput.focus();
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

  function start(params) {
    search = { params, cursors: [null], page: 0 };
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

  /** Operators may watch what a capture shows: its plate, or its face (the service matches the record's feature). */
  function watchButton(record) {
    const actions = document.getElementById("detail-actions");
    actions.replaceChildren();
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
  prev.addEventListener("click", () => {
    search.page -= 1;
    load();
  });
  next.addEventListener("click", () => {
    search.page += 1;
    load();
  });

  const now = new Date();
  document.getElementById("end").value = cityLocalInput(now);
  document.getElementById("start").value = cityLocalInput(new Date(now.getTime() - 3600000));

  try {
    const { data } = await api("/api/v1/map");
    city = CityMap.create(document.getElementById("map"), data);
    document.getElementById("checkpoint-options").replaceChildren(
      ...data.checkpoints.map((c) => el("option", { value: c.checkpoint_id })));
  } catch (e) {
    showError(error, e);
  }

  const query = new URLSearchParams(window.location.search);
  if (query.get("plate")) {
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
