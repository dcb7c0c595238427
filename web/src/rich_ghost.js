// Ghost text in the rich editor: an AI completion drawn after the cursor as a ProseMirror
// widget decoration, dimmed, until Tab takes it or Esc / typing elsewhere / moving away drops
// it. Typing the ghost's own next characters keeps the rest (the same rules as ghost.js, the
// plain editor's).
//
// The plugin state is {id, pos, received, consumed, streaming} or null:
//   received  everything the server streamed for this id so far
//   consumed  what the user has typed of it since (received.startsWith(consumed))
//   pos       where the rest is drawn: the cursor, mapped through edits
import { Plugin, PluginKey } from "@tiptap/pm/state";
import { ReplaceStep } from "@tiptap/pm/transform";
import { Decoration, DecorationSet } from "@tiptap/pm/view";
import { ySyncPluginKey } from "@tiptap/y-tiptap";

export const richGhostKey = new PluginKey("tetherGhost");

export function richGhostRest(ghost) {
  return ghost ? ghost.received.slice(ghost.consumed.length) : "";
}

/** A transaction's ghost action: {type: "start"|"delta"|"end"|"clear", id?, text?, silent?}. */
export function ghostAction(tr, action) {
  return tr.setMeta(richGhostKey, action);
}

function fromSync(tr) {
  return Boolean(tr.getMeta(ySyncPluginKey)); // a remote edit applied by y-prosemirror
}

function mapThrough(ghost, tr, state) {
  if (fromSync(tr)) {
    // y-prosemirror applies a remote edit as one replacement of the whole document, then puts
    // the selection back where it was (by relative positions). The ghost is always at the
    // cursor: it goes where the cursor went.
    return { ...ghost, pos: state.selection.head };
  }
  // Typing at the ghost: one step inserting text right at it.
  const [step] = tr.steps;
  const typed =
    tr.steps.length === 1 &&
    step instanceof ReplaceStep &&
    step.from === ghost.pos &&
    step.to === ghost.pos &&
    step.slice.openStart === 0 &&
    step.slice.content.childCount === 1 &&
    step.slice.content.firstChild.isText
      ? step.slice.content.firstChild.text
      : null;
  if (!typed) return null;
  const consumed = ghost.consumed + typed;
  if (!ghost.received.startsWith(consumed) || consumed.length >= ghost.received.length) return null;
  return { ...ghost, consumed, pos: ghost.pos + typed.length };
}

/**
 * The plugin. `ctl`: {dropped(ghost): a streaming ghost was dismissed (send cancel)}.
 */
export function richGhostPlugin(ctl) {
  let dropped = null; // a streaming ghost dropped without a silent clear: cancel it
  return new Plugin({
    key: richGhostKey,
    state: {
      init: () => null,
      apply(tr, ghost, _old, state) {
        const before = ghost;
        if (ghost && tr.docChanged) ghost = mapThrough(ghost, tr, state);
        if (ghost && tr.selectionSet && !fromSync(tr)) {
          const sel = state.selection;
          if (!sel.empty || sel.head !== ghost.pos) ghost = null;
        }
        const action = tr.getMeta(richGhostKey);
        let silent = false;
        if (action) {
          if (action.type === "start") {
            ghost = { id: action.id, pos: state.selection.head, received: "", consumed: "", streaming: true };
            silent = true;
          } else if (action.type === "delta" && ghost && action.id === ghost.id) {
            ghost = { ...ghost, received: ghost.received + action.text };
          } else if (action.type === "end" && ghost && action.id === ghost.id) {
            ghost = { ...ghost, streaming: false };
            if (ghost.consumed.length >= ghost.received.length) ghost = null;
          } else if (action.type === "clear") {
            ghost = null;
            silent = Boolean(action.silent);
          }
        }
        if (before && before.streaming && (!ghost || ghost.id !== before.id) && !silent) {
          dropped = before;
        }
        return ghost;
      },
    },
    props: {
      decorations(state) {
        const ghost = richGhostKey.getState(state);
        const rest = richGhostRest(ghost);
        if (!ghost || !rest) return DecorationSet.empty;
        const widget = () => {
          const span = document.createElement("span");
          span.className = "tt-ghost";
          // Not part of the text: the browser must never type into it, nor ProseMirror read it
          // back as content.
          span.contentEditable = "false";
          span.setAttribute("aria-hidden", "true");
          span.setAttribute("data-testid", "ghost");
          span.textContent = rest;
          return span;
        };
        return DecorationSet.create(state.doc, [
          Decoration.widget(ghost.pos, widget, {
            side: 1,
            key: `${ghost.id}:${rest}`,
            ignoreSelection: true,
            marks: [],
          }),
        ]);
      },
    },
    view: () => ({
      update() {
        if (dropped) {
          const ghost = dropped;
          dropped = null;
          ctl.dropped(ghost);
        }
      },
    }),
  });
}
