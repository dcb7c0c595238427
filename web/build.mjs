// Builds the committed browser bundles: web/dist/{editor,index}.{js,css}.
// Usage: node build.mjs [--watch]
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { readdirSync, rmSync } from "node:fs";

const here = dirname(fileURLToPath(import.meta.url));
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
};

// Chunks carry their hash in their name: drop the previous build's before writing new ones.
for (const name of readdirSync(join(here, "dist"))) {
  if (name.startsWith("chunk-") || name.startsWith("rich_editor-") || name.startsWith("plain_editor-")) {
    rmSync(join(here, "dist", name));
  }
}

if (process.argv.includes("--watch")) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
