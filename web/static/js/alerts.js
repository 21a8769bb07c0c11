// Alerts, live: the list is re-read whenever the SSE hub passes an event of the alerts topic. Operators
// acknowledge; admins create silences (prefilled from an alert's labels) and expire them. The API enforces
// every role again: these controls are only not drawn for those who may not use them.
"use strict";

(() => {
  const { api, t, el, fillRows, showError, time } = Console;
  const error = document.getElementById("alerts-error");
  const canAck = Console.hasRole("operator");
  const isAdmin = Console.hasRole("admin");
  const OPERATORS = ["=", "!=", "=~", "!~"];
  let pending = null;

  function matcherText(m) {
    const op = m.isRegex ? (m.isEqual ? "=~" : "!~") : (m.isEqual ? "=" : "!=");
    return `${m.name}${op}"${m.value}"`;
  }

  function where(labels) {
    if (labels.device_ip) {
      const place = labels.district === "unknown" || !labels.district ? t("mon.unknown_location")
        : `${labels.district} · ${t("map.crossroad")} ${labels.crossroad || "?"}`;
      return [el("span", { class: "mono" }, labels.device_ip), el("br"), place];
    }
    if (labels.recognizer_ip) return `${t("field.recognizer_ip")} ${labels.recognizer_ip}`;
    return "—";
  }

  // The summary in the page's language: the monitor's annotations carry a catalog key and its parameters
  // beside the English text receivers read; alerts from elsewhere (or an unknown key) show that English text.
  function summary(a) {
    const { summary_key: key, summary_params: raw } = a.annotations;
    const english = a.annotations.summary || a.annotations.description || "—";
    if (!key || Console.tOr(key, null) === null) return english;
    try {
      const params = JSON.parse(raw || "{}");
      if (params.stage) params.stage_name = Console.tOr(`stage.${params.stage}`, params.stage);
      return t(key, params);
    } catch (e) {
      return english;
    }
  }

  function statusCell(a) {
    const s = a.status.state;
    const badge = el("span", { class: `state-badge alert-${s}` }, t(`alert_state.${s}`));
    if (s !== "suppressed") return badge;
    const why = a.status.silencedBy.length ? t("alerts.silenced") : t("alerts.inhibited");
    return [badge, el("br"), el("span", { class: "muted" }, why)];
  }

  function ackCell(a) {
    const acked = a.ack ? el("span", { class: "acked" }, t("alerts.acked_by", { user: a.ack.by, time: time(a.ack.at) })) : null;
    if (a.status.state === "resolved") return acked;
    const cells = [acked || (canAck
      ? el("button", { type: "button", class: "primary ack-button", onclick: () => ack(a) }, t("alerts.acknowledge"))
      : el("span", { class: "muted" }, t("alerts.not_acked")))];
    if (isAdmin) cells.push(el("br"), el("button", { type: "button", class: "silence-button", onclick: () => prefill(a) }, t("alerts.silence")));
    return cells;
  }

  async function refresh() {
    pending = null;
    try {
      const resolved = document.getElementById("show-resolved").checked;
      const [{ data: alerts }, { data: silences }] = await Promise.all([
        api("/api/v1/alerts", { params: { resolved: resolved ? "true" : undefined } }),
        api("/api/v1/silences"),
      ]);
      drawAlerts(alerts);
      drawSilences(silences);
      document.getElementById("alerts-updated").textContent = t("overview.updated", { time: time(Date.now()) });
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  function drawAlerts(alerts) {
    const open = alerts.filter((a) => a.status.state !== "resolved").length;
    const count = document.getElementById("alerts-count");
    count.textContent = String(open);
    count.className = open ? "badge down" : "badge live";
    const tbody = document.querySelector("#alerts-table tbody");
    if (!alerts.length) {
      fillRows(tbody, [[t("alerts.none"), null, null, null, null, null, null]]);
      return;
    }
    tbody.replaceChildren(...alerts.map((a) => el("tr", { dataset: { fingerprint: a.fingerprint, state: a.status.state } },
      el("td", {}, el("span", { class: `severity severity-${a.labels.severity}` }, Console.tOr(`severity.${a.labels.severity}`, a.labels.severity || "—"))),
      el("td", {}, el("strong", {}, a.labels.alertname)),
      el("td", { class: "wrap" }, summary(a)),
      el("td", {}, where(a.labels)),
      el("td", { class: "nowrap" }, time(a.startsAt)),
      el("td", {}, statusCell(a)),
      el("td", {}, ackCell(a)))));
  }

  function drawSilences(silences) {
    const tbody = document.querySelector("#silences-table tbody");
    const width = isAdmin ? 7 : 6;
    if (!silences.length) {
      fillRows(tbody, [[t("silences.none"), ...Array(width - 1).fill(null)]]);
      return;
    }
    tbody.replaceChildren(...silences.map((s) => el("tr", { dataset: { silence: s.id, state: s.status.state } },
      el("td", {}, el("span", { class: `state-badge silence-${s.status.state}` }, t(`silence_state.${s.status.state}`))),
      el("td", { class: "mono wrap" }, s.matchers.map(matcherText).join(", ")),
      el("td", { class: "nowrap" }, time(s.startsAt)),
      el("td", { class: "nowrap" }, time(s.endsAt)),
      el("td", {}, s.createdBy),
      el("td", { class: "wrap" }, s.comment),
      isAdmin ? el("td", {}, s.status.state === "expired" ? null
        : el("button", { type: "button", class: "danger", onclick: () => expire(s) }, t("silences.expire"))) : null)));
  }

  async function ack(a) {
    try {
      await api(`/api/v1/alerts/${a.fingerprint}/ack`, { method: "POST" });
    } catch (e) {
      showError(error, e);
    }
    refresh();
  }

  async function expire(s) {
    if (!window.confirm(t("silences.confirm_expire"))) return;
    try {
      await api(`/api/v1/silences/${s.id}`, { method: "DELETE" });
    } catch (e) {
      showError(error, e);
    }
    refresh();
  }

  // -- the silence form (admin) ----------------------------------------------------------------------
  const rows = document.getElementById("matcher-rows");

  function matcherRow(name = "", op = "=", value = "") {
    const remove = el("button", { type: "button", class: "link-button", onclick: () => row.remove() }, t("silences.remove_matcher"));
    const row = el("div", { class: "matcher-row" },
      el("label", {}, t("silences.label"), el("input", { name: "m_name", value: name, required: true, class: "mono", pattern: "[a-zA-Z_][a-zA-Z0-9_]*" })),
      el("label", {}, t("silences.operator"), el("select", { name: "m_op" }, ...OPERATORS.map((o) => el("option", { value: o, selected: o === op }, o)))),
      el("label", {}, t("silences.value"), el("input", { name: "m_value", value, class: "mono" })),
      remove);
    rows.append(row);
  }

  function prefill(a) {
    rows.replaceChildren();
    matcherRow("alertname", "=", a.labels.alertname);
    const key = a.labels.device_ip ? "device_ip" : a.labels.recognizer_ip ? "recognizer_ip" : null;
    if (key) matcherRow(key, "=", a.labels[key]);
    document.getElementById("silence-form").scrollIntoView({ behavior: "smooth" });
    document.querySelector('#silence-form input[name="comment"]').focus();
  }

  const silenceForm = document.getElementById("silence-form");
  if (silenceForm) {
    matcherRow();
    document.getElementById("add-matcher").addEventListener("click", () => matcherRow());
    silenceForm.addEventListener("submit", async (event) => {
      event.preventDefault();
      const matchers = [...rows.querySelectorAll(".matcher-row")].map((r) => {
        const op = r.querySelector('[name="m_op"]').value;
        return { name: r.querySelector('[name="m_name"]').value.trim(), value: r.querySelector('[name="m_value"]').value,
          isRegex: op.includes("~"), isEqual: !op.startsWith("!") };
      });
      const hours = Number(silenceForm.elements.hours.value);
      const endsAt = new Date(Date.now() + hours * 3600000).toISOString();
      try {
        await api("/api/v1/silences", { method: "POST", json: { matchers, endsAt, comment: silenceForm.elements.comment.value } });
        rows.replaceChildren();
        matcherRow();
        silenceForm.elements.comment.value = "";
        showError(error, null);
      } catch (e) {
        showError(error, e);
      }
      refresh();
    });
  }

  function soon() {
    if (!pending) pending = setTimeout(refresh, 250);
  }

  document.getElementById("show-resolved").addEventListener("change", refresh);
  refresh();
  Console.liveEvents({ [Console.page.event_topics.alerts]: soon });
  setInterval(refresh, 30000);
})();
