// Builds the page into dist/, which adctld serves at / (--static-dir). Relative asset paths, so
// the page also works behind a reverse proxy under a prefix.
import { defineConfig } from "vite";

export default defineConfig({
  base: "./",
  build: { outDir: "dist", emptyOutDir: true, sourcemap: false },
});
