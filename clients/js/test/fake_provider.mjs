// A provider's Stateless channel in memory (the part of HocuspocusProvider the client uses):
// what the client sent, and server messages delivered as the provider would.
export class FakeProvider {
  constructor({ synced = true, authenticated = true, scope = "read-write" } = {}) {
    this.sent = [];
    this.handlers = new Map();
    this.isSynced = synced;
    this.isAuthenticated = authenticated;
    this.authorizedScope = scope;
  }

  on(event, fn) {
    if (!this.handlers.has(event)) this.handlers.set(event, new Set());
    this.handlers.get(event).add(fn);
  }

  off(event, fn) {
    this.handlers.get(event)?.delete(fn);
  }

  emit(event, value) {
    for (const fn of this.handlers.get(event) ?? []) fn(value);
  }

  sendStateless(payload) {
    this.sent.push(JSON.parse(payload));
  }

  /** A server message, as a Stateless payload (an object is JSON-encoded first). */
  deliver(message) {
    this.emit("stateless", { payload: typeof message === "string" ? message : JSON.stringify(message) });
  }

  last(type) {
    return this.sent.filter((m) => m.type === type).at(-1);
  }
}
