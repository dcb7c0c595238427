// Helpers shared by the editor page (main.js) and the document list (index.js).

const TOKEN_KEY = "tether.token";
const NAME_KEY = "tether.name";

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
 * The token: `?token=` in the URL wins (and is remembered in localStorage), then the remembered
 * one, else "" (an empty token is still a token: `--auth none` accepts it).
 */
export function currentToken() {
  const fromUrl = new URLSearchParams(location.search).get("token");
  if (fromUrl !== null) {
    rememberToken(fromUrl);
    return fromUrl;
  }
  try {
    return localStorage.getItem(TOKEN_KEY) || "";
  } catch {
    return "";
  }
}

export function rememberToken(token) {
  try {
    if (token) localStorage.setItem(TOKEN_KEY, token);
    else localStorage.removeItem(TOKEN_KEY);
  } catch {
    /* storage disabled: the token lives in the URL only */
  }
}

/** Reload the page with a new token: drops any ?token= so the remembered one is used. */
export function signInWith(token) {
  rememberToken(token.trim());
  const url = new URL(location.href);
  url.searchParams.delete("token");
  location.replace(url.toString());
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

/** A display name: the token's `name` (or `sub`), a remembered one, or "Guest 1234". */
export function displayName(token) {
  const claims = tokenClaims(token);
  if (typeof claims.name === "string" && claims.name.trim()) return claims.name.trim();
  if (typeof claims.sub === "string" && claims.sub.trim()) return claims.sub.trim();
  try {
    // Per tab (sessionStorage), so two tabs of one browser are told apart in "who is here".
    const remembered = sessionStorage.getItem(NAME_KEY);
    if (remembered) return remembered;
    const guest = `Guest ${1000 + Math.floor(Math.random() * 9000)}`;
    sessionStorage.setItem(NAME_KEY, guest);
    return guest;
  } catch {
    return `Guest ${1000 + Math.floor(Math.random() * 9000)}`;
  }
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

/** Bytes as standard, padded base64 (what the AI protocol's anchors are). */
export function toBase64(bytes) {
  let binary = "";
  for (const b of bytes) binary += String.fromCharCode(b);
  return btoa(binary);
}
