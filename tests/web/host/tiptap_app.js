// A team's own Tiptap 3 app (not tether's page): StarterKit, Collaboration over a
// HocuspocusProvider, and tether-client's TetherSuggestions, as the package's README shows.
// The test reads `window.host` and the page's elements.
import { Editor } from "@tiptap/core";
import StarterKit from "@tiptap/starter-kit";
import Collaboration from "@tiptap/extension-collaboration";
import { HocuspocusProvider } from "@hocuspocus/provider";
import { TetherSuggestions } from "tether-client/tiptap";
import { renderRewrite, watch } from "./host_common.js";

const params = new URLSearchParams(location.search);
const provider = new HocuspocusProvider({ url: params.get("ws"), name: params.get("doc"), token: params.get("token") });
const events = [];
const editor = new Editor({
  element: document.querySelector("#editor"),
  extensions: [
    StarterKit.configure({ undoRedo: false }),
    Collaboration.configure({ document: provider.document }),
    TetherSuggestions.configure({
      provider,
      pauseMs: 300,
      onEvent: (event) => events.push(event),
      onRewrite: renderRewrite,
    }),
  ],
});
watch(provider);
window.host = { provider, editor, events, text: () => editor.getText() };
