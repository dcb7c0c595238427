// What both host apps show besides the editor: whether the provider is synced, and a rewrite's
// diff with what it would drop, accepted through the session (confirming what was shown).
import { TetherAI } from "tether-client";

export function watch(provider) {
  provider.on("synced", () => (document.body.dataset.synced = "true"));
  TetherAI.for(provider).on("status", (status) => (document.body.dataset.ai = status.state));
}

export function renderRewrite(session) {
  const panel = document.querySelector("#rewrite");
  panel.replaceChildren();
  panel.dataset.state = session.state;
  if (session.state === "closed" || session.state === "applied") return;
  const dropped = document.createElement("p");
  dropped.id = "dropped";
  dropped.textContent = session.dropped.map((loss) => `${loss.kind}: ${loss.text}`).join("; ");
  const diff = document.createElement("p");
  diff.id = "diff";
  for (const part of session.diff()) {
    const span = document.createElement(part.op === "same" ? "span" : part.op);
    span.textContent = part.text;
    diff.append(span);
  }
  const accept = document.createElement("button");
  accept.id = "accept";
  accept.disabled = !session.canAccept;
  accept.textContent = session.needsConfirm ? "Accept anyway" : "Accept";
  // The list is on screen above this button: accepting confirms it.
  accept.onclick = async () => {
    const outcome = await session.accept({ confirmDropped: session.needsConfirm });
    if (!outcome.ok) panel.dataset.error = outcome.error.code;
  };
  const unconfirmed = document.createElement("button");
  unconfirmed.id = "accept-unconfirmed";
  unconfirmed.textContent = "Accept without confirming";
  unconfirmed.onclick = async () => {
    const outcome = await session.accept();
    panel.dataset.error = outcome.ok ? "" : outcome.error.code;
  };
  panel.append(dropped, diff, accept, unconfirmed);
}
