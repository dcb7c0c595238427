// Builds dist/: each src/*.ts as an ES module of its own (esbuild: no bundling, so yjs, Tiptap
// and CodeMirror stay the host app's single copies), then the type declarations (tsc).
// Usage: node build.mjs
import * as esbuild from "esbuild";
import { execFileSync } from "node:child_process";
import { readdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, "dist");
rmSync(dist, { recursive: true, force: true });
const sources = readdirSync(join(here, "src"))
  .filter((name) => name.endsWith(".ts") && !name.endsWith(".d.ts"))
  .map((name) => join(here, "src", name));
await esbuild.build({
  entryPoints: sources,
  outdir: dist,
  bundle: false,
  format: "esm",
  platform: "neutral",
  target: "es2020",
  sourcemap: false,
  logLevel: "warning",
});
execFileSync(process.execPath, [join(here, "node_modules/typescript/bin/tsc"), "-p", join(here, "tsconfig.json"), "--emitDeclarationOnly"], {
  stdio: "inherit",
});
