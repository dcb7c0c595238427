// Ghost text: an AI completion shown inline after the cursor, dimmed, until Tab takes it or
// Esc / typing / moving away drops it. Typing the ghost's own next characters keeps the rest.
//
// The field holds {id, pos, received, consumed, streaming} or null:
//   received  everything the server streamed for this id so far
//   consumed  what the user has typed of it since (received.startsWith(consumed))
//   pos       where the rest is drawn: the cursor, mapped through edits
import { EditorState, StateEffect, StateField, Prec, Transaction } from "@codemirror/state";
import { Decoration, EditorView, WidgetType, keymap } from "@codemirror/view";

/** A new request at the cursor: {id, pos}. Replaces any ghost (the server supersedes it). */
export const startGhost = StateEffect.define();
/** More streamed text for the ghost {id, text}. */
export const ghostDelta = StateEffect.define();
/** The stream of {id} is over (the ghost stays, acceptable). */
export const ghostEnded = StateEffect.define();
/** Drop the ghost: {silent: true} when no `cancel` should follow (accepted, superseded, ended). */
export const clearGhost = StateEffect.define();

export function ghostRest(ghost) {
  return ghost ? ghost.received.slice(ghost.consumed.length) : "";
}

class GhostWidget extends WidgetType {
  constructor(text) {
    super();
    this.text = text;
  }
  eq(other) {
    return other.text === this.text;
  }
  toDOM() {
    const span = document.createElement("span");
    span.className = "cm-ghost";
    span.setAttribute("aria-hidden", "true");
    span.setAttribute("data-testid", "ghost");
    span.textContent = this.text;
    return span;
  }
  ignoreEvent() {
    return false;
  }
}

export const ghostField = StateField.define({
  create: () => null,
  update(ghost, tr) {
    if (ghost && tr.docChanged) {
      ghost = mapThroughChanges(ghost, tr);
    }
    if (ghost && tr.selection) {
      const sel = tr.state.selection.main;
      if (!sel.empty || sel.head !== ghost.pos) ghost = null;
    }
    for (const effect of tr.effects) {
      if (effect.is(startGhost)) {
        const { id, pos } = effect.value;
        ghost = { id, pos, received: "", consumed: "", streaming: true };
      } else if (effect.is(ghostDelta) && ghost && effect.value.id === ghost.id) {
        ghost = { ...ghost, received: ghost.received + effect.value.text };
      } else if (effect.is(ghostEnded) && ghost && effect.value.id === ghost.id) {
        ghost = { ...ghost, streaming: false };
        if (ghost.consumed.length >= ghost.received.length) ghost = null;
      } else if (effect.is(clearGhost)) {
        ghost = null;
      }
    }
    return ghost;
  },
  provide: (field) =>
    EditorView.decorations.from(field, (ghost) => {
      const rest = ghostRest(ghost);
      if (!ghost || !rest) return Decoration.none;
      return Decoration.set([
        Decoration.widget({ widget: new GhostWidget(rest), side: 1 }).range(ghost.pos),
      ]);
    }),
});

function mapThroughChanges(ghost, tr) {
  const local = tr.annotation(Transaction.userEvent);
  if (local === undefined) {
    // A remote edit (ySync) or a programmatic one: the ghost follows its spot.
    return { ...ghost, pos: tr.changes.mapPos(ghost.pos, -1) };
  }
  if (!tr.isUserEvent("input.type")) return null;
  let inserted = null;
  let single = true;
  tr.changes.iterChanges((fromA, toA, _fromB, _toB, text) => {
    if (inserted !== null || fromA !== ghost.pos || toA !== ghost.pos) single = false;
    inserted = text.toString();
  });
  if (!single || !inserted) return null;
  // Keep the ghost only while the typed text is a strict prefix of what has arrived (typing
  // at the cursor also makes the server stop the stream, so nothing more will come).
  const consumed = ghost.consumed + inserted;
  if (!ghost.received.startsWith(consumed) || consumed.length >= ghost.received.length) return null;
  return { ...ghost, consumed, pos: ghost.pos + inserted.length };
}

/**
 * The extension. `ctl` is the page's controller:
 *   ctl.accept(view, ghost)  Tab on a visible ghost
 *   ctl.request(view)        Ctrl/Cmd+Space
 *   ctl.rewrite(view)        Ctrl/Cmd+Shift+R
 *   ctl.dropped(ghost)       a streaming ghost was dismissed (send cancel)
 *   ctl.typed(view)          the user edited: restart the pause timer
 *   ctl.filter(tr)           extra transaction filter (cursor after an accepted insert)
 */
export function ghostExtension(ctl) {
  return [
    ghostField,
    Prec.highest(
      keymap.of([
        {
          key: "Tab",
          run: (view) => {
            const ghost = view.state.field(ghostField);
            if (!ghost || !ghostRest(ghost)) return false;
            ctl.accept(view, ghost);
            return true;
          },
        },
        {
          key: "Escape",
          run: (view) => {
            const ghost = view.state.field(ghostField);
            if (!ghost) return false;
            view.dispatch({ effects: clearGhost.of({ silent: false }) });
            return true;
          },
        },
        { key: "Mod-Space", run: (view) => (ctl.request(view, { auto: false }), true) },
        { key: "Mod-Shift-r", run: (view) => (ctl.rewrite(view), true), preventDefault: true },
      ]),
    ),
    EditorView.updateListener.of((update) => {
      const before = update.startState.field(ghostField);
      const after = update.state.field(ghostField);
      if (before && before.streaming && (!after || after.id !== before.id)) {
        const silent = update.transactions.some((tr) =>
          tr.effects.some(
            (e) => (e.is(clearGhost) && e.value && e.value.silent) || e.is(startGhost),
          ),
        );
        if (!silent) ctl.dropped(before);
      }
      if (update.docChanged &&
          update.transactions.some((tr) => tr.isUserEvent("input") || tr.isUserEvent("delete"))) {
        ctl.typed(update.view);
      }
    }),
    EditorState.transactionFilter.of((tr) => ctl.filter(tr) || tr),
  ];
}
