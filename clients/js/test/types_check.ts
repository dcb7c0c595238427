// Compiled, never run (npm test: tsc first): the published types fit the real libraries. A
// HocuspocusProvider is a StatelessProvider, and every outcome is a value to narrow, not an
// exception.
import { HocuspocusProvider } from "@hocuspocus/provider";
import { TetherAI, type AIError, type StatelessProvider } from "../src/index.js";

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
