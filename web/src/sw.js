// tether's service worker (served as /sw.js, its scope the server's pages): keeps the editor's
// page shell and its scripts and styles, so /d/{name} opens without the server and shows the
// document's local copy (local.js). Shells go network first (a new build's shell wins), then
// the cache; the build's files are cached when the worker installs. build.mjs fills in
// TETHER_VERSION (a hash of the build) and TETHER_FILES: a new build is a new worker, whose
// cache replaces the old one. It never sees documents, tokens or the /ws, /http and /api
// traffic: only GETs of /d/* pages, /static/* and the favicon.
/* global TETHER_VERSION, TETHER_FILES */

const CACHE = `tether-shell-${TETHER_VERSION}`;
const PREFIX = "tether-shell-";
const BASE = new URL(self.registration.scope).pathname.replace(/\/+$/, "");
const STATIC = `${BASE}/static/`;
const FAVICON = `${BASE}/favicon.svg`;
// A network that neither answers nor fails (a hung proxy): the cached copy after this long.
const NETWORK_MS = 4000;
// Chunks carry their content's hash in their name: the cached copy is always right.
const HASHED = /^(chunk|rich_editor|plain_editor)-[A-Z0-9]+\.js$/;

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) => cache.addAll([...TETHER_FILES.map((file) => STATIC + file), FAVICON]))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((keys) => Promise.all(keys.filter((k) => k.startsWith(PREFIX) && k !== CACHE).map((k) => caches.delete(k))))
      .then(() => self.clients.claim()),
  );
});

/** The cache key of a page: its path only, so no query (a token, ?local=off) is ever kept. */
function shellKey(url) {
  return url.origin + url.pathname;
}

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET") return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  const path = url.pathname;
  if (request.mode === "navigate" && path.startsWith(`${BASE}/d/`)) {
    event.respondWith(networkFirst(request, shellKey(url)));
  } else if (path.startsWith(STATIC)) {
    const file = path.slice(STATIC.length);
    event.respondWith(HASHED.test(file) ? cacheFirst(request, shellKey(url)) : networkFirst(request, shellKey(url)));
  } else if (path === FAVICON) {
    event.respondWith(networkFirst(request, shellKey(url)));
  }
});

async function networkFirst(request, key) {
  const cache = await caches.open(CACHE);
  let timer = null;
  const network = fetch(request).then(async (response) => {
    if (response.ok) await cache.put(key, response.clone());
    return response;
  });
  network.catch(() => {}); // answered from the cache meanwhile: its failure is nobody's
  const cachedLater = new Promise((resolve) => {
    timer = setTimeout(() => cache.match(key).then(resolve), NETWORK_MS);
  });
  try {
    const first = await Promise.race([network, cachedLater]);
    if (first) return first;
    return await network; // nothing cached: wait for the network after all
  } catch (err) {
    const cached = await cache.match(key);
    if (cached) return cached;
    throw err;
  } finally {
    clearTimeout(timer);
  }
}

async function cacheFirst(request, key) {
  const cache = await caches.open(CACHE);
  const cached = await cache.match(key);
  if (cached) return cached;
  const response = await fetch(request);
  if (response.ok) await cache.put(key, response.clone());
  return response;
}

// A page loaded before this worker controlled it asks for its shell to be kept.
self.addEventListener("message", (event) => {
  const data = event.data || {};
  const port = event.ports && event.ports[0];
  if (data.type !== "keep" || typeof data.url !== "string" || !data.url.startsWith(`${BASE}/d/`)) return;
  const url = new URL(data.url, self.location.origin);
  event.waitUntil(
    caches
      .open(CACHE)
      .then((cache) =>
        cache.match(shellKey(url)).then((hit) =>
          hit ? null : fetch(url.pathname, { credentials: "same-origin" }).then((r) => (r.ok ? cache.put(shellKey(url), r) : null)),
        ),
      )
      .catch(() => null)
      .then(() => port && port.postMessage("kept")),
  );
});
