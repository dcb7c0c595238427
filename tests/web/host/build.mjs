// Bundles a host app (tiptap_app.js or codemirror_app.js) for the browser tests, the way an
// app that installed tether-client would: the package is found by its name (its exports
// map), yjs, Tiptap and CodeMirror from clients/js/node_modules (the package's dev copies: one
// copy of each in the bundle).
// Usage: node tests/web/host/build.mjs <app.js> <out dir>
import { mkdirSync, copyFileSync, symlinkSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const client = resolve(here, "../../../clients/js");
const { build } = await import(join(client, "node_modules/esbuild/lib/main.js"));
const [app, outArg] = process.argv.slice(2);
const out = resolve(outArg);
const modules = join(out, "node_modules");
mkdirSync(modules, { recursive: true });
if (!existsSync(join(modules, "tether-client"))) symlinkSync(client, join(modules, "tether-client"), "dir");
// The host's own imports resolve from `out` (not from tests/node_modules, which holds other
// copies): tether-client by its link there, the rest from the package's node_modules.
const fromOut = {
  name: "host-imports",
  setup(b) {
    b.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.pluginData === "host" || !args.importer.startsWith(here)) return undefined;
      return b.resolve(args.path, { kind: args.kind, resolveDir: out, pluginData: "host" });
    });
  },
};
await build({
  entryPoints: [join(here, app)],
  plugins: [fromOut],
  outfile: join(out, "app.js"),
  bundle: true,
  format: "esm",
  target: "es2020",
  nodePaths: [modules, join(client, "node_modules")],
  logLevel: "warning",
});
copyFileSync(join(here, "index.html"), join(out, "index.html"));
