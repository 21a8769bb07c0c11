// Copies the dist files the console serves from node_modules into web/static/vendor (gitignored),
// so the app serves one /static tree and a page never reaches for a CDN.
import { cpSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const vendor = join(here, "..", "static", "vendor");
const files = {
  "leaflet/dist/leaflet.js": "leaflet/leaflet.js",
  "leaflet/dist/leaflet.css": "leaflet/leaflet.css",
  "leaflet/dist/images": "leaflet/images",
  "uplot/dist/uPlot.iife.min.js": "uplot/uPlot.iife.min.js",
  "uplot/dist/uPlot.min.css": "uplot/uPlot.min.css",
  "swagger-ui-dist/swagger-ui-bundle.js": "swagger-ui/swagger-ui-bundle.js",
  "swagger-ui-dist/swagger-ui.css": "swagger-ui/swagger-ui.css",
  "swagger-ui-dist/favicon-32x32.png": "swagger-ui/favicon-32x32.png",
};
rmSync(vendor, { recursive: true, force: true });
for (const [from, to] of Object.entries(files)) {
  mkdirSync(dirname(join(vendor, to)), { recursive: true });
  cpSync(join(here, "node_modules", from), join(vendor, to), { recursive: true });
}
console.log(`console assets copied to ${vendor}`);
