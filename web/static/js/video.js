// The video page: recordings by camera and day (play the original; operators ask for an analysis), the task
// list kept live by the SSE hub's video.status topic, a task's synopsis with its objects (a click on an object
// seeks the original to the moment it first shows), and object search by camera, time, class and colour.
// The API enforces every role again: the analyse and cancel buttons are only not drawn for viewers.
// The recording shown can be exported (downloaded) with a reason, which the API audits.
"use strict";

(() => {
  const { api, t, el, fillRows, showError, time, cityIso, cityLocalInput, bytes } = Console;
  const TERMINAL = new Set(["done", "failed", "cancelled"]);
  const error = document.getElementById("video-error");
  const canCommand = Console.hasRole("operator");
  const statusTopic = document.getElementById("video-page").dataset.statusTopic;
  const params = new URLSearchParams(window.location.search);
  let tasks = new Map();
  let openTask = params.get("task");
  let pending = null;
  const live = new Map(); // task id -> the latest state the bus told of, until the task rows show it

  const original = VideoPlayers.original({
    video: document.getElementById("original-player"), name: document.getElementById("original-name"),
    clock: document.getElementById("original-clock"), onError: (e) => showError(error, e),
  });
  const synopsis = VideoPlayers.synopsis({
    video: document.getElementById("synopsis-player"), canvas: document.getElementById("synopsis-overlay"),
    onObject: seekOriginal,
  });

  function fileName(url) {
    return url.split("/").pop().replace(/^\d{6}_/, "");
  }

  /** The original at the moment the object first shows (its recording start = first_seen - offset). */
  function seekOriginal(o) {
    for (const node of document.querySelectorAll(".thumb.active")) node.classList.remove("active");
    for (const node of document.querySelectorAll(`.thumb[data-object="${o.task_id}:${o.object_id}"]`)) node.classList.add("active");
    const start = new Date(new Date(o.first_seen).getTime() - o.offset_s * 1000).toISOString();
    original.play(o.video_url, `${fileName(o.video_url)} · #${o.object_id}`, start, o.offset_s);
    document.getElementById("original-player").scrollIntoView({ behavior: "smooth", block: "nearest" });
  }

  // -- recordings -------------------------------------------------------------------------------------
  const cameraSelect = document.getElementById("camera");
  const daySelect = document.getElementById("day");

  async function loadCameras() {
    const { data: cameras } = await api("/api/v1/video/cameras");
    const options = (selected) => cameras.map((c) => el("option", { value: c, selected: c === selected }, c));
    const wanted = params.get("camera") || cameras[0];
    cameraSelect.replaceChildren(...options(wanted));
    document.getElementById("search-camera").replaceChildren(...options(wanted));
    if (!cameras.length) {
      fillRows(document.querySelector("#videos-table tbody"), [[t("video.no_videos"), null, null, null]]);
      return;
    }
    await loadDays();
  }

  async function loadDays() {
    const { data: days } = await api(`/api/v1/video/cameras/${encodeURIComponent(cameraSelect.value)}/days`);
    daySelect.replaceChildren(...days.map((d) => el("option", { value: d.day }, `${d.day} (${d.videos})`)));
    await loadVideos();
  }

  let videosAsked = 0; // the newest list asked for: an older answer arriving after it is dropped

  async function loadVideos() {
    const tbody = document.querySelector("#videos-table tbody");
    const asked = ++videosAsked;
    if (!daySelect.value) {
      fillRows(tbody, [[t("video.no_videos"), null, null, null]]);
      return;
    }
    const { data: videos } = await api(`/api/v1/video/cameras/${encodeURIComponent(cameraSelect.value)}/videos`,
      { params: { day: daySelect.value } });
    if (asked !== videosAsked) return;
    tbody.replaceChildren(...videos.map((v) => el("tr", { dataset: { url: v.url } },
      el("td", { class: "nowrap" }, time(v.start_time)),
      el("td", { class: "mono" }, v.name),
      el("td", {}, bytes(v.size)),
      el("td", { class: "nowrap" },
        el("button", { type: "button", class: "play-button", onclick: () => original.play(v.url, v.name, v.start_time, 0) }, t("video.play")),
        canCommand ? el("button", { type: "button", class: "primary analyze-button", onclick: () => analyze(v) }, t("video.analyze")) : null,
        canCommand ? " " : null, EvidenceLock.button("video", v.url)))));
  }

  async function analyze(v) {
    await ask("/api/v1/video/tasks", { method: "POST", json: { video_url: v.url, camera_id: v.camera_id } });
  }

  /** Run a failed or cancelled task again: a new task, opened like a fresh analysis. */
  async function rerun(taskId) {
    await ask(`/api/v1/video/tasks/${encodeURIComponent(taskId)}/rerun`, { method: "POST" });
  }

  async function ask(path, request) {
    try {
      const { data } = await api(path, request);
      showError(error, null);
      openTask = data.task_id;
      tasks.set(data.task_id, { ...data, status: "queued", progress: 0, ...(tasks.get(data.task_id) || {}) });
      drawTasks();
      await refreshTasks();
    } catch (e) {
      showError(error, e);
    }
  }

  // -- tasks --------------------------------------------------------------------------------------------
  function stateBadge(task) {
    return el("span", { class: `state-badge task-${task.status}` }, Console.tOr(`video.state.${task.status}`, task.status));
  }

  function progressBar(task) {
    const share = task.status === "done" ? 1 : Math.max(0, Math.min(1, task.progress || 0));
    return [el("span", { class: "progress", title: `${Math.round(share * 100)} %` }, el("span", { style: `width: ${share * 100}%` })),
      ` ${Math.round(share * 100)} %`];
  }

  /** A task row with the newer state the bus told of, until the loader has written it (no flicker back). */
  function withLive(task) {
    const state = live.get(task.task_id);
    return state ? { ...task, ...state } : task;
  }

  function drawTasks() {
    const tbody = document.querySelector("#tasks-table tbody");
    if (!tasks.size) {
      fillRows(tbody, [[t("video.no_tasks"), null, null, null, null, null, null, null]]);
      return;
    }
    tbody.replaceChildren(...[...tasks.values()].map(withLive).map((task) => el("tr", {
      class: task.task_id === openTask ? "selected" : null, dataset: { task: task.task_id, state: task.status },
    },
    el("td", { class: "mono" }, task.task_id),
    el("td", {}, task.camera_id || "—"),
    el("td", { class: "mono" }, task.video_url ? fileName(task.video_url) : "—"),
    el("td", { class: "nowrap" }, task.requested_by || "—", el("br"), el("span", { class: "muted" }, time(task.requested_at))),
    el("td", {}, stateBadge(task), task.error ? [el("br"), el("span", { class: "error" }, task.error)] : null),
    el("td", { class: "nowrap" }, progressBar(task)),
    el("td", {}, task.objects ?? "—"),
    el("td", { class: "nowrap" },
      el("button", { type: "button", class: "open-button", onclick: () => showTask(task.task_id) }, t("video.open")),
      canCommand && !TERMINAL.has(task.status)
        ? el("button", { type: "button", class: "danger cancel-button", onclick: () => cancel(task.task_id) }, t("video.cancel")) : null,
      canCommand && (task.status === "failed" || task.status === "cancelled")
        ? el("button", { type: "button", class: "rerun-button", onclick: () => rerun(task.task_id) }, t("video.rerun")) : null))));
  }

  async function refreshTasks() {
    pending = null;
    try {
      const { data } = await api("/api/v1/video/tasks");
      const fresh = new Map(data.map((task) => [task.task_id, task]));
      for (const [id, task] of tasks) if (!fresh.has(id)) fresh.set(id, task); // asked for, not loaded yet
      tasks = fresh;
      drawTasks();
      // The bus may tell of a state before the job's loader has written it: read again until the rows agree.
      for (const [id, state] of live) {
        const row = fresh.get(id);
        if (row && (row.status === state.status || TERMINAL.has(row.status))) live.delete(id);
      }
      if ([...live.keys()].some((id) => fresh.has(id)) && !pending) pending = setTimeout(refreshTasks, 1000);
      // A task just asked for has no row until the job's loader writes one: open it once the list has it.
      if (openTask && data.some((task) => task.task_id === openTask)) await showTask(openTask, true);
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  }

  async function cancel(taskId) {
    if (!window.confirm(t("video.confirm_cancel"))) return;
    try {
      await api(`/api/v1/video/tasks/${encodeURIComponent(taskId)}/cancel`, { method: "POST" });
    } catch (e) {
      showError(error, e);
    }
    refreshTasks();
  }

  // -- one task: its synopsis and objects -------------------------------------------------------------
  let shownDone = null;

  function facts(task) {
    const parts = [`${t("video.requested")}: ${task.requested_by || "—"} ${time(task.requested_at)}`];
    if (task.stage) parts.push(`${t("video.stage")}: ${Console.tOr(`video.stage.${task.stage}`, task.stage)}`);
    if (task.attempt) parts.push(`${t("video.attempt")}: ${task.attempt}`);
    const motion = task.camera_motion && task.camera_motion.camera_motion;
    if (motion) parts.push(`${t("video.camera")}: ${Console.tOr(`video.camera.${motion}`, motion)}`);
    if (task.capped === "true") parts.push(t("video.capped"));
    if (task.timings && Object.keys(task.timings).length) {
      parts.push(Object.entries(task.timings).map(([k, v]) => `${Console.tOr(`video.stage.${k}`, k)} ${v.toFixed(1)} s`).join(" · "));
    }
    return parts.join(" · ");
  }

  function thumb(o, onClick) {
    return el("button", { type: "button", class: "thumb", dataset: { object: `${o.task_id}:${o.object_id}` }, onclick: onClick },
      o.thumbnail_url ? el("img", { src: VideoPlayers.mediaUrl(o.thumbnail_url), alt: `#${o.object_id}`, loading: "lazy" }) : null,
      el("strong", {}, `#${o.object_id} ${Console.tOr(`video.class.${o.class}`, o.class)}`), ` · ${o.color}`, el("br"),
      el("span", {}, `${t("video.first_seen")} ${time(o.first_seen)}`), el("br"),
      el("span", { class: "muted" }, `${o.camera_id} · ${t("video.in_synopsis", { s: o.synopsis_time.toFixed(1) })}`));
  }

  async function showTask(taskId, quiet = false) {
    openTask = taskId;
    const url = new URL(window.location.href);
    url.searchParams.set("task", taskId);
    window.history.replaceState(null, "", url);
    const panel = document.getElementById("task-panel");
    const taskError = document.getElementById("task-error");
    try {
      const { data: task } = await api(`/api/v1/video/tasks/${encodeURIComponent(taskId)}`);
      tasks.set(taskId, { ...(tasks.get(taskId) || {}), ...task });
      drawTasks();
      panel.hidden = false;
      panel.dataset.task = taskId;
      panel.dataset.state = task.status;
      document.getElementById("task-title").textContent = taskId;
      document.getElementById("task-state").replaceChildren(stateBadge(task));
      document.getElementById("task-facts").textContent = facts(task);
      const motion = task.camera_motion;
      const warning = task.error || (motion && motion.reliable === false ? t("video.unreliable", { reason: motion.reason }) : "");
      taskError.hidden = !warning;
      taskError.textContent = warning;
      document.getElementById("synopsis-area").hidden = task.status !== "done";
      if (task.status !== "done" || shownDone === taskId) return;
      const { data: objects } = await api(`/api/v1/video/tasks/${encodeURIComponent(taskId)}/objects`);
      shownDone = taskId;
      document.getElementById("objects-count").textContent = String(objects.length);
      const synopsisUrl = task.synopsis_url || (objects[0] && objects[0].synopsis_url);
      if (synopsisUrl) synopsis.show(synopsisUrl, objects);
      document.getElementById("task-objects").replaceChildren(...objects.map((o) => thumb(o, () => {
        synopsis.focus(o);
        seekOriginal(o);
      })));
      if (!quiet) panel.scrollIntoView({ behavior: "smooth", block: "start" });
    } catch (e) {
      showError(error, e);
    }
  }

  // -- export -------------------------------------------------------------------------------------------
  const exportForm = document.getElementById("export-form");
  const exportState = document.getElementById("export-state");
  const originalVideo = document.getElementById("original-player");
  originalVideo.addEventListener("loadedmetadata", () => { document.getElementById("export-video").disabled = false; });
  const exportReason = exportForm.elements.reason;
  exportReason.addEventListener("invalid", () => {
    if (exportReason.validity.valueMissing) exportReason.setCustomValidity(t("video.export_reason_required"));
  });
  exportReason.addEventListener("input", () => exportReason.setCustomValidity(""));
  exportForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const url = originalVideo.dataset.url;
    const reason = exportReason.value.trim();
    exportState.hidden = false;
    if (!url) {
      exportState.textContent = t("video.export_nothing");
      return;
    }
    if (!reason) {
      exportReason.value = "";
      exportForm.reportValidity();
      exportState.hidden = true;
      return;
    }
    // A plain download: the session cookie authenticates the GET; the page stays where it is.
    const query = new URLSearchParams({ url, download: "true", reason });
    const link = el("a", { href: `/api/v1/video/media?${query}`, download: "", hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    exportState.textContent = t("video.export_started", { name: fileName(url) });
  });

  // -- search -------------------------------------------------------------------------------------------
  const searchForm = document.getElementById("search-form");
  const now = new Date();
  searchForm.elements.start.value = cityLocalInput(new Date(now.getTime() - 7 * 86400000));
  searchForm.elements.end.value = cityLocalInput(new Date(now.getTime() + 3600000));
  searchForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const f = searchForm.elements;
    try {
      const { data: objects } = await api("/api/v1/video/objects", { params: {
        camera: f.camera.value, start: cityIso(f.start.value), end: cityIso(f.end.value), class: f.class.value,
        color: f.color.value.trim(),
      } });
      document.getElementById("search-empty").hidden = objects.length > 0;
      document.getElementById("search-results").replaceChildren(...objects.map((o) => thumb(o, async () => {
        seekOriginal(o);
        await showTask(o.task_id, true);
      })));
      showError(error, null);
    } catch (e) {
      showError(error, e);
    }
  });

  // -- live ---------------------------------------------------------------------------------------------
  function onStatus(event) {
    const status = JSON.parse(event.data);
    live.set(status.task_id, { status: status.state, progress: status.progress, error: status.error || "" });
    if (tasks.has(status.task_id)) drawTasks();
    if (!pending) pending = setTimeout(refreshTasks, 400); // the loader writes the row right after the record
  }

  cameraSelect.addEventListener("change", () => loadDays().catch((e) => showError(error, e)));
  daySelect.addEventListener("change", () => loadVideos().catch((e) => showError(error, e)));
  document.getElementById("refresh-videos").addEventListener("click", () => loadCameras().catch((e) => showError(error, e)));
  loadCameras().catch((e) => showError(error, e));
  refreshTasks();
  Console.liveEvents({ [statusTopic]: onStatus });
  setInterval(refreshTasks, 15000);
})();
