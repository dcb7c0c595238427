// A team's own CodeMirror 6 app (not tether's page) on a plain document: basicSetup,
// y-codemirror.next over a HocuspocusProvider, and tether-client's tetherSuggestions.
import { EditorView, basicSetup } from "codemirror";
import { HocuspocusProvider } from "@hocuspocus/provider";
import { yCollab } from "y-codemirror.next";
import { tetherSuggestions } from "tether-client/codemirror";
import { renderRewrite, watch } from "./host_common.js";

const params = new URLSearchParams(location.search);
const provider = new HocuspocusProvider({ url: params.get("ws"), name: params.get("doc"), token: params.get("token") });
const ytext = provider.document.getText("content");
const events = [];
const view = new EditorView({
  parent: document.querySelector("#editor"),
  doc: ytext.toString(),
  extensions: [
    tetherSuggestions({ provider, ytext, pauseMs: 300, onEvent: (event) => events.push(event), onRewrite: renderRewrite }),
    basicSetup,
    yCollab(ytext, provider.awareness),
  ],
});
watch(provider);
window.host = { provider, view, events, text: () => ytext.toString() };
