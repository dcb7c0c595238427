// A small typed event emitter: listeners per event name, each `on` returning its own removal.
// A listener that throws is reported on the console and the others still run (one broken
// callback in a host app must not stop ghost text).

export type Listener<T> = (value: T) => void;

export class Emitter<Events extends object> {
  private listeners = new Map<keyof Events, Set<Listener<never>>>();

  /** Call `listener` on each `event`; returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as Listener<never>);
    return () => this.off(event, listener);
  }

  off<K extends keyof Events>(event: K, listener: Listener<Events[K]>): void {
    this.listeners.get(event)?.delete(listener as Listener<never>);
  }

  protected emit<K extends keyof Events>(event: K, value: Events[K]): void {
    const set = this.listeners.get(event);
    if (!set) return;
    for (const listener of [...set]) {
      try {
        (listener as Listener<Events[K]>)(value);
      } catch (error) {
        console.error(`tether-client: a '${String(event)}' listener failed`, error);
      }
    }
  }

  protected clearListeners(): void {
    this.listeners.clear();
  }
}
