// The bus page: brokers, topics (click for partitions and messages), consumer groups (click for members,
// lag per partition and the last hour's lag chart). Admin forms exist in the page only for admins, and the
// API refuses them to anyone else.
"use strict";

(() => {
  const { api, t, tOr, el, fillRows, showError, number, bytes, duration, time, cityIso, hasRole } = Console;
  const error = document.getElementById("bus-error");
  const isAdmin = hasRole("admin");
  let lagChart = null;
  let currentTopic = null;
  let currentGroup = null;

  /** The list in a response, whatever the envelope ({items}, {topics}, a bare list...). */
  function list(data, key) {
    if (Array.isArray(data)) return data;
    return (data && (data[key] || data.items)) || [];
  }

  function fail(e) {
    showError(error, e);
  }

  function retention(topic) {
    const parts = [];
    if (topic.retention_ms !== null && topic.retention_ms !== undefined) parts.push(duration(topic.retention_ms));
    if (topic.retention_bytes !== null && topic.retention_bytes !== undefined && topic.retention_bytes >= 0) parts.push(bytes(topic.retention_bytes));
    if (topic.cleanup_policy && topic.cleanup_policy !== "delete") parts.push(topic.cleanup_policy);
    return parts.join(" · ") || "—";
  }

  async function loadBrokers() {
    try {
      const { data } = await api("/api/v1/bus/brokers");
      fillRows(document.querySelector("#brokers tbody"), list(data, "brokers").map((b) => [
        String(b.id), b.host, String(b.port), b.is_controller ? t("common.yes") : t("common.no")]));
    } catch (e) {
      fail(e);
    }
  }

  async function loadTopics() {
    try {
      const { data } = await api("/api/v1/bus/topics");
      const tbody = document.querySelector("#topics tbody");
      tbody.replaceChildren(...list(data, "topics").map((topic) => el("tr", {
        dataset: { topic: topic.name }, onclick: () => openTopic(topic.name),
      },
      el("td", { class: "mono" }, topic.name),
      el("td", { class: "num" }, number(topic.partitions)),
      el("td", { class: "num" }, number(topic.replication_factor)),
      el("td", { class: "num" }, bytes(topic.size_bytes)),
      el("td", {}, retention(topic)),
      isAdmin ? el("td", {}, el("button", {
        type: "button", class: "danger delete-topic",
        onclick: (event) => { event.stopPropagation(); deleteTopic(topic.name); },
      }, t("bus.delete"))) : null)));
    } catch (e) {
      fail(e);
    }
  }

  async function openTopic(name) {
    currentTopic = name;
    for (const row of document.querySelectorAll("#topics tbody tr")) row.classList.toggle("selected", row.dataset.topic === name);
    const section = document.getElementById("topic-detail");
    section.hidden = false;
    document.getElementById("topic-name").textContent = name;
    document.getElementById("messages").replaceChildren();
    try {
      const { data } = await api(`/api/v1/bus/topics/${encodeURIComponent(name)}`);
      const partitions = data.partitions || [];
      fillRows(document.querySelector("#topic-partitions tbody"), partitions.map((p) => [
        String(p.partition), String(p.leader), p.replicas.join(", "), p.isr.join(", "), bytes(p.size_bytes)]));
      const select = document.getElementById("messages-partition");
      select.replaceChildren(el("option", { value: "" }, t("bus.all_partitions")),
        ...partitions.map((p) => el("option", { value: String(p.partition) }, String(p.partition))));
      showError(error, null);
      section.scrollIntoView({ block: "nearest" });
    } catch (e) {
      fail(e);
    }
  }

  function finiteOnly(_key, value) {
    if (typeof value === "number" && !Number.isFinite(value)) throw new RangeError("number out of range");
    return value;
  }

  /** A key/value blob as text: JSON pretty-printed, base64 labelled as such, truncation said. */
  function blobNode(blob) {
    if (!blob) return el("span", { class: "muted" }, t("bus.null"));
    let text = blob.data;
    let cls = "json";
    if (blob.encoding === "utf-8") {
      try {
        // A number JavaScript cannot hold (a 5000-digit one, 1e400) would print as null: show such a value as text.
        text = JSON.stringify(JSON.parse(blob.data, finiteOnly), null, 2);
      } catch {
        cls = "json plain";
      }
    } else {
      text = `${t("bus.base64")}: ${blob.data}`;
    }
    const nodes = [el("pre", { class: cls }, text)];
    if (blob.truncated) nodes.push(el("div", { class: "muted" }, t("bus.truncated", { size: bytes(blob.size) })));
    return nodes;
  }

  async function loadMessages(event) {
    event.preventDefault();
    const form = new FormData(event.target);
    const box = document.getElementById("messages");
    box.replaceChildren(el("p", { class: "muted" }, t("common.loading")));
    try {
      const { data } = await api(`/api/v1/bus/topics/${encodeURIComponent(currentTopic)}/messages`, {
        params: { limit: form.get("limit"), partition: form.get("partition") },
      });
      const messages = list(data, "messages");
      if (!messages.length) {
        box.replaceChildren(el("p", { class: "muted" }, t("bus.no_messages")));
        return;
      }
      box.replaceChildren(...messages.map((m) => el("div", { class: "message" },
        el("div", { class: "message-meta" },
          el("span", {}, `${t("bus.partition")} `, el("b", {}, String(m.partition))),
          el("span", {}, `${t("bus.offset")} `, el("b", {}, String(m.offset))),
          el("span", {}, `${t("bus.timestamp")} `, el("b", {}, time(m.timestamp))),
          el("span", {}, `${t("bus.key")} `, el("b", { class: "mono" }, m.key ? m.key.data : t("bus.null")))),
        (m.headers || []).length ? el("div", { class: "message-meta" }, `${t("bus.headers")}: `,
          ...m.headers.map((h) => el("code", {}, `${h.key}=${h.value ? h.value.data : ""}`))) : null,
        m.undecodable ? el("div", { class: "muted" }, t("bus.undecodable", { reason: m.undecodable })) : null,
        blobNode(m.value))));
    } catch (e) {
      box.replaceChildren();
      fail(e);
    }
  }

  async function loadGroups() {
    try {
      const { data } = await api("/api/v1/bus/groups");
      const tbody = document.querySelector("#groups tbody");
      tbody.replaceChildren(...list(data, "groups").map((g) => el("tr", {
        dataset: { group: g.group_id }, onclick: () => openGroup(g.group_id),
      },
      el("td", { class: "mono" }, g.group_id),
      el("td", {}, tOr(`group_state.${g.state}`, g.state)),
      el("td", { class: "num" }, number(g.members)),
      el("td", { class: "num" }, number(g.total_lag)))));
    } catch (e) {
      fail(e);
    }
  }

  async function openGroup(id) {
    currentGroup = id;
    for (const row of document.querySelectorAll("#groups tbody tr")) row.classList.toggle("selected", row.dataset.group === id);
    const section = document.getElementById("group-detail");
    section.hidden = false;
    document.getElementById("group-name").textContent = id;
    try {
      const { data } = await api(`/api/v1/bus/groups/${encodeURIComponent(id)}`);
      const members = data.members || [];
      document.getElementById("no-members").hidden = members.length > 0;
      fillRows(document.querySelector("#group-members tbody"), members.map((m) => [
        el("span", { class: "mono" }, m.member_id), m.client_id, m.host,
        m.assignment.map((a) => `${a.topic}-${a.partition}`).join(", ") || null]));
      fillRows(document.querySelector("#group-lag tbody"), (data.partitions || []).map((p) => [
        el("span", { class: "mono" }, p.topic), String(p.partition), number(p.committed), number(p.end_offset),
        el("b", {}, number(p.lag))]));
      const topics = [...new Set((data.partitions || []).map((p) => p.topic))];
      const select = document.getElementById("reset-topic");
      if (select) select.replaceChildren(...topics.map((name) => el("option", { value: name }, name)));
      showError(error, null);
      section.scrollIntoView({ block: "nearest" });
    } catch (e) {
      fail(e);
    }
    loadLagHistory(id);
  }

  /** The last hour's lag, one line per partition plus the total, from the server-side samples. */
  async function loadLagHistory(id) {
    const container = document.getElementById("lag-chart");
    const empty = document.getElementById("lag-empty");
    if (lagChart) {
      lagChart.destroy();
      lagChart = null;
    }
    try {
      const { data } = await api(`/api/v1/bus/groups/${encodeURIComponent(id)}/lag-history`);
      const samples = list(data, "points");
      empty.hidden = samples.length > 0;
      container.hidden = samples.length === 0;
      if (!samples.length) return;
      const keys = [...new Set(samples.flatMap((s) => (s.partitions || []).map((p) => `${p.topic}-${p.partition}`)))].sort();
      const x = samples.map((s) => s.time_ms / 1000);
      const totals = samples.map((s) => s.total);
      const lines = keys.map((key) => samples.map((s) => {
        const found = (s.partitions || []).find((p) => `${p.topic}-${p.partition}` === key);
        return found && found.lag !== null ? found.lag : null;
      }));
      const palette = ["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#7f7f7f"];
      // The whole last hour, so the server's samples sit where they belong in time.
      lagChart = Console.timeChart(container, [
        { label: t("bus.total_lag"), stroke: "#c81e1e" },
        ...keys.map((key, i) => ({ label: key, stroke: palette[i % palette.length], width: 1 })),
      ], [x, totals, ...lines], (now) => [now - 3600, now + 30], t("bus.lag_axis"));
    } catch (e) {
      empty.hidden = false;
      fail(e);
    }
  }

  async function deleteTopic(name) {
    if (!window.confirm(t("common.confirm_delete", { name }))) return;
    try {
      await api(`/api/v1/bus/topics/${encodeURIComponent(name)}`, { method: "DELETE" });
      showError(error, null);
      if (currentTopic === name) document.getElementById("topic-detail").hidden = true;
    } catch (e) {
      fail(e);
    }
    loadTopics();
  }

  document.getElementById("messages-form").addEventListener("submit", loadMessages);

  if (isAdmin) {
    document.getElementById("create-topic").addEventListener("submit", async (event) => {
      event.preventDefault();
      const form = new FormData(event.target);
      const body = { name: form.get("name"), partitions: Number(form.get("partitions")) };
      // Left empty, the brokers' default.replication.factor applies (3 on a cluster, 1 on a single broker).
      if (form.get("replication_factor")) body.replication_factor = Number(form.get("replication_factor"));
      try {
        await api("/api/v1/bus/topics", { method: "POST", json: body });
        showError(error, null);
        event.target.reset();
      } catch (e) {
        fail(e);
      }
      loadTopics();
    });
    const to = document.getElementById("reset-to");
    to.addEventListener("change", () => {
      document.querySelector(".reset-datetime").hidden = to.value !== "datetime";
      document.querySelector(".reset-offset").hidden = to.value !== "offset";
    });
    document.getElementById("reset-offsets").addEventListener("submit", async (event) => {
      event.preventDefault();
      const form = new FormData(event.target);
      const body = { to: form.get("to"), topic: form.get("topic") || null };
      if (body.to === "datetime") body.datetime = cityIso(form.get("datetime"));
      if (body.to === "offset") body.offset = Number(form.get("offset"));
      if (!window.confirm(t("bus.confirm_reset", { group: currentGroup }))) return;
      try {
        await api(`/api/v1/bus/groups/${encodeURIComponent(currentGroup)}/reset-offsets`, { method: "POST", json: body });
        showError(error, null);
      } catch (e) {
        fail(e);
      }
      openGroup(currentGroup);
    });
  }

  loadBrokers();
  loadTopics();
  loadGroups();
})();
