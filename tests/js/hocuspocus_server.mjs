// A stock Hocuspocus 4 server (no extensions, no storage): the reference peer that
// `tether bench sync --url ws://127.0.0.1:PORT` measures side by side with tether.
// Usage: node tests/js/hocuspocus_server.mjs --port 8900
import { Server } from "@hocuspocus/server";

const portIndex = process.argv.indexOf("--port");
const port = portIndex > 0 ? Number(process.argv[portIndex + 1]) : 8900;
const server = new Server({ port, address: "127.0.0.1", quiet: true });
await server.listen();
console.log(JSON.stringify({ event: "listening", port, pid: process.pid }));
