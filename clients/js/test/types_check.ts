// Compiled, never run (npm test: tsc first): the published types fit the real libraries. A
// HocuspocusProvider is a StatelessProvider, the extensions configure as the README shows,
// and every outcome is a value to narrow, not an exception.
import { HocuspocusProvider } from "@hocuspocus/provider";
import { Editor } from "@tiptap/core";
import { EditorView } from "@codemirror/view";
import * as Y from "yjs";
import { TetherAI, type AIError, type StatelessProvider } from "../src/index.js";
import { TetherSuggestions, suggestionsOf } from "../src/tiptap.js";
import { tetherSuggestions, suggestionsOf as codeMirrorSuggestionsOf } from "../src/codemirror.js";

declare const provider: HocuspocusProvider;
const stateless: StatelessProvider = provider;
const client = TetherAI.for(stateless);
const suggestion = client.suggest({ anchor: "AAEEAA==", maxTokens: 16 });
suggestion.on("delta", ({ text }) => text.toUpperCase());
void suggestion.result.then((outcome) => {
  if (outcome.ok) return outcome.value.text;
  const error: AIError = outcome.error;
  return error.code === "confirm_required" ? error.dropped : error.message;
});
void client.accept(suggestion.id, { confirmDropped: true }).then((outcome) => (outcome.ok ? "applied" : outcome.error.code));
client.on("status", (status) => status.state === "ready");

const editor = new Editor({
  extensions: [
    TetherSuggestions.configure({
      provider,
      pauseMs: 400,
      keys: { accept: "Tab", rewrite: null },
      onRewrite: (session) => session.diff().map((part) => part.op),
      onEvent: (event) => (event.type === "error" ? event.error.code : event.type),
    }),
  ],
});
editor.commands.requestSuggestion();
editor.chain().focus().acceptSuggestion().run();
suggestionsOf(editor)?.rewrite()?.accept({ confirmDropped: false });

const ytext = new Y.Doc().getText("content");
const view = new EditorView({ extensions: [tetherSuggestions({ provider, ytext, ghostClass: "ghost" })] });
codeMirrorSuggestionsOf(view)?.request({ auto: false });
