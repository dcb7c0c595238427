// The editor's socket with a fallback: a WebSocket-shaped object the Hocuspocus provider uses
// as its WebSocketPolyfill. It opens a real WebSocket; when that cannot open (a proxy refuses
// the upgrade) or keeps dying young (a proxy kills long-lived sockets), it carries the SAME
// frames over tether's HTTP transport instead (protocol/PROTOCOL.md, "HTTP fallback"): POSTed
// batches up, an event stream down, long polls when the stream is held by a buffering proxy.
// While on HTTP it tries a WebSocket again every retryInterval and moves back when one opens;
// after a WebSocket has worked on this page, a failed upgrade is more likely a blip (the server
// restarting, the network away) than a proxy: then it tries again from 1 s, doubling. And when
// HTTP cannot reach the server either, nothing is learnt about WebSockets: the next attempt
// tries one first again. The provider never knows: auth, sync, presence, acks and AI messages
// are unchanged.

const CONNECTING = 0;
const OPEN = 1;
const CLOSING = 2;
const CLOSED = 3;

const MAX_BATCH_FRAMES = 4096; // protocol/wire/http_wire.py: the server refuses a POST of more
const SHORT_LIVED_MS = 10000; // a socket dying this soon after opening counts against WebSocket
const DEATHS_BEFORE_FALLBACK = 2;
const FIRST_BYTE_MS = 3000; // no first byte on the stream this soon: long polls instead
const ACK_MS = 1000;
const RESUME_ATTEMPTS = 3;
const QUICK_PROBE_MS = 1000; // the first WebSocket retry after a blip; doubles up to retryInterval

/**
 * The WebSocketPolyfill class for HocuspocusProviderWebsocket.
 * token: sent in the Authorization header to open an HTTP session (never in a URL);
 * onTransport(kind): "ws", "http-stream" or "http-poll" whenever that changes.
 */
export function fallbackSocketClass({ token, onTransport = () => {}, retryInterval = 60000 }) {
  // fallbacks: in a row; each doubles the wait before the next WebSocket try (to 16x), so a
  // proxy that passes the upgrade but kills the socket does not make us flap every minute.
  // wsOpened: a WebSocket has opened on this page (so one can get through from here).
  const choice = { brokenAt: 0, deaths: 0, fallbacks: 0, wsOpened: false };
  const retryAfter = () => retryInterval * 2 ** Math.min(Math.max(choice.fallbacks - 1, 0), 4);
  const httpBase = location.origin;

  function wsWanted() {
    return !choice.brokenAt || Date.now() - choice.brokenAt > retryAfter();
  }

  function giveUpOnWs() {
    choice.brokenAt = Date.now();
    choice.deaths = 0;
    choice.fallbacks += 1;
  }

  class FallbackSocket extends EventTarget {
    /** The browser's network came back: whatever failed while it was away says nothing. */
    static networkChanged() {
      choice.brokenAt = 0;
      choice.deaths = 0;
    }

    constructor(url) {
      super();
      this.url = url;
      this.binaryType = "arraybuffer";
      this.readyState = CONNECTING;
      this.transport = null;
      this._ws = null;
      this._http = null;
      this._probe = null;
      if (wsWanted()) this._openWs();
      else this._openHttp();
    }

    send(data) {
      if (this.readyState !== OPEN) return;
      if (this._ws) this._ws.send(data);
      else if (this._http) this._http.send(new Uint8Array(data));
    }

    close(code = 1000, reason = "") {
      if (this.readyState >= CLOSING) return;
      this.readyState = CLOSING;
      clearTimeout(this._probe);
      if (this._ws) this._ws.close(code, reason);
      if (this._http) this._http.leave();
      this._finish(code, reason);
    }

    _emit(type, init) {
      const event = type === "message" ? new MessageEvent("message", init) : new Event(type);
      if (type === "close") Object.assign(event, init);
      this.dispatchEvent(event);
    }

    _finish(code, reason) {
      if (this.readyState === CLOSED) return;
      this.readyState = CLOSED;
      clearTimeout(this._probe);
      // As a real WebSocket does: the close event comes after close() returns.
      setTimeout(() => this._emit("close", { code, reason, wasClean: code !== 1006 }), 0);
    }

    _opened(kind) {
      this.readyState = OPEN;
      this._setTransport(kind);
      this._emit("open");
    }

    _setTransport(kind) {
      this.transport = kind;
      onTransport(kind);
    }

    _openWs() {
      const ws = new WebSocket(this.url);
      ws.binaryType = "arraybuffer";
      this._ws = ws;
      let openedAt = 0;
      ws.addEventListener("open", () => {
        openedAt = Date.now();
        choice.wsOpened = true;
        this._opened("ws");
      });
      ws.addEventListener("message", (event) => this._emit("message", { data: event.data }));
      ws.addEventListener("close", (event) => {
        if (this.readyState >= CLOSING) return;
        if (!openedAt) {
          // The upgrade failed: fall back now, inside this same connection attempt. Should HTTP
          // not reach the server either, the choice before this attempt stands.
          const before = { ...choice };
          giveUpOnWs();
          this._ws = null;
          this._openHttp({ before, quick: choice.wsOpened });
          return;
        }
        if (event.code === 1006 && Date.now() - openedAt < SHORT_LIVED_MS) {
          choice.deaths += 1;
          if (choice.deaths >= DEATHS_BEFORE_FALLBACK) giveUpOnWs();
        } else {
          choice.deaths = 0;
          choice.fallbacks = 0; // the socket lived: it works here
        }
        this._finish(event.code, event.reason);
      });
    }

    _openHttp({ before = null, quick = false } = {}) {
      this._quick = quick;
      this._probes = 0;
      this._http = new HttpSession(httpBase, token, {
        unreachable: () => {
          if (before) Object.assign(choice, before);
        },
        opened: (kind) => this._opened(kind),
        kind: (kind) => this._setTransport(kind),
        message: (frame) => this._emit("message", { data: frame.buffer }),
        closed: (code, reason) => {
          if (this.readyState < CLOSING) this._finish(code, reason);
        },
      });
      this._scheduleProbe();
    }

    /** Every retryInterval on HTTP (after a blip: from 1 s, doubling up to it): can a
     * WebSocket open now? Then reconnect over one. */
    _scheduleProbe() {
      const wait = this._quick ? Math.min(QUICK_PROBE_MS * 2 ** this._probes, retryAfter()) : retryAfter();
      this._probes += 1;
      this._probe = setTimeout(() => {
        if (this.readyState >= CLOSING) return;
        const probe = new WebSocket(this.url);
        probe.addEventListener("open", () => {
          probe.close();
          choice.brokenAt = 0;
          if (this.readyState === OPEN) this.close(1000, "moving back to WebSocket");
        });
        probe.addEventListener("close", () => {
          if (choice.brokenAt && this.readyState < CLOSING) this._scheduleProbe();
        });
      }, wait);
    }
  }

  return FallbackSocket;
}

/** One HTTP session: the frames of one provider socket over POSTs and an event stream. */
class HttpSession {
  constructor(base, token, events) {
    this.base = base;
    this.events = events;
    this.session = null;
    this.lastSeq = 0;
    this.acked = 0;
    this.pending = [];
    this.posting = false;
    this.polling = false;
    this.over = false;
    this.abort = null;
    this.ackTimer = null;
    this.start(token);
  }

  headers(extra = {}) {
    return { "Tether-Session": this.session, ...extra };
  }

  async start(token) {
    try {
      const reply = await fetch(this.base + "/http/session", {
        method: "POST",
        headers: token ? { Authorization: "Bearer " + token } : {},
        cache: "no-store",
      });
      if (reply.status !== 201) {
        const body = await reply.json().catch(() => ({}));
        // 401: the token is refused (the provider shows the refusal when its Auth fails too).
        this.end(reply.status === 401 ? 4401 : 1013, body.error || `HTTP ${reply.status}`);
        return;
      }
      this.session = (await reply.json()).session;
    } catch (err) {
      if (this.events.unreachable) this.events.unreachable();
      this.end(1006, "cannot reach the server");
      return;
    }
    this.events.opened("http-stream");
    this.ackTimer = setInterval(() => {
      if (this.lastSeq > this.acked && !this.polling) this.flush();
    }, ACK_MS);
    this.down();
  }

  send(frame) {
    this.pending.push(frame);
    this.flush();
  }

  /** POST what is queued as one batch, one POST at a time, acknowledging what arrived. */
  async flush() {
    if (this.posting || this.over || !this.session) return;
    this.posting = true;
    try {
      while (!this.over && (this.pending.length || (this.lastSeq > this.acked && !this.polling))) {
        // At most MAX_BATCH_FRAMES per POST (the server refuses more); the rest go next.
        const frames = this.pending.splice(0, MAX_BATCH_FRAMES);
        const acked = this.lastSeq;
        const reply = await fetch(this.base + "/http/send", {
          method: "POST",
          headers: this.headers({ "Content-Type": "application/octet-stream", "Tether-Ack": String(acked) }),
          body: encodeBatch(frames),
          cache: "no-store",
        });
        this.acked = Math.max(this.acked, acked);
        if (reply.status !== 204) {
          // 410: closed by the server; the stream carries the close event. Else: gone.
          if (reply.status !== 410) this.end(1006, `HTTP send refused (${reply.status})`);
          return;
        }
      }
    } catch (err) {
      this.end(1006, "HTTP send failed"); // resending could apply frames twice: start over
    } finally {
      this.posting = false;
    }
  }

  async down() {
    let drops = 0;
    while (!this.over) {
      let gotEvent = false;
      try {
        gotEvent = await this.request();
        if (gotEvent === null) return; // closed
      } catch (err) {
        if (this.over) return;
      }
      drops = gotEvent || this.polling ? 0 : drops + 1;
      if (drops >= RESUME_ATTEMPTS) {
        this.end(1006, "the HTTP stream keeps failing");
        return;
      }
    }
  }

  /** One down request (a stream, or one long poll): true if it brought events, null if the
   * session ended. */
  async request() {
    const abort = new AbortController();
    this.abort = abort;
    const url = this.base + "/http/events" + (this.polling ? "?mode=poll" : "");
    let firstByte = null;
    if (!this.polling) {
      firstByte = setTimeout(() => {
        this.polling = true;
        this.events.kind("http-poll");
        abort.abort();
      }, FIRST_BYTE_MS);
    }
    if (this.lastSeq > this.acked) this.acked = this.lastSeq; // resuming acknowledges
    let got = false;
    try {
      const reply = await fetch(url, {
        headers: this.headers({ "Last-Event-ID": String(this.lastSeq) }),
        cache: "no-store",
        signal: abort.signal,
      });
      if (reply.status !== 200) {
        clearTimeout(firstByte);
        this.end(1006, `HTTP session lost (${reply.status})`);
        return null;
      }
      const reader = reply.body.getReader();
      const parser = new EventParser();
      for (;;) {
        const { value, done } = await reader.read();
        clearTimeout(firstByte);
        if (done) return got;
        for (const event of parser.feed(value)) {
          if (event.close) {
            this.end(event.code, event.reason);
            return null;
          }
          if (event.seq <= this.lastSeq) continue;
          this.lastSeq = event.seq;
          got = true;
          this.events.message(event.frame);
        }
      }
    } catch (err) {
      clearTimeout(firstByte);
      if (abort.signal.aborted && !this.over) return got; // switched to polling
      throw err;
    }
  }

  leave() {
    if (this.over) return;
    const session = this.session;
    this.end(1000, "");
    if (session) {
      fetch(this.base + "/http/session", {
        method: "DELETE",
        headers: { "Tether-Session": session },
        keepalive: true,
      }).catch(() => {});
    }
  }

  end(code, reason) {
    if (this.over) return;
    this.over = true;
    clearInterval(this.ackTimer);
    if (this.abort) this.abort.abort();
    this.events.closed(code, reason);
  }
}

function encodeBatch(frames) {
  let size = 0;
  const heads = frames.map((frame) => {
    const head = varUint(frame.length);
    size += head.length + frame.length;
    return head;
  });
  const out = new Uint8Array(size);
  let at = 0;
  frames.forEach((frame, i) => {
    out.set(heads[i], at);
    at += heads[i].length;
    out.set(frame, at);
    at += frame.length;
  });
  return out;
}

function varUint(value) {
  const bytes = [];
  while (value > 0x7f) {
    bytes.push(0x80 | (value & 0x7f));
    value = Math.floor(value / 128);
  }
  bytes.push(value);
  return Uint8Array.from(bytes);
}

/** The down stream's events: {seq, frame} or {close, code, reason}; comments are skipped. */
class EventParser {
  constructor() {
    this.text = "";
    this.decoder = new TextDecoder();
  }

  feed(chunk) {
    this.text += this.decoder.decode(chunk, { stream: true });
    const events = [];
    let end;
    while ((end = this.text.indexOf("\n\n")) >= 0) {
      const block = this.text.slice(0, end);
      this.text = this.text.slice(end + 2);
      const fields = {};
      for (const line of block.split("\n")) {
        if (!line || line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const name = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" ")) value = value.slice(1);
        fields[name] = value;
      }
      if (fields.event === "close") {
        const { code, reason } = JSON.parse(fields.data);
        events.push({ close: true, code, reason });
      } else if (fields.id !== undefined) {
        events.push({ seq: Number(fields.id), frame: base64Bytes(fields.data) });
      }
    }
    return events;
  }
}

function base64Bytes(text) {
  const raw = atob(text);
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}
