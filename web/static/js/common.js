// Shared by every page: messages, the API wrapper, safe element building, formatting.
// Data from the API is only ever put into the page as text (textContent), never as HTML.
"use strict";

const Console = (() => {
  const page = JSON.parse(document.getElementById("page-data").textContent);
  const messages = page.messages || {};

  /** A message of the page's language with {name} placeholders filled. */
  function t(key, params) {
    let text = Object.prototype.hasOwnProperty.call(messages, key) ? messages[key] : key;
    if (params) {
      for (const [name, value] of Object.entries(params)) text = text.split(`{${name}}`).join(String(value));
    }
    return text;
  }

  /** A message for a value the server names (a group state, say), or the value itself when none exists. */
  function tOr(key, fallback) {
    return Object.prototype.hasOwnProperty.call(messages, key) ? messages[key] : fallback;
  }

  class ApiError extends Error {
    constructor(status, detail, body, response) {
      super(detail);
      this.status = status;
      this.body = body;
      this.response = response;
    }
  }

  /** The API's error body as one readable line: FastAPI's 422 lists name the field. */
  function describe(status, body) {
    const detail = body && body.detail;
    if (Array.isArray(detail)) {
      return detail.map((d) => `${(d.loc || []).filter((p) => p !== "query" && p !== "body").join(".")}: ${d.msg}`)
        .join("; ");
    }
    if (typeof detail === "string") return body.backend ? `${t("error.backend", { name: body.backend })}: ${detail}` : detail;
    return t("error.http", { status });
  }

  /**
   * fetch() for /api/v1: the session cookie rides along, every request carries the CSRF header the API
   * requires of cookie-authenticated writes, JSON in and out; a lapsed session goes back to the login page.
   */
  async function api(path, { method = "GET", json, form, params } = {}) {
    const headers = { "X-Requested-With": "console", Accept: "application/json" };
    let body;
    if (json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(json);
    } else if (form !== undefined) {
      body = new URLSearchParams(form);
    }
    let url = path;
    if (params) {
      const query = new URLSearchParams();
      for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") query.set(k, v);
      if ([...query].length) url += `?${query}`;
    }
    const response = await fetch(url, { method, headers, body, credentials: "same-origin" });
    const text = await response.text();
    let data = null;
    try {
      data = text ? JSON.parse(text) : null;
    } catch {
      data = { detail: text };
    }
    if (response.status === 401 && !path.startsWith("/api/v1/auth/")) {
      window.location.assign(`/login?next=${encodeURIComponent(window.location.pathname + window.location.search)}`);
    }
    if (!response.ok) throw new ApiError(response.status, describe(response.status, data), data, response);
    return { data, response };
  }

  /** A form field's own message: `flag(text)` marks `input` invalid and shows `text` in `errorNode`, `clear()` undoes
   * it (a required reason that is missing, or that the API refused). */
  function fieldMessage(input, errorNode) {
    return {
      flag(message) {
        input.setCustomValidity(message);
        input.setAttribute("aria-invalid", "true");
        errorNode.textContent = message;
        errorNode.hidden = false;
      },
      clear() {
        input.setCustomValidity("");
        input.removeAttribute("aria-invalid");
        errorNode.textContent = "";
        errorNode.hidden = true;
      },
    };
  }

  /** An element with properties and children; strings become text nodes (never parsed as HTML). */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") node.className = v;
      else if (k === "dataset") Object.assign(node.dataset, v);
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else if (k in node && typeof v !== "string") node[k] = v;
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  /** Replace a table body's rows (each row an array of cells: text, node, or null for an empty cell). */
  function fillRows(tbody, rows, rowProps) {
    tbody.replaceChildren(...rows.map((cells, i) => el("tr", rowProps ? rowProps(i) : {},
      ...cells.map((c) => el("td", {}, c === null || c === undefined ? "—" : c)))));
  }

  function showError(node, error) {
    if (!error) {
      node.hidden = true;
      node.textContent = "";
      return;
    }
    node.hidden = false;
    node.textContent = error instanceof ApiError ? `${error.status}: ${error.message}` : String(error.message || error);
  }

  const locale = page.lang === "en" ? "en-US" : "zh-CN";
  const numberFormat = new Intl.NumberFormat(locale, { maximumFractionDigits: 1 });

  function number(value) {
    return value === null || value === undefined ? "—" : numberFormat.format(value);
  }

  function bytes(value) {
    if (value === null || value === undefined) return "—";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let v = value;
    let u = 0;
    while (v >= 1024 && u < units.length - 1) {
      v /= 1024;
      u += 1;
    }
    return `${numberFormat.format(v)} ${units[u]}`;
  }

  /** A duration in milliseconds in the largest sensible unit (retention, latency). */
  function duration(ms) {
    if (ms === null || ms === undefined) return "—";
    if (ms < 0) return t("bus.forever");
    const steps = [[86400000, "unit.day"], [3600000, "unit.hour"], [60000, "unit.minute"], [1000, "unit.second"]];
    for (const [size, key] of steps) if (ms >= size) return `${numberFormat.format(ms / size)} ${t(key)}`;
    return `${numberFormat.format(ms)} ${t("unit.ms")}`;
  }

  /** Epoch milliseconds or an ISO string as the city's local time (UTC+8), the way operators read it. */
  function time(value) {
    if (value === null || value === undefined || value === "") return "—";
    const date = typeof value === "number" ? new Date(value) : new Date(value);
    if (Number.isNaN(date.getTime())) return String(value);
    const shifted = new Date(date.getTime() + 8 * 3600000);
    return shifted.toISOString().replace("T", " ").replace(/\.\d+Z$/, "").replace("Z", "");
  }

  /** A datetime-local input's value (city time) as ISO-8601 with the city's offset, as the API wants. */
  function cityIso(localValue) {
    if (!localValue) return "";
    const withSeconds = localValue.length === 16 ? `${localValue}:00` : localValue;
    return `${withSeconds}+08:00`;
  }

  function cityLocalInput(date) {
    return new Date(date.getTime() + 8 * 3600000).toISOString().slice(0, 19);
  }

  /**
   * A uPlot time-series chart in city time. ``span(now)`` gives the x range in epoch seconds (the data's own
   * range would stretch one sample over years); every series draws its points, so a lone sample shows.
   */
  function timeChart(container, series, data, span, yLabel) {
    // Ticks a minute or more apart read HH:MM; closer ones need the seconds to tell them apart.
    const clock = (splits) => splits.map((ts) => time(ts * 1000).slice(11, splits[1] - splits[0] >= 60 ? 16 : 19));
    return new uPlot({
      width: container.clientWidth || 800, height: 240,
      scales: { x: { time: true, range: () => span(Date.now() / 1000) } },
      series: [{ label: t("overview.time"), value: (u, ts) => (ts === null ? "—" : time(ts * 1000)) },
        ...series.map((s) => ({ width: 2, points: { show: true, size: 5 }, ...s }))],
      // 80 px between ticks at least: an HH:MM:SS label is about 60 px wide, uPlot's default spacing overlaps them.
      axes: [{ space: 80, values: (u, splits) => clock(splits) }, { size: 60, label: yLabel }],
    }, data, container);
  }

  let storeChecked = null;
  /** Whether the object store answers (``/api/v1/health``, asked at most every 30 s): while it is down, pages show
   * why instead of sending each image request to a 503. Resolves to null (up) or the store's error. */
  function objectStoreDown() {
    if (!storeChecked || Date.now() - storeChecked.at > 30000) {
      const answer = fetch("/api/v1/health", { credentials: "same-origin" })
        .then((r) => r.json()).then((h) => (h.object_store && !h.object_store.up ? h.object_store.error || "down" : null))
        .catch(() => null);
      storeChecked = { at: Date.now(), answer };
    }
    return storeChecked.answer;
  }

  /**
   * A capture's image through the console (``/api/v1/captures/{kind}/{id}/image``; ``size`` "thumb" or "full"), in a
   * <figure>. The browser loads it as an <img> with the page's session, so the store's key never reaches the page.
   * A record that says why it has no image (``image_url`` empty, ``image_error``) shows that reason without asking,
   * and so does a store that is down; when loading fails, ``explain`` asks the API once more for its reason (corrupt,
   * too large) and shows it (the detail's one image); lists just mark it unavailable. ``reason`` goes to the audit
   * trail with the read. ``retries``: a live wall's capture may reach the page before the ingest job has stored its
   * record, so its image is asked for again after 2 s, 4 s...
   */
  function captureImage(capture, { size = "thumb", reason, explain = false, retries = 0 } = {}) {
    const figure = el("figure", { class: `capture-image ${size}`, dataset: { recordId: capture.record_id } });
    // A list's thumbnail that cannot be shown is a dash (the reason in its tooltip), so a list stays compact.
    const unavailable = (why, cls = "muted") => {
      const text = `${t("image.unavailable")}${why ? `: ${why}` : ""}`;
      figure.classList.add("missing");
      figure.replaceChildren(el("figcaption", { class: cls, title: text }, explain || size !== "thumb" ? text : "—"));
    };
    if (capture.image_url === "") {
      figure.classList.add("missing");
      figure.append(el("figcaption", { class: "muted" }, t("image.none", { why: capture.image_error || "?" })));
      return figure;
    }
    const path = `/api/v1/captures/${encodeURIComponent(capture.kind)}/${encodeURIComponent(capture.record_id)}/image`;
    const params = { size: size === "thumb" ? "thumb" : undefined, reason: reason || undefined };
    const query = new URLSearchParams(Object.entries(params).filter(([, v]) => v));
    objectStoreDown().then((down) => {
      if (down) {
        unavailable(t("error.backend", { name: "object_store" }));
        return;
      }
      const img = el("img", {
        src: `${path}${[...query].length ? `?${query}` : ""}`, decoding: "async",
        alt: t("image.alt", { kind: t(`kind.${capture.kind}`), id: capture.record_id }),
      });
      let tries = 0;
      img.addEventListener("error", async () => {
        if (tries < retries) {
          tries += 1;
          setTimeout(() => { img.src = `${path}?${new URLSearchParams({ ...Object.fromEntries(query), try: tries })}`; },
            2000 * tries);
          return;
        }
        unavailable(null, "error");
        if (!explain) return;
        try {
          await api(path, { params });
        } catch (e) {
          unavailable(e.message, "error");
        }
      });
      img.addEventListener("load", () => figure.classList.add("loaded"));
      figure.append(img);
    });
    return figure;
  }

  function hasRole(role) {
    const order = ["viewer", "operator", "admin"];
    return Boolean(page.user) && order.indexOf(page.user.role) >= order.indexOf(role);
  }

  const logout = document.getElementById("logout");
  if (logout) {
    logout.addEventListener("click", async () => {
      try {
        await api("/api/v1/auth/logout", { method: "POST" });
      } finally {
        window.location.assign("/login");
      }
    });
  }

  /**
   * The page's live updates: one `/api/v1/events` stream for the topics of `handlers` (topic -> handler of its
   * MessageEvent). The page's `#live-state` badge says whether it is connected, `onOpen` runs at each (re)connection
   * (what changed while the stream was away has no event of its own), and the stream closes with the page.
   */
  function liveEvents(handlers, onOpen) {
    const badge = document.getElementById("live-state");
    const source = new EventSource(`/api/v1/events?topics=${encodeURIComponent(Object.keys(handlers).join(","))}`);
    source.addEventListener("open", () => {
      badge.textContent = t("overview.live");
      badge.className = "badge live";
      if (onOpen) onOpen();
    });
    source.addEventListener("error", () => {
      badge.textContent = t("overview.reconnecting");
      badge.className = "badge down";
    });
    for (const [topic, handler] of Object.entries(handlers)) source.addEventListener(topic, handler);
    window.addEventListener("pagehide", () => source.close());
    return source;
  }

  /**
   * The site banner. A console whose site stands by (the DR site before a switchover, the primary after one) is
   * read-only: every page says so and names the active site, and the operator's page goes to the active site's
   * console, except the DR page, from which an admin follows and runs switchovers at either site. Asked again every
   * few seconds, so that pages already open follow a switchover.
   */
  const SITE_POLL_MS = 5000;
  const SEND_AFTER_MS = 3000;
  let sending = null;
  function showSite(site) {
    let banner = document.getElementById("site-banner");
    if (!site || site.acting) {
      if (banner) banner.remove();
      if (sending) clearTimeout(sending);
      sending = null;
      return;
    }
    const names = { site: t(`site.${site.site}`), active: t(`site.${site.active}`),
      target: t(`site.${site.switching_to}`) };
    const text = site.switching_to ? t("site.switching", names) : t("site.standby", names);
    const go = site.active_console && !site.switching_to
      ? el("a", { href: site.active_console + window.location.pathname + window.location.search, id: "site-go" },
        t("site.go", names))
      : null;
    const staying = page.page === "dr" || page.page === "login";
    const parts = [el("strong", {}, text), go ? " " : null, go, go && !staying ? ` ${t("site.sending")}` : null];
    if (!banner) {
      banner = el("div", { id: "site-banner", class: "site-banner", role: "status" });
      document.querySelector("main").before(banner);
    }
    banner.replaceChildren(...parts.filter((p) => p !== null));
    if (go && !staying && !sending) sending = setTimeout(() => window.location.assign(go.href), SEND_AFTER_MS);
  }
  if (page.site) {
    showSite(page.site);
    if (page.user) {
      setInterval(async () => {
        try {
          showSite((await api("/api/v1/site")).data);
        } catch {
          // the console itself is going away: the next answer says where to go
        }
      }, SITE_POLL_MS);
    }
  }

  return {
    page, t, tOr, api, ApiError, el, fillRows, showError, number, bytes, duration, time, cityIso, cityLocalInput, hasRole,
    timeChart, fieldMessage, captureImage, liveEvents,
  };
})();
