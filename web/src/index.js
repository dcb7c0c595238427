// tether's start page (/): the documents this token may open, and a box to open a new one.
import "./common.css";
import "./index.css";
import { appRoot, at, config, currentToken, documentHref, h, rememberToken, signInBox, tokenClaims } from "./common.js";
import { clearAllLocalCopies, keepShell } from "./offline.js";

const cfg = config();
const token = currentToken();
if (cfg.local === false) {
  // This deployment keeps no local copies: drop what an earlier setting left.
  clearAllLocalCopies();
  keepShell(false);
}
const root = appRoot();
root.classList.add("tether-index-page");

const listEl = h("div", { id: "tether-documents", class: "documents", "aria-live": "polite" }, "Loading…");
const nameInput = h("input", {
  type: "text",
  id: "tether-new-name",
  placeholder: "document name, e.g. notes/today",
  autocomplete: "off",
  required: true,
  maxlength: 512,
});
const searchInput = h("input", {
  type: "search",
  id: "tether-search",
  placeholder: "filter by name",
  autocomplete: "off",
  "aria-label": "filter documents by name",
  oninput: () => applyFilter(),
});
const statusEl = h("p", { id: "tether-index-status", class: "status", role: "status" });
const readonlyToken = cfg.auth === "jwt" && tokenClaims(token).scope === "readonly";
const signedIn = cfg.auth === "jwt" && token
  ? h(
      "span",
      { class: "who" },
      "signed in",
      whoSuffix(),
      " · ",
      h(
        "a",
        {
          href: "#",
          id: "tether-signout",
          onclick: async (e) => {
            e.preventDefault();
            rememberToken("");
            // Signing out on a shared machine: no document stays behind in this browser.
            await clearAllLocalCopies();
            location.replace(at("/"));
          },
        },
        "sign out",
      ),
    )
  : null;

root.append(
  h("header", { class: "topbar" }, h("a", { href: at("/"), class: "brand" }, "tether"), h("span", { class: "spacer" }), signedIn),
  h(
    "main",
    { class: "index-main" },
    h("h1", {}, "Documents"),
    h(
      "form",
      {
        id: "tether-new",
        class: "new-doc",
        onsubmit: (e) => {
          e.preventDefault();
          const name = nameInput.value.trim();
          if (name) location.assign(documentHref(name));
        },
      },
      nameInput,
      h("button", { type: "submit", class: "primary" }, "Open"),
    ),
    searchInput,
    statusEl,
    listEl,
  ),
);

function whoSuffix() {
  const claims = tokenClaims(token);
  const who = claims.name || claims.sub;
  return who ? ` as ${who}` : "";
}

function formatTime(value) {
  if (value === undefined || value === null || value === "") return "";
  let date;
  if (typeof value === "number") date = new Date(value < 1e12 ? value * 1000 : value);
  else date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}

function formatBytes(n) {
  if (typeof n !== "number") return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

async function load() {
  let response;
  try {
    response = await fetch(at("/api/documents"), {
      headers: token ? { Authorization: `Bearer ${token}` } : {},
    });
  } catch (err) {
    listEl.replaceChildren(h("p", { class: "error" }, `Could not reach the server: ${err.message}`));
    return;
  }
  if (response.status === 401 || response.status === 403) {
    listEl.replaceChildren(
      signInBox(token ? "Your token was refused (missing, invalid or expired)." : "This server needs an access token."),
    );
    return;
  }
  if (!response.ok) {
    listEl.replaceChildren(h("p", { class: "error" }, `The server answered ${response.status}.`));
    return;
  }
  const body = await response.json();
  const docs = Array.isArray(body.documents) ? body.documents : [];
  if (docs.length === 0) {
    listEl.replaceChildren(h("p", { class: "empty" }, "No documents yet: name one above to start writing."));
    return;
  }
  docs.sort((a, b) => String(b.updated_at ?? "").localeCompare(String(a.updated_at ?? ""), undefined, { numeric: true }));
  listEl.replaceChildren(
    h(
      "table",
      {},
      h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Updated"), h("th", { class: "num" }, "Size"), h("th", {}, ""), h("th", {}, ""))),
      h(
        "tbody",
        {},
        docs.map((d) =>
          h(
            "tr",
            { "data-name": d.name },
            h("td", {}, h("a", { href: documentHref(String(d.name)) }, String(d.name))),
            h("td", {}, formatTime(d.updated_at)),
            h("td", { class: "num" }, formatBytes(d.stored_bytes)),
            h("td", {}, d.loaded ? h("span", { class: "badge", title: "open in an editor or in memory" }, "live") : ""),
            h(
              "td",
              { class: "row-actions" },
              readonlyToken
                ? ""
                : h(
                    "button",
                    {
                      type: "button",
                      class: "delete",
                      title: `delete ${d.name}`,
                      "aria-label": `delete ${d.name}`,
                      onclick: () => remove(String(d.name)),
                    },
                    "Delete",
                  ),
            ),
          ),
        ),
      ),
    ),
  );
}

// Search filters the rows already listed (by name, case-insensitive): no request per key.
function applyFilter() {
  const needle = searchInput.value.trim().toLowerCase();
  const rows = listEl.querySelectorAll("tbody tr");
  let shown = 0;
  for (const row of rows) {
    const match = !needle || row.dataset.name.toLowerCase().includes(needle);
    row.hidden = !match;
    if (match) shown += 1;
  }
  if (rows.length) statusEl.textContent = needle && !shown ? `No documents match “${searchInput.value.trim()}”.` : "";
}

async function remove(name) {
  if (!confirm(`Delete “${name}”? Its text and saved versions are gone for good, and anyone editing it is disconnected.`)) return;
  let response;
  try {
    response = await fetch(at(`/api/documents/${name.split("/").map(encodeURIComponent).join("/")}`), {
      method: "DELETE",
      headers: token ? { Authorization: `Bearer ${token}` } : {},
    });
  } catch (err) {
    statusEl.textContent = `Could not reach the server: ${err.message}`;
    return;
  }
  if (!response.ok) {
    let reason = `the server answered ${response.status}`;
    try {
      reason = (await response.json()).error || reason;
    } catch {}
    statusEl.textContent = `Could not delete “${name}”: ${reason}.`;
    return;
  }
  statusEl.textContent = `Deleted “${name}”.`;
  for (const row of listEl.querySelectorAll("tbody tr")) if (row.dataset.name === name) row.remove();
  if (!listEl.querySelector("tbody tr")) listEl.replaceChildren(h("p", { class: "empty" }, "No documents yet: name one above to start writing."));
}

load().then(applyFilter);
nameInput.focus();
