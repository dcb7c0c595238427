// A stock Hocuspocus 4 server: the reference peer that `tether bench sync --compare` measures
// side by side with tether. With --sqlite FILE it persists documents with Hocuspocus's own
// SQLite extension (@hocuspocus/extension-sqlite, an optional dependency: it compiles
// better-sqlite3), debounced as it ships: the durable peer.
// Usage: node tests/js/hocuspocus_server.mjs --port 8900 [--sqlite /tmp/hocuspocus.sqlite]
import { Server } from "@hocuspocus/server";

const arg = (name) => {
  const index = process.argv.indexOf(name);
  return index > 0 ? process.argv[index + 1] : undefined;
};
const port = Number(arg("--port") || 8900);
const extensions = [];
const database = arg("--sqlite");
if (database) {
  let SQLite;
  try {
    ({ SQLite } = await import("@hocuspocus/extension-sqlite"));
  } catch (error) {
    console.log(JSON.stringify({ event: "error", error: `no @hocuspocus/extension-sqlite: ${error.message}` }));
    process.exit(2);
  }
  extensions.push(new SQLite({ database }));
}
const server = new Server({ port, address: "127.0.0.1", quiet: true, extensions });
await server.listen();
console.log(JSON.stringify({ event: "listening", port, pid: process.pid, durable: Boolean(database) }));
