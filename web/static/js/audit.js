// The audit trail (admin): newest first, a page at a time by the API's cursor, filtered by user, action, a plate or
// record id (q) and a time range (city time, as the list shows it); "Export CSV" carries the same filters.
// Everything an entry holds is put in the page as text: a reason or a query is whatever a user typed.
"use strict";

(() => {
  const { api, el, showError, time, t, tOr, cityIso } = Console;
  const form = document.getElementById("audit-filters");
  const actionSelect = document.getElementById("filter-action");
  const exportLink = document.getElementById("export-csv");
  const error = document.getElementById("audit-error");
  const tbody = document.querySelector("#audit tbody");
  const prev = document.getElementById("prev-page");
  const next = document.getElementById("next-page");
  const pageNo = document.getElementById("page-no");
  let where = {};
  let applied = null; // the filters last applied (JSON) and when: one Enter is a change and a submit
  let appliedAt = 0;
  let cursors = [null];
  let page = 0;
  let sequence = 0; // a slower answer to an older request is dropped

  /** Every action the console has a name for (its messages say which), grouped by their dotted names. */
  function actionOption(name) {
    const label = tOr(`action.${name}`, name);
    return el("option", { value: name }, label === name ? name : `${label} (${name})`);
  }
  const actions = Object.keys(Console.page.messages).filter((k) => k.startsWith("action.")).map((k) => k.slice(7));
  actionSelect.append(...actions.sort().map(actionOption));

  function filters() {
    const f = form.elements;
    return {
      user: f.user.value.trim(), action: f.action.value, q: f.q.value.trim(),
      from: cityIso(f.from.value), to: cityIso(f.to.value),
    };
  }

  function queryOf(values) {
    const query = new URLSearchParams(Object.entries(values).filter(([, v]) => v));
    return [...query].length ? `?${query}` : "";
  }

  /** Apply the form's filters: back to the newest page, the export link and the address follow. */
  function apply(force = false) {
    const wanted = filters();
    const key = JSON.stringify(wanted);
    if (key === applied && (!force || Date.now() - appliedAt < 500)) return;
    applied = key;
    appliedAt = Date.now();
    where = wanted;
    cursors = [null];
    page = 0;
    exportLink.href = `/api/v1/audit/export.csv${queryOf(where)}`;
    window.history.replaceState(null, "", `/audit${queryOf(where)}`);
    load();
  }

  function cell(className, content) {
    return el("td", { class: className }, content === null || content === undefined || content === "" ? "—" : content);
  }

  function row(entry) {
    const query = entry.query && Object.keys(entry.query).length ? JSON.stringify(entry.query) : null;
    const ok = entry.outcome === "ok";
    return el("tr", { dataset: { action: entry.action, user: entry.user } },
      cell("mono nowrap", el("span", { title: entry.time }, time(entry.time))),
      cell("nowrap", entry.user),
      cell("nowrap", entry.role ? tOr(`role.${entry.role}`, entry.role) : null),
      cell("nowrap", el("span", { title: entry.action }, tOr(`action.${entry.action}`, entry.action))),
      cell("mono wrap", entry.target),
      cell("reason", entry.reason),
      cell("mono nowrap", entry.client ? el("span", {
        title: entry.user_agent ? `${t("audit.user_agent")}: ${entry.user_agent}` : undefined,
      }, entry.client) : null),
      cell(ok ? "ok nowrap" : "error", tOr(`outcome.${entry.outcome}`, entry.outcome)),
      cell("query", query ? el("code", { class: "query" }, query) : null));
  }

  async function load() {
    const mine = ++sequence;
    try {
      const { data } = await api("/api/v1/audit", { params: { ...where, limit: 50, cursor: cursors[page] } });
      if (mine !== sequence) return;
      cursors[page + 1] = data.next;
      tbody.replaceChildren(...data.items.map(row));
      // A filter that matches little gives short (even empty) pages with a cursor to look further back.
      document.getElementById("audit-empty").hidden = data.items.length > 0 || Boolean(data.next);
      document.getElementById("audit-none-here").hidden = data.items.length > 0 || !data.next;
      pageNo.textContent = t("pager.page", { n: page + 1 });
      prev.disabled = page === 0;
      next.disabled = !data.next;
      showError(error, null);
    } catch (e) {
      if (mine !== sequence) return;
      tbody.replaceChildren();
      prev.disabled = page === 0;
      next.disabled = true;
      showError(error, e);
    }
  }

  form.addEventListener("change", () => apply());
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    apply(true);
  });
  form.addEventListener("reset", () => setTimeout(() => apply(), 0)); // after the form has cleared its fields
  prev.addEventListener("click", () => {
    page -= 1;
    load();
  });
  next.addEventListener("click", () => {
    page += 1;
    load();
  });

  // Filters in the address (a reload, a bookmark): back into the form, times as the city's local time.
  const query = new URLSearchParams(window.location.search);
  const f = form.elements;
  f.user.value = query.get("user") || "";
  f.q.value = query.get("q") || "";
  const action = query.get("action");
  if (action && ![...actionSelect.options].some((o) => o.value === action)) actionSelect.append(actionOption(action));
  f.action.value = action || "";
  for (const name of ["from", "to"]) if (query.get(name)) f[name].value = query.get(name).slice(0, 19);
  apply();
})();
