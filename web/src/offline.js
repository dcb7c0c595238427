// What the editor keeps in the browser beyond the page, without loading it: the names of the
// local copies (local.js) and clearing them, and the service worker (sw.js) that keeps the page
// shell for offline use. The document list (index.js) uses it too, so it imports no Yjs.
import { at } from "./common.js";

// One database per server (origin and mount prefix) and document.
const PREFIX = "tether|";
const SHELL_CACHES = "tether-shell-"; // sw.js names its caches so

function serverPrefix() {
  return `${PREFIX}${location.origin}${at("")}|`;
}

export function localName(documentName) {
  return serverPrefix() + documentName;
}

export function deleteDatabase(name) {
  return new Promise((resolve) => {
    try {
      const request = indexedDB.deleteDatabase(name);
      request.onsuccess = request.onerror = request.onblocked = () => resolve();
    } catch {
      resolve();
    }
  });
}

/** Forget every local copy this server's pages made in this browser (deployment off, sign out). */
export async function clearAllLocalCopies() {
  try {
    const prefix = serverPrefix();
    const all = indexedDB.databases ? await indexedDB.databases() : [];
    await Promise.all(all.filter((db) => db.name && db.name.startsWith(prefix)).map((db) => deleteDatabase(db.name)));
  } catch (err) {
    console.warn("tether: clearing local copies", err);
  }
}

/**
 * The page shell for offline use: with local copies on, register sw.js (its scope is this
 * server's pages) and have it keep this page's shell; off, unregister it and drop its caches.
 * onKept() is called once this page's shell and scripts are in the cache.
 */
export function keepShell(enabled, onKept = () => {}) {
  if (!("serviceWorker" in navigator)) return;
  const scope = location.origin + at("/");
  if (!enabled) {
    navigator.serviceWorker
      .getRegistrations()
      .then((regs) => regs.filter((r) => r.scope === scope).forEach((r) => r.unregister()))
      .catch(() => {});
    if (typeof caches !== "undefined") {
      caches
        .keys()
        .then((keys) => keys.filter((k) => k.startsWith(SHELL_CACHES)).forEach((k) => caches.delete(k)))
        .catch(() => {});
    }
    return;
  }
  navigator.serviceWorker
    .register(at("/sw.js"), { scope: at("/") })
    .then(() => navigator.serviceWorker.ready)
    .then((registration) => {
      // The first page a worker sees was loaded before it: ask it to keep this shell as well.
      const channel = new MessageChannel();
      channel.port1.onmessage = () => onKept();
      registration.active.postMessage({ type: "keep", url: location.pathname }, [channel.port2]);
    })
    .catch((err) => console.warn("tether: no offline shell", err));
}
