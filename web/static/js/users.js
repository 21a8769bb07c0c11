// Users (admin): list, add, remove. The API refuses these to anyone else whatever the page shows.
"use strict";

(() => {
  const { api, t, el, showError, time } = Console;
  const error = document.getElementById("users-error");
  const tbody = document.querySelector("#users tbody");
  const me = Console.page.user.username;

  async function refresh() {
    try {
      const { data } = await api("/api/v1/users");
      tbody.replaceChildren(...data.map((u) => el("tr", { dataset: { username: u.username } },
        el("td", {}, u.username),
        el("td", {}, t(`role.${u.role}`)),
        el("td", {}, u.created ? time(u.created) : "—"),
        el("td", {}, u.username === me ? t("users.you") : el("button", {
          type: "button", class: "danger", onclick: () => remove(u.username),
        }, t("users.remove"))))));
    } catch (e) {
      showError(error, e);
    }
  }

  async function remove(username) {
    if (!window.confirm(t("common.confirm_delete", { name: username }))) return;
    try {
      await api(`/api/v1/users/${encodeURIComponent(username)}`, { method: "DELETE" });
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
    refresh();
  }

  document.getElementById("add-user").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = new FormData(event.target);
    try {
      await api("/api/v1/users", { method: "POST", json: Object.fromEntries(form) });
      showError(error, null);
      event.target.reset();
    } catch (e) {
      showError(error, e);
    }
    refresh();
  });

  refresh();
})();
