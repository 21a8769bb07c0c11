// The two players of the video page. The original plays through the console (/api/v1/video/media, ranges
// honoured, so it can seek), after /playable says it is ready (a non-browser codec is transcoded first). The
// synopsis draws, over each frame, a box and the original time of every object on screen, read from the
// objects' tracks; a click on a box hands that object to the page (which seeks the original to it).
"use strict";

const VideoPlayers = (() => {
  const { api, t, time } = Console;
  const POLL_MS = 1500;

  function mediaUrl(s3Url) {
    return `/api/v1/video/media?url=${encodeURIComponent(s3Url)}`;
  }

  /** The original video: load by URL (waiting out a transcode), seek to an offset, show the clock. */
  function original({ video, name, clock, onError }) {
    let current = null; // { url, start (ms or null) }
    let loading = null;

    function showClock() {
      if (!current) return;
      clock.textContent = current.start === null ? `${video.currentTime.toFixed(1)} s`
        : time(current.start + video.currentTime * 1000);
    }
    video.addEventListener("timeupdate", showClock);
    video.addEventListener("seeked", showClock);

    async function ready(url) {
      for (;;) {
        let data;
        try {
          ({ data } = await api("/api/v1/video/playable", { params: { url } }));
        } catch (e) {
          if (e.status !== 429) throw e;
          // The console runs few transcodes at once ([console] max_transcodes): wait as it says, then ask again.
          const seconds = Number(e.response && e.response.headers.get("Retry-After")) || 5;
          name.textContent = t("video.transcodes_busy", { seconds });
          await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
          continue;
        }
        if (data.state === "ready") return data.media_url;
        if (data.state === "failed") throw new Error(t("video.cannot_play", { reason: data.error }));
        name.textContent = t("video.transcoding");
        await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      }
    }

    /** Play ``url`` from ``offset`` seconds; ``startIso`` is when its first frame was recorded (for the clock). */
    async function play(url, label, startIso, offset = 0) {
      const token = {};
      loading = token;
      try {
        if (!current || current.url !== url) {
          const playable = await ready(url);
          if (loading !== token) return;
          current = { url, start: startIso ? new Date(startIso).getTime() : null };
          video.src = mediaUrl(playable);
          await new Promise((resolve, reject) => {
            video.addEventListener("loadedmetadata", resolve, { once: true });
            video.addEventListener("error", () => reject(new Error(t("video.cannot_play", { reason: video.error && video.error.message }))), { once: true });
          });
        }
        name.textContent = label;
        video.dataset.url = url;
        video.currentTime = Math.min(offset, Math.max(0, (video.duration || offset) - 0.05));
        video.dataset.offset = String(offset);
        showClock();
        video.play().catch(() => {}); // autoplay may be refused; the frame at the offset shows either way
      } catch (e) {
        onError(e);
      }
    }
    return { play };
  }

  /** The box of an object ``dt`` seconds after its first frame: linear between the two nearest track samples. */
  function boxAt(track, dt) {
    if (!track.length) return null;
    let prev = track[0];
    for (const sample of track) {
      if (sample[0] >= dt) {
        if (sample === prev || sample[0] === prev[0]) return sample.slice(1);
        const w = (dt - prev[0]) / (sample[0] - prev[0]);
        return sample.slice(1).map((v, i) => prev[i + 1] + (v - prev[i + 1]) * w);
      }
      prev = sample;
    }
    return prev.slice(1);
  }

  /** The synopsis with its overlay: ``show(url, objects)``; ``onObject(o)`` when a box is clicked. */
  function synopsis({ video, canvas, onObject }) {
    let objects = [];
    let hits = [];

    function visible(now) {
      return objects.filter((o) => now >= o.synopsis_time && now <= o.synopsis_time + o.duration_s + 0.04);
    }

    function draw() {
      const ratio = window.devicePixelRatio || 1;
      const width = canvas.clientWidth;
      const height = canvas.clientHeight;
      canvas.width = Math.round(width * ratio);
      canvas.height = Math.round(height * ratio);
      const g = canvas.getContext("2d");
      g.setTransform(ratio, 0, 0, ratio, 0, 0);
      g.clearRect(0, 0, width, height);
      hits = [];
      if (!video.videoWidth) return;
      const scale = Math.min(width / video.videoWidth, height / video.videoHeight);
      const ox = (width - video.videoWidth * scale) / 2;
      const oy = (height - video.videoHeight * scale) / 2;
      g.font = "12px sans-serif";
      g.lineWidth = 2;
      for (const o of visible(video.currentTime)) {
        const dt = video.currentTime - o.synopsis_time;
        const box = boxAt(o.track, dt);
        if (!box) continue;
        const [x, y, w, h] = [ox + box[0] * scale, oy + box[1] * scale, box[2] * scale, box[3] * scale];
        const label = `${time(new Date(o.first_seen).getTime() + dt * 1000).slice(11)} ${t(`video.class.${o.class}`)}`;
        g.strokeStyle = o.class === "person" ? "#ffd43b" : o.class === "vehicle" ? "#4dabf7" : "#f783ac";
        g.strokeRect(x, y, w, h);
        const tw = g.measureText(label).width + 6;
        g.fillStyle = "rgba(0, 0, 0, 0.65)";
        g.fillRect(x, Math.max(0, y - 16), tw, 16);
        g.fillStyle = "#fff";
        g.fillText(label, x + 3, Math.max(12, y - 4));
        hits.push({ o, x, y: Math.max(0, y - 16), w: Math.max(w, tw), h: h + 16 });
      }
      // Where each clickable box is (CSS pixels of the canvas): for tests and for anyone inspecting the page.
      canvas.dataset.boxes = JSON.stringify(hits.map((h) => ({ object_id: h.o.object_id, x: h.x, y: h.y, w: h.w, h: h.h })));
    }

    function loop() {
      draw();
      if (!video.paused && !video.ended) requestAnimationFrame(loop);
    }
    video.addEventListener("play", loop);
    for (const event of ["seeked", "loadeddata", "pause", "timeupdate"]) video.addEventListener(event, draw);
    window.addEventListener("resize", draw);
    canvas.addEventListener("click", (event) => {
      const r = canvas.getBoundingClientRect();
      const x = event.clientX - r.left;
      const y = event.clientY - r.top;
      const hit = hits.find((h) => x >= h.x && x <= h.x + h.w && y >= h.y && y <= h.y + h.h);
      if (hit) onObject(hit.o);
      else if (video.paused) video.play().catch(() => {});
      else video.pause();
    });

    function show(url, list) {
      objects = list;
      if (video.dataset.url !== url) {
        video.dataset.url = url;
        video.src = mediaUrl(url);
      }
      draw();
    }

    /** Pause the synopsis where an object is on screen (its middle), so its box can be seen and clicked. */
    function focus(o) {
      video.pause();
      video.currentTime = o.synopsis_time + Math.min(o.duration_s / 2, 1);
    }
    return { show, focus, draw };
  }

  return { original, synopsis, mediaUrl };
})();
