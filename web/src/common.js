// Helpers shared by the editor page (main.js) and the document list (index.js).

const TOKEN_KEY = "tether.token";
const NAME_KEY = "tether.name";
const GUEST_KEY = "tether.guest";

/**
 * What the HTML shell put in window.TETHER ({auth: "jwt"|"none", document?: string, base:
 * string}). `base` is where the server is mounted ("" at the root, "/collab" inside a host app).
 */
export function config() {
  const c = (typeof window !== "undefined" && window.TETHER) || {};
  const base = typeof c.base === "string" ? c.base.replace(/\/+$/, "") : "";
  return { ...c, auth: c.auth === "none" ? "none" : "jwt", base };
}

/** A URL path on this tether server, under the prefix it is mounted at: at("/api/documents"). */
export function at(path) {
  return config().base + path;
}

/** A tiny DOM builder: h("div", {class: "x", onclick: f}, "text", child, ...). */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on") && typeof value === "function") {
      node.addEventListener(key.slice(2), value);
    } else if (key === "class") {
      node.className = value;
    } else if (key === "style" && typeof value === "object") {
      Object.assign(node.style, value);
    } else if (value === true) {
      node.setAttribute(key, "");
    } else {
      node.setAttribute(key, String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** The mount point the shell provides; created when missing so a bare page works too. */
export function appRoot() {
  let root = document.getElementById("app");
  if (!root) {
    root = h("div", { id: "app" });
    document.body.append(root);
  }
  return root;
}

/**
 * The token: `?token=` in the URL wins; it is moved out of the address bar at once (so a shared
 * link or the history never carries it) into this tab's sessionStorage, which a reload reads.
 * Else the tab's remembered one, else "" (an empty token is still a token: `--auth none`
 * accepts it). Never kept in localStorage: on a shared machine it would outlive the tab.
 */
export function currentToken() {
  const url = new URL(location.href);
  const fromUrl = url.searchParams.get("token");
  if (fromUrl !== null) {
    rememberToken(fromUrl);
    url.searchParams.delete("token");
    try {
      history.replaceState(history.state, "", url.pathname + url.search + url.hash);
    } catch {
      /* a sandboxed page: the token stays in its address */
    }
    return fromUrl;
  }
  try {
    localStorage.removeItem(TOKEN_KEY); // an older page kept it there: forget it
    return sessionStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function rememberToken(token) {
  try {
    if (token) sessionStorage.setItem(TOKEN_KEY, token);
    else sessionStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: the token lives for this page load only */
  }
}

/** Reload the page with a new token, remembered for this tab. */
export function signInWith(token) {
  rememberToken(token.trim());
  location.reload();
}

/** The JWT's claims, unverified (only for display), or {} when it is not a JWT. */
export function tokenClaims(token) {
  const parts = (token || "").split(".");
  if (parts.length !== 3) return {};
  try {
    const b64 = parts[1].replace(/-/g, "+").replace(/_/g, "/");
    const padded = b64 + "=".repeat((4 - (b64.length % 4)) % 4);
    const binary = atob(padded);
    // UTF-8 bytes to text without TextDecoder (which some embedded test DOMs lack).
    const text = decodeURIComponent(
      Array.from(binary, (c) => "%" + c.charCodeAt(0).toString(16).padStart(2, "0")).join(""),
    );
    const claims = JSON.parse(text);
    return claims && typeof claims === "object" ? claims : {};
  } catch {
    return {};
  }
}

/** The name this browser shows in presence: the one typed in the name field (kept in
 * localStorage), else the token's `name` (or `sub`), else a guest name kept the same way, so a
 * reload keeps the name and with it the colour. */
export function displayName(token) {
  const typed = storedName();
  if (typed) return typed;
  const claims = tokenClaims(token);
  if (typeof claims.name === "string" && claims.name.trim()) return claims.name.trim().slice(0, MAX_NAME);
  if (typeof claims.sub === "string" && claims.sub.trim()) return claims.sub.trim().slice(0, MAX_NAME);
  try {
    const remembered = localStorage.getItem(GUEST_KEY);
    if (remembered) return remembered;
    const guest = `Guest ${1000 + Math.floor(Math.random() * 9000)}`;
    localStorage.setItem(GUEST_KEY, guest);
    return guest;
  } catch {
    return `Guest ${1000 + Math.floor(Math.random() * 9000)}`;
  }
}

export const MAX_NAME = 64; // what the server and other pages keep of a name (presence.js)

function storedName() {
  try {
    return (localStorage.getItem(NAME_KEY) || "").trim().slice(0, MAX_NAME);
  } catch {
    return "";
  }
}

/** Keep the name typed in the page's name field ("" forgets it). */
export function rememberName(name) {
  try {
    const clean = String(name || "").trim().slice(0, MAX_NAME);
    if (clean) localStorage.setItem(NAME_KEY, clean);
    else localStorage.removeItem(NAME_KEY);
  } catch {
    /* storage disabled: the name lasts this page load */
  }
}

const COLORS = [
  "#e4572e", "#2e86ab", "#a23b72", "#3b8f5a", "#f18f01", "#6c5ce7",
  "#d1495b", "#00798c", "#8e6c8a", "#c17817", "#3d5a80", "#ef476f",
];

/** A colour for a name, the same on every load and in every browser (FNV-1a of its UTF-16). */
export function colorOf(name) {
  let hash = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    hash ^= name.charCodeAt(i);
    hash = Math.imul(hash, 0x01000193) >>> 0;
  }
  return COLORS[hash % COLORS.length];
}

/** The sign-in box: a token field that reloads the page signed in. */
export function signInBox(message) {
  const input = h("input", {
    type: "password",
    id: "tether-token-input",
    placeholder: "paste your access token",
    autocomplete: "off",
    spellcheck: "false",
  });
  const form = h(
    "form",
    {
      class: "signin",
      id: "tether-signin",
      onsubmit: (event) => {
        event.preventDefault();
        if (input.value.trim()) signInWith(input.value);
      },
    },
    message ? h("p", { class: "signin-message" }, message) : null,
    h("label", { for: "tether-token-input" }, "Access token"),
    h("div", { class: "signin-row" }, input, h("button", { type: "submit" }, "Sign in")),
  );
  return form;
}

/** The href of a document's editor page; "/" inside names stays readable. */
export function documentHref(name) {
  return at("/d/" + name.split("/").map(encodeURIComponent).join("/"));
}
