// The audit trail (admin): newest first, a page at a time by the API's cursor.
"use strict";

(() => {
  const { api, el, fillRows, showError, time } = Console;
  const error = document.getElementById("audit-error");
  const tbody = document.querySelector("#audit tbody");
  const prev = document.getElementById("prev-page");
  const next = document.getElementById("next-page");
  const pageNo = document.getElementById("page-no");
  const cursors = [null];
  let page = 0;

  async function load() {
    try {
      const { data } = await api("/api/v1/audit", { params: { limit: 50, cursor: cursors[page] } });
      cursors[page + 1] = data.next;
      fillRows(tbody, data.items.map((entry) => [
        el("span", { class: "mono nowrap" }, time(entry.time)), entry.user,
        el("span", { title: entry.action }, Console.tOr(`action.${entry.action}`, entry.action)),
        entry.target, el("span", { class: entry.outcome === "ok" ? "ok" : "error" }, Console.tOr(`outcome.${entry.outcome}`, entry.outcome)),
        Object.keys(entry.detail || {}).length ? el("code", {}, JSON.stringify(entry.detail)) : null]));
      document.getElementById("audit-empty").hidden = data.items.length > 0;
      pageNo.textContent = Console.t("pager.page", { n: page + 1 });
      prev.disabled = page === 0;
      next.disabled = !data.next;
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  prev.addEventListener("click", () => {
    page -= 1;
    load();
  });
  next.addEventListener("click", () => {
    page += 1;
    load();
  });
  load();
})();
