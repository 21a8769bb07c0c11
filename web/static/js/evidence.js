// Evidence locks. ``EvidenceLock.button(kind, id, outcome)`` is the "Lock as evidence" action the capture, watchlist
// and video pages put beside an item (operators and admins only): a dialog asks for the reason (a case number,
// required), POSTs /api/v1/evidence and says how it ended (locked, already locked, not found, error).
// On /evidence (the page has #evidence-table) it also runs the page: the locks newest first, paged by cursor; a row
// opens the locked record (its fields as text), a locked video plays from its evidence media URL; admins unlock.
// Data goes into the page as text only (Console.el), never as HTML.
"use strict";

const EvidenceLock = (() => {
  const { api, t, el, ApiError } = Console;
  let dialog = null;

  /** The last outcome of each item's lock ("kind/id" -> {level, message, linked}): a table drawn again after a
   *  lock (a refresh, a second load racing the first) shows it on the item's new row. */
  const outcomes = new Map();

  function kindName(kind) {
    return t(`ev.kind.${kind}`);
  }

  /** The one lock dialog of the page (made at its first use). */
  function theDialog() {
    if (dialog) return dialog;
    const reason = el("input", {
      id: "lock-reason", name: "reason", required: true, maxlength: "200", size: "30",
      placeholder: t("ev.reason_example"), "aria-describedby": "lock-reason-error",
    });
    const reasonError = el("span", { id: "lock-reason-error", class: "field-error", role: "alert", hidden: true });
    const what = el("p", { id: "lock-what", class: "wrap" });
    const form = el("form", { id: "lock-form", method: "dialog" },
      el("h2", {}, t("ev.lock_title")), what,
      el("label", { class: "reason-field" }, t("ev.reason"), " ", reason), reasonError,
      el("p", { class: "dialog-buttons" },
        el("button", { type: "submit", class: "primary", id: "lock-submit" }, t("ev.submit")),
        el("button", { type: "button", id: "lock-cancel", onclick: () => node.close() }, t("ev.cancel"))));
    const node = el("dialog", { id: "lock-dialog", class: "lock-dialog", "aria-labelledby": "lock-title" }, form);
    form.querySelector("h2").id = "lock-title";

    const { flag, clear } = Console.fieldMessage(reason, reasonError);
    reason.addEventListener("invalid", (event) => {
      event.preventDefault();
      if (reason.validity.valueMissing) flag(t("ev.reason_required"));
      reason.focus();
    });
    reason.addEventListener("input", clear);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      const text = reason.value.trim();
      if (!text) { // only spaces: as good as empty
        flag(t("ev.reason_required"));
        reason.reportValidity();
        return;
      }
      const target = dialog.target;
      const submit = form.querySelector("#lock-submit");
      submit.disabled = true;
      try {
        await api("/api/v1/evidence", { method: "POST", json: { kind: target.kind, id: target.id, reason: text } });
        node.close();
        target.report("ok", t("ev.locked", { reason: text }), true);
      } catch (e) {
        if (e instanceof ApiError && e.status === 422) {
          const detail = Array.isArray(e.body && e.body.detail) ? e.body.detail : [];
          const about = detail.find((d) => (d.loc || []).includes("reason"));
          if (about) {
            flag(about.msg);
            return;
          }
        }
        node.close();
        if (e instanceof ApiError && e.status === 409) target.report("ok", t("ev.already_locked"), true);
        else if (e instanceof ApiError && e.status === 404) target.report("error", t("ev.not_found"), false);
        else {
          const message = e instanceof ApiError ? `${e.status}: ${e.message}` : String(e.message || e);
          target.report("error", t("ev.failed", { message }), false);
        }
      } finally {
        submit.disabled = false;
      }
    });
    document.body.append(node);
    dialog = { node, reason, what, clear, target: null };
    return dialog;
  }

  function open(kind, id, report) {
    const d = theDialog();
    d.target = { kind, id, report };
    d.what.textContent = t("ev.lock_what", { kind: kindName(kind), id });
    d.reason.value = "";
    d.clear();
    d.node.showModal();
    d.reason.focus();
  }

  /**
   * The "Lock as evidence" button of an item, with its outcome line after it (a span, text only); null for a
   * viewer (the API refuses a viewer's lock anyway).
   */
  function button(kind, id, props) {
    if (!Console.hasRole("operator")) return null;
    const key = `${kind}/${id}`;
    const outcome = el("span", { class: "lock-outcome", role: "status" });
    const paint = (node, { level, message, linked }) => {
      node.className = `lock-outcome ${level}`;
      node.replaceChildren(message, linked ? " " : "", linked ? el("a", { href: "/evidence" }, t("ev.see_all")) : "");
    };
    const report = (level, message, linked) => {
      outcomes.set(key, { level, message, linked });
      paint(outcome, outcomes.get(key));
      for (const node of document.querySelectorAll(".lock-outcome")) {
        if (node !== outcome && node.dataset.evidenceKey === key) paint(node, outcomes.get(key));
      }
    };
    outcome.dataset.evidenceKey = key;
    if (outcomes.has(key)) paint(outcome, outcomes.get(key));
    const node = el("button", {
      type: "button", class: "lock-evidence", ...(props || {}),
      dataset: { evidenceKind: kind, evidenceId: id },
      onclick: (event) => {
        event.stopPropagation(); // a button in a clickable row does not also open the row
        open(kind, id, report);
      },
    }, t("ev.lock"));
    return el("span", { class: "lock-action" }, node, " ", outcome);
  }

  return { button, open, kindName };
})();

if (document.getElementById("evidence-table")) {
  (async () => {
    const { api, t, el, showError, time, bytes } = Console;
    const isAdmin = Console.hasRole("admin");
    const error = document.getElementById("evidence-error");
    const state = document.getElementById("evidence-state");
    const tbody = document.querySelector("#evidence-table tbody");
    const empty = document.getElementById("evidence-empty");
    const prev = document.getElementById("prev-page");
    const next = document.getElementById("next-page");
    const pageNo = document.getElementById("page-no");
    const detail = document.getElementById("evidence-detail");
    const lockFields = document.getElementById("lock-fields");
    const recordFields = document.getElementById("record-fields");
    const footage = document.getElementById("evidence-footage");
    const actions = document.getElementById("evidence-actions");
    const LIMIT = 50;
    const paging = { cursors: [null], page: 0 };

    function rowKey(item) {
      return `${item.kind}/${item.id}`;
    }

    function itemPath(kind, id) {
      // A video's key has slashes: each segment is encoded, the slashes stay (the route takes a path).
      return `${encodeURIComponent(kind)}/${id.split("/").map(encodeURIComponent).join("/")}`;
    }

    async function load() {
      showError(error, null);
      try {
        const { data } = await api("/api/v1/evidence", { params: { limit: LIMIT, cursor: paging.cursors[paging.page] } });
        paging.cursors[paging.page + 1] = data.next;
        tbody.replaceChildren(...data.items.map((item) => el("tr", {
          tabindex: "0", dataset: { kind: item.kind, id: item.id },
          onclick: () => openLock(item), onkeydown: (e) => { if (e.key === "Enter") openLock(item); },
        },
        el("td", { class: "nowrap" }, EvidenceLock.kindName(item.kind)),
        el("td", { class: "mono wrap" }, item.id),
        el("td", { class: "wrap reason" }, item.reason),
        el("td", { class: "nowrap" }, item.locked_by),
        el("td", { class: "mono nowrap" }, time(item.locked_at)))));
        empty.hidden = data.items.length > 0;
        pageNo.textContent = t("pager.page", { n: paging.page + 1 });
        prev.disabled = paging.page === 0;
        next.disabled = !data.next;
      } catch (e) {
        tbody.replaceChildren();
        prev.disabled = true;
        next.disabled = true;
        showError(error, e);
      }
    }

    /** A record field's name: the evidence page's own (video, hit), else the capture page's, else the key itself. */
    function label(key) {
      for (const name of [`ev.field.${key}`, `field.${key}`]) if (t(name) !== name) return t(name);
      return key;
    }

    /** Where a capture or a hit was, as the capture page says it: district, crossroad, direction, coordinates. */
    function place(location) {
      const where = location.crossroad !== undefined
        ? `${location.district_name || location.district} · ${t("map.crossroad")} ${location.crossroad} · ${t(`direction.${location.direction}`)} ` : "";
      return `${where}(${location.lat}, ${location.lon})`;
    }

    /** A record's value as one line of text (never markup): times in city time, an object as its key: value pairs. */
    function shown(key, value) {
      if (value === null || value === undefined || value === "") return "—";
      if (typeof value === "boolean") return value ? t("common.yes") : t("common.no");
      if (key === "location" && typeof value === "object" && "lat" in value) return place(value);
      if (key === "kind" && t(`kind.${value}`) !== `kind.${value}`) return t(`kind.${value}`);
      if (key === "latency_ms") return `${value} ${t("unit.ms")}`;
      if (key === "size" && typeof value === "number") return `${bytes(value)} (${value})`;
      if (key === "match" && t(`sv.match.${value}`) !== `sv.match.${value}`) return t(`sv.match.${value}`);
      if (Array.isArray(value)) return value.map((v) => (typeof v === "object" && v !== null ? JSON.stringify(v) : String(v))).join(", ");
      if (typeof value === "object") {
        const pairs = Object.entries(value).map(([k, v]) => `${k}: ${typeof v === "object" && v !== null ? JSON.stringify(v) : v}`);
        return pairs.length ? pairs.join(" · ") : "—";
      }
      if (typeof value === "string" && (key.endsWith("_time") || key.endsWith("_at") || key === "last_modified")) {
        return `${time(value)} (${value})`;
      }
      return String(value);
    }

    /** A record's keys, the identifying ones first (as on the capture page), then the rest by name. */
    function ordered(record) {
      const first = ["record_id", "hit_id", "watch_id", "url", "key", "kind", "capture_time", "start_time",
        "ingest_time", "latency_ms"].filter((k) => k in record);
      return [...first, ...Object.keys(record).filter((k) => !first.includes(k)).sort()];
    }

    function facts(dl, pairs) {
      dl.replaceChildren(...pairs.flatMap(([name, text]) => [el("dt", {}, name), el("dd", { class: "mono wrap" }, text)]));
    }

    async function openLock(item) {
      for (const row of tbody.children) row.classList.toggle("selected", row.dataset.kind === item.kind && row.dataset.id === item.id);
      detail.hidden = false;
      state.hidden = true;
      document.getElementById("detail-id").textContent = `${EvidenceLock.kindName(item.kind)} ${item.id}`;
      recordFields.replaceChildren(el("dt", {}, t("common.loading")));
      lockFields.replaceChildren();
      footage.replaceChildren();
      actions.replaceChildren();
      try {
        const { data } = await api(`/api/v1/evidence/${itemPath(item.kind, item.id)}`);
        facts(lockFields, [[t("ev.kind"), EvidenceLock.kindName(data.kind)], [t("ev.id"), data.id],
          [t("ev.reason_col"), data.reason], [t("ev.locked_by"), data.locked_by],
          [t("ev.locked_at"), shown("locked_at", data.locked_at)]]);
        const record = data.record || {};
        facts(recordFields, ordered(record).map((k) => [label(k), shown(k, record[k])]));
        if (data.kind === "video") {
          footage.append(el("h3", {}, t("ev.footage")), el("video", {
            id: "evidence-video", controls: true, preload: "metadata", class: "evidence-video",
            src: `/api/v1/evidence/${itemPath("video", data.id)}/media`,
          }));
        }
        if (isAdmin) {
          actions.append(el("button", { type: "button", class: "danger", id: "unlock", onclick: () => unlock(data) }, t("ev.unlock")));
        }
      } catch (e) {
        recordFields.replaceChildren();
        if (e instanceof Console.ApiError && e.status === 404) {
          state.hidden = false;
          state.className = "error";
          state.textContent = t("ev.gone");
        } else showError(error, e);
      }
    }

    async function unlock(lock) {
      const name = { kind: EvidenceLock.kindName(lock.kind), id: lock.id };
      if (!window.confirm(t("ev.confirm_unlock", name))) return;
      try {
        await api(`/api/v1/evidence/${itemPath(lock.kind, lock.id)}`, { method: "DELETE" });
        detail.hidden = true;
        state.hidden = false;
        state.className = "ok";
        state.textContent = t("ev.unlocked", name);
        await load();
      } catch (e) {
        showError(error, e);
      }
    }

    prev.addEventListener("click", () => {
      paging.page -= 1;
      load();
    });
    next.addEventListener("click", () => {
      paging.page += 1;
      load();
    });
    await load();
  })();
}
