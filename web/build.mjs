// Builds the committed browser bundles: web/dist/{editor,index}.{js,css}.
// Usage: node build.mjs [--watch]
import * as esbuild from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const here = dirname(fileURLToPath(import.meta.url));
const options = {
  entryPoints: {
    editor: join(here, "src/main.js"),
    index: join(here, "src/index.js"),
  },
  outdir: join(here, "dist"),
  bundle: true,
  format: "esm",
  target: "es2020",
  minify: true,
  sourcemap: false,
  legalComments: "none",
  logLevel: "info",
  // One copy of yjs / @codemirror/state: a second one breaks instanceof checks.
  mainFields: ["module", "browser", "main"],
};

if (process.argv.includes("--watch")) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
