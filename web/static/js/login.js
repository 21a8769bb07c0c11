// The login form: POST /api/v1/auth/session (form fields) sets the session cookie, then on to the page asked for.
"use strict";

(() => {
  const { api, t } = Console;
  const form = document.getElementById("login-form");
  const error = document.getElementById("login-error");

  /** The target the server checked (a path on this site only, see pages.safe_next): never a redirector. */
  function nextPage() {
    const next = Console.page.next || "/";
    return next.startsWith("/") && !next.startsWith("//") && !/[\\\s]/.test(next) ? next : "/";
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    error.hidden = true;
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    try {
      await api("/api/v1/auth/session", { method: "POST", form: new FormData(form) });
      window.location.assign(nextPage());
    } catch (e) {
      error.hidden = false;
      if (e.status === 429) {
        const seconds = e.response ? e.response.headers.get("Retry-After") : null;
        error.textContent = t("login.throttled", { seconds: seconds || (e.body && e.body.retry_after) || "?" });
      } else if (e.status === 401 || e.status === 400) {
        error.textContent = t("login.failed");
      } else {
        error.textContent = `${t("login.error")}: ${e.message}`;
      }
    } finally {
      button.disabled = false;
    }
  });
})();
