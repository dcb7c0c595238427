// Other editors' presence is untrusted input that lands in this page's styles: y-codemirror.next
// writes user.color into the remote caret's and selection's inline style, and the presence list
// shows user.name. A colour like "red;background:url(http://x)" would restyle the page and make
// it fetch an attacker's URL. The server already keeps only hex colours and bounded names
// (protocol/wire/presence_safety.py); this is the same rule here, for servers that do not.
const COLOR = /^#(?:[0-9a-f]{3}|[0-9a-f]{6})$/i;
const COLOR_LIGHT = /^#(?:[0-9a-f]{3}|[0-9a-f]{6}|[0-9a-f]{8})$/i; // y-codemirror adds alpha
export const MAX_NAME_CHARS = 64;

// Make one presence state safe, in place (the awareness map's own objects, which every reader
// sees): unsafe colours and non-string names are removed, long names cut.
export function sanitizePresenceState(state) {
  if (!state || typeof state !== "object") return;
  const user = state.user;
  if (!user || typeof user !== "object") return; // no fields to read: defaults apply
  if ("color" in user && !(typeof user.color === "string" && COLOR.test(user.color))) delete user.color;
  if ("colorLight" in user && !(typeof user.colorLight === "string" && COLOR_LIGHT.test(user.colorLight))) {
    delete user.colorLight;
  }
  if ("name" in user) {
    if (typeof user.name !== "string") delete user.name;
    else if (user.name.length > MAX_NAME_CHARS) user.name = user.name.slice(0, MAX_NAME_CHARS);
  }
}

// Clean every remote state whenever presence changes. Register before anything that renders
// presence (yCollab, the presence list): an Observable calls its listeners in order.
export function guardPresence(awareness) {
  if (!awareness) return;
  const clean = () => {
    for (const [clientId, state] of awareness.getStates()) {
      if (clientId !== awareness.clientID) sanitizePresenceState(state);
    }
  };
  awareness.on("change", clean);
  awareness.on("update", clean);
  clean();
}
