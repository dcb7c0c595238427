// The browser's own copy of an open document: y-indexeddb on the page's Y.Doc, merged before
// the socket syncs, so edits survive a reload, a crashed tab and a server that is down. Holds
// document content and two plain facts about it (the last scope the server granted, whether
// edits were waiting for the server), never a token or a name.
import { IndexeddbPersistence } from "y-indexeddb";
import { deleteDatabase, localName } from "./offline.js";

// IndexedDB that does not answer (disabled, broken profile): go on without a local copy.
const OPEN_TIMEOUT_MS = 2000;

/**
 * A document's local copy. `state` is "loading", "saving" (an edit is not yet in IndexedDB),
 * "saved", "off" or "failed"; onState(state) is called whenever it changes. `ready` resolves
 * once the stored copy is merged into `ydoc` and `meta` read (or could not be, within
 * OPEN_TIMEOUT_MS). meta: {scope, unsaved} as the last page on this document left them.
 */
export class LocalCopy {
  constructor(documentName, ydoc, { enabled, onState = () => {} }) {
    this.name = localName(documentName);
    this.ydoc = ydoc;
    this.onState = onState;
    this.state = "off";
    this.persistence = null;
    this.checking = false;
    this.dirty = false;
    this.meta = {};
    if (!enabled || typeof indexedDB === "undefined") {
      // Off for this page or this deployment: whatever an earlier page kept goes too.
      onState("off");
      this.ready = typeof indexedDB === "undefined" ? Promise.resolve() : deleteDatabase(this.name);
      return;
    }
    this.setState("loading");
    try {
      this.persistence = new IndexeddbPersistence(this.name, ydoc);
    } catch (err) {
      console.warn("tether: no local copy", err);
      this.setState("failed");
      this.ready = Promise.resolve();
      return;
    }
    this.persistence._db.catch((err) => {
      console.warn("tether: no local copy", err);
      this.setState("failed");
    });
    this.onUpdate = (update, origin) => {
      if (origin !== this.persistence) this.noteWrite();
    };
    ydoc.on("update", this.onUpdate); // after y-indexeddb's own listener: its write comes first
    const loaded = this.persistence.whenSynced.then(async () => {
      const [scope, unsaved] = await Promise.all([this.get("scope"), this.get("unsaved")]);
      this.meta = { scope, unsaved };
      if (this.state === "loading") this.setState("saved");
    });
    this.ready = Promise.race([loaded, new Promise((resolve) => setTimeout(resolve, OPEN_TIMEOUT_MS))]);
  }

  get enabled() {
    return this.persistence !== null;
  }

  setState(state) {
    if (state === this.state) return;
    this.state = state;
    this.onState(state);
  }

  /** An edit was made: y-indexeddb has queued its write; "saved" once that write is done. A
   * read-only transaction on the same store starts only after the read-write ones created
   * before it end, so its completion says every write so far is in. One check at a time. */
  noteWrite() {
    const db = this.persistence && this.persistence.db;
    if (!db || this.state === "failed") return;
    this.dirty = true;
    this.setState("saving");
    if (this.checking) return;
    this.checking = true;
    const check = () => {
      this.dirty = false;
      let tx;
      try {
        tx = db.transaction(["updates"], "readonly");
      } catch (err) {
        this.checking = false; // closed: the copy was cleared, or another tab deleted it
        this.setState("failed");
        return;
      }
      tx.oncomplete = () => {
        if (this.dirty) return check();
        this.checking = false;
        if (this.state === "saving") this.setState("saved");
      };
      tx.onabort = tx.onerror = () => {
        this.checking = false;
        this.setState("failed");
      };
    };
    check();
  }

  async get(key) {
    if (!this.persistence) return undefined;
    try {
      return await this.persistence.get(key);
    } catch {
      return undefined;
    }
  }

  set(key, value) {
    if (!this.persistence) return;
    this.persistence.set(key, value).catch(() => {});
  }

  /** Drop the local copy (the document was deleted, access was lost): stop keeping, delete. */
  async clear() {
    const persistence = this.persistence;
    this.persistence = null;
    if (this.onUpdate) this.ydoc.off("update", this.onUpdate);
    this.setState("off");
    if (persistence) {
      try {
        await persistence.destroy();
      } catch {
        /* never opened */
      }
    }
    await deleteDatabase(this.name);
  }
}
