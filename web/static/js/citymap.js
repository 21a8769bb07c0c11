// Draws the deployment map with Leaflet and no tile server (the console runs on an isolated network):
// a latitude/longitude grid, one hull per district, one marker per checkpoint, and on demand a trajectory.
// Every label is built as a DOM node with textContent; Leaflet is never handed a string of data as HTML.
"use strict";

const CityMap = (() => {
  const { t, el } = Console;
  const PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2"];
  const LABEL_ZOOM = 15;

  function cross(o, a, b) {
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]);
  }

  /** Convex hull (monotone chain) of [lat, lon] points. */
  function hull(points) {
    const pts = [...points].sort((a, b) => a[0] - b[0] || a[1] - b[1]);
    if (pts.length < 3) return pts;
    const half = (list) => {
      const out = [];
      for (const p of list) {
        while (out.length >= 2 && cross(out[out.length - 2], out[out.length - 1], p) <= 0) out.pop();
        out.push(p);
      }
      out.pop();
      return out;
    };
    return half(pts).concat(half([...pts].reverse()));
  }

  /** A district's outline: the hull of its checkpoints, each grown to a small square so one point still shows. */
  function districtOutline(checkpoints, pad) {
    const corners = [];
    for (const c of checkpoints) {
      for (const [dy, dx] of [[-pad, -pad], [-pad, pad], [pad, -pad], [pad, pad]]) corners.push([c.lat + dy, c.lon + dx]);
    }
    return hull(corners);
  }

  function label(text, className) {
    return L.divIcon({ className: `map-label ${className || ""}`, html: el("span", {}, text), iconSize: null });
  }

  function niceStep(span) {
    for (const step of [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1]) if (span / step <= 12) return step;
    return 1;
  }

  /** Graticule lines with their degree labels along the south and west edges. */
  function drawGrid(map, bounds) {
    const layer = L.layerGroup().addTo(map);
    const south = bounds.getSouth();
    const north = bounds.getNorth();
    const west = bounds.getWest();
    const east = bounds.getEast();
    const step = niceStep(Math.max(north - south, east - west));
    const style = { color: "#9aa5b1", weight: 1, opacity: 0.6, dashArray: "4 4", interactive: false };
    const decimals = step < 0.01 ? 3 : 2;
    for (let lat = Math.ceil(south / step) * step; lat <= north; lat += step) {
      L.polyline([[lat, west], [lat, east]], style).addTo(layer);
      L.marker([lat, west], { icon: label(`${lat.toFixed(decimals)}°N`, "grid-label"), interactive: false }).addTo(layer);
    }
    for (let lon = Math.ceil(west / step) * step; lon <= east; lon += step) {
      L.polyline([[south, lon], [north, lon]], style).addTo(layer);
      L.marker([south, lon], { icon: label(`${lon.toFixed(decimals)}°E`, "grid-label"), interactive: false }).addTo(layer);
    }
    L.rectangle(bounds, { color: "#52606d", weight: 1, fill: false, interactive: false }).addTo(layer);
    return layer;
  }

  function checkpointTooltip(cp, district) {
    return el("div", { class: "cp-tooltip" },
      el("strong", {}, cp.checkpoint_id),
      el("div", {}, `${district ? district.name : cp.district} · ${t("map.crossroad")} ${cp.crossroad} · ${t(`direction.${cp.direction}`)}`),
      el("div", {}, `${t("map.vehicle_camera")} ${cp.vehicle_device}${cp.face_device ? ` · ${t("map.face_camera")} ${cp.face_device}` : ""}`));
  }

  /**
   * Draw ``data`` (the /api/v1/map JSON) into ``container``. ``onCheckpoint(cp)`` is called on a marker click.
   */
  function create(container, data, { onCheckpoint } = {}) {
    const map = L.map(container, { zoomSnap: 0.5, attributionControl: false, minZoom: 8, maxZoom: 19 });
    L.control.scale({ imperial: false }).addTo(map);
    const districts = new Map(data.districts.map((d, i) => [d.code, { ...d, color: PALETTE[i % PALETTE.length] }]));
    const points = data.checkpoints.map((c) => [c.lat, c.lon]);
    const bounds = points.length ? L.latLngBounds(points).pad(0.12) : L.latLngBounds([[30.2, 120.1], [30.4, 120.4]]);
    map.fitBounds(bounds);  // first: vector layers get their SVG elements only once the map has a view
    drawGrid(map, bounds);

    const byDistrict = new Map();
    for (const cp of data.checkpoints) {
      if (!byDistrict.has(cp.district)) byDistrict.set(cp.district, []);
      byDistrict.get(cp.district).push(cp);
    }
    for (const [code, cps] of byDistrict) {
      const district = districts.get(code) || { code, name: code, color: "#7b8794" };
      const outline = districtOutline(cps, 0.0035);
      const polygon = L.polygon(outline, { color: district.color, weight: 2, fillOpacity: 0.08, interactive: false }).addTo(map);
      const top = polygon.getBounds();
      L.marker([top.getNorth(), (top.getWest() + top.getEast()) / 2], {
        icon: label(`${district.name} (${code})`, "district-label"), interactive: false,
      }).addTo(map);
      district.polygon = polygon;
    }

    const markers = new Map();
    for (const cp of data.checkpoints) {
      const district = districts.get(cp.district);
      const color = district ? district.color : "#7b8794";
      const marker = L.circleMarker([cp.lat, cp.lon], {
        radius: cp.face_device ? 8 : 6, color: cp.face_device ? "#1f2933" : color, weight: cp.face_device ? 2 : 1,
        fillColor: color, fillOpacity: 0.85,
      }).addTo(map);
      marker.bindTooltip(checkpointTooltip(cp, district), { direction: "top", offset: [0, -6] });
      marker.cpLabel = L.marker([cp.lat, cp.lon], {
        icon: label(`${cp.crossroad}·${t(`direction.${cp.direction}`)}`, "cp-label"), interactive: false,
      });
      marker.getElement().dataset.checkpoint = cp.checkpoint_id;
      if (onCheckpoint) marker.on("click", () => onCheckpoint(cp));
      marker.checkpoint = cp;
      markers.set(cp.checkpoint_id, marker);
    }
    // Checkpoint labels only when zoomed in far enough for them not to pile up.
    const toggleLabels = () => {
      const show = map.getZoom() >= LABEL_ZOOM;
      for (const m of markers.values()) {
        if (show && !map.hasLayer(m.cpLabel)) m.cpLabel.addTo(map);
        else if (!show && map.hasLayer(m.cpLabel)) m.cpLabel.remove();
      }
    };
    map.on("zoomend", toggleLabels);
    toggleLabels();
    addLegend(map);

    let selected = null;
    let highlighted = [];
    let trajectory = null;

    /** Mark a checkpoint (null: none); ``focus`` zooms in far enough to tell it from its neighbours. */
    function select(id, focus) {
      if (selected) selected.setStyle({ weight: selected.checkpoint.face_device ? 2 : 1, color: selected.checkpoint.face_device ? "#1f2933" : selected.options.fillColor });
      selected = markers.get(id) || null;
      if (selected) {
        selected.setStyle({ weight: 4, color: "#f5a623" });
        selected.bringToFront();
        if (focus) map.setView(selected.getLatLng(), Math.max(map.getZoom(), LABEL_ZOOM + 1));
      }
    }

    function highlight(ids) {
      for (const m of highlighted) m.setRadius(m.checkpoint.face_device ? 8 : 6);
      highlighted = ids.map((id) => markers.get(id)).filter(Boolean);
      for (const m of highlighted) m.setRadius(12);
    }

    /** Draw captures (time order) as a numbered path; several captures at one checkpoint share one label. */
    function showTrajectory(captures) {
      if (trajectory) trajectory.remove();
      trajectory = L.layerGroup().addTo(map);
      const located = captures.map((c, i) => ({ ...c, n: i + 1 })).filter((c) => c.location && c.location.lat !== null && c.location.lat !== undefined);
      if (!located.length) return 0;
      const path = located.map((c) => [c.location.lat, c.location.lon]);
      L.polyline(path, { color: "#c81e1e", weight: 3, opacity: 0.85, className: "trajectory-line" }).addTo(trajectory);
      const stops = new Map();
      for (const c of located) {
        const key = `${c.location.lat},${c.location.lon}`;
        if (!stops.has(key)) stops.set(key, { at: [c.location.lat, c.location.lon], numbers: [] });
        stops.get(key).numbers.push(c.n);
      }
      for (const stop of stops.values()) {
        const text = stop.numbers.length > 4 ? `${stop.numbers.slice(0, 3).join(",")}…${stop.numbers[stop.numbers.length - 1]}` : stop.numbers.join(",");
        L.marker(stop.at, { icon: label(text, "trajectory-stop"), interactive: false }).addTo(trajectory);
      }
      map.fitBounds(L.latLngBounds(path).pad(0.3), { maxZoom: 15 });
      return located.length;
    }

    function clearTrajectory() {
      if (trajectory) trajectory.remove();
      trajectory = null;
    }

    function overview() {
      map.fitBounds(bounds);
    }

    return { map, markers, districts, select, highlight, showTrajectory, clearTrajectory, overview };
  }

  function addLegend(map) {
    const legend = L.control({ position: "bottomright" });
    legend.onAdd = () => el("div", { class: "map-legend" },
      el("div", {}, el("span", { class: "swatch dot" }), t("map.legend_checkpoint")),
      el("div", {}, el("span", { class: "swatch dot ring" }), t("map.legend_face")),
      el("div", {}, el("span", { class: "swatch area" }), t("map.legend_district")),
      el("div", {}, el("span", { class: "swatch line" }), t("map.legend_trajectory")));
    legend.addTo(map);
  }

  return { create };
})();
