// Builds the committed browser bundles: web/dist/{editor,index}.{js,css}, their chunks, and
// the service worker web/dist/sw.js that keeps them for offline use (src/sw.js).
// Usage: node build.mjs [--watch]
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, realpathSync, rmSync } from "node:fs";

const here = dirname(fileURLToPath(import.meta.url));

// tether-client is a link to ../clients/js (file: dependency), whose own node_modules hold its
// dev copies of yjs, Tiptap and CodeMirror. The page must have ONE copy of each (a second yjs or
// @codemirror/state breaks instanceof checks and plugin keys): the package's imports of other
// packages resolve from here, as they would from an installed tarball.
const clientDir = realpathSync(join(here, "../clients/js"));
const onePeerCopy = {
  name: "tether-client-peers",
  setup(build) {
    build.onResolve({ filter: /^[^./]/ }, async (args) => {
      if (args.pluginData === "peer" || !args.importer.startsWith(clientDir)) return undefined;
      const found = await build.resolve(args.path, { kind: args.kind, resolveDir: here, pluginData: "peer" });
      return found.errors.length ? { errors: found.errors } : found;
    });
  },
};
const options = {
  entryPoints: {
    editor: join(here, "src/main.js"),
    index: join(here, "src/index.js"),
  },
  outdir: join(here, "dist"),
  bundle: true,
  format: "esm",
  // The page loads the editor it shows (rich or plain) as a chunk of its own.
  splitting: true,
  chunkNames: "[name]-[hash]",
  target: "es2020",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  logLevel: "info",
  // One copy of yjs / @codemirror/state: a second one breaks instanceof checks.
  mainFields: ["module", "browser", "main"],
  plugins: [onePeerCopy],
};

/** sw.js, told the files to cache and a version: the hash of the build, so a new build is a
 * new worker whose cache replaces the old one. */
async function buildWorker() {
  const dist = join(here, "dist");
  const files = readdirSync(dist).filter((name) => name !== "sw.js" && /\.(js|css)$/.test(name)).sort();
  const hash = createHash("sha256");
  for (const name of files) hash.update(name).update(readFileSync(join(dist, name)));
  await esbuild.build({
    entryPoints: [join(here, "src/sw.js")],
    outfile: join(dist, "sw.js"),
    bundle: false,
    target: "es2020",
    minify: true,
    legalComments: "none",
    logLevel: "info",
    define: {
      TETHER_VERSION: JSON.stringify(hash.digest("hex").slice(0, 16)),
      TETHER_FILES: JSON.stringify(files),
    },
  });
}

// Chunks carry their hash in their name: drop the previous build's before writing new ones.
for (const name of readdirSync(join(here, "dist"))) {
  if (name.startsWith("chunk-") || name.startsWith("rich_editor-") || name.startsWith("plain_editor-")) {
    rmSync(join(here, "dist", name));
  }
}

if (process.argv.includes("--watch")) {
  // While developing: the worker follows each rebuild (a reload then installs it).
  const rebuilt = { name: "service-worker", setup: (b) => b.onEnd((r) => !r.errors.length && buildWorker()) };
  const ctx = await esbuild.context({ ...options, plugins: [onePeerCopy, rebuilt] });
  await ctx.watch();
} else {
  await esbuild.build(options);
  await buildWorker();
}
