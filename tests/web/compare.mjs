// web_compare: the compare view (#/compare?jobs=A,B) and `adctl diff` against a real adctld.
//
// Starts adctld (temp dir, free ports, two CPU slots, the page from web/dist) as e2e.mjs does,
// makes a tiny random Stable Diffusion folder (adworker make-tiny-pretrained) so validation can
// render, runs two tiny jobs that differ only in train.lr to SUCCEEDED, then checks:
//   * `adctl -o json diff A B`: exactly one spec field differs, train.lr, with both values;
//   * the jobs list: ticking both jobs and "Compare" opens #/compare?jobs=A,B;
//   * the compare view: two loss lines and two learning-rate lines, a spec diff of one row
//     naming train.lr, and a sample grid with one column per job and one row per validation
//     step, every cell of a row holding that step's GIF of its job (aligned by step);
// and saves $ADCTL_E2E_OUT/compare.png. Then it measures (prints, never asserts) how long the
// view takes to load N jobs × 600 points when ADCTL_COMPARE_BENCH_JOBS=N (10 for the benchmark;
// unset or 0 skips it): N jobs of 600 steps each, the view loaded three times. Exit 0 pass, 1 fail, 77 skip (no adworker).
//
// Environment (set by tests/web/CMakeLists.txt): ADCTL_E2E_ADCTLD, ADCTL_E2E_ADCTL,
// ADCTL_E2E_ADWORKER, ADCTL_E2E_WEB (the web/ folder), ADCTL_E2E_CHROMIUM, ADCTL_E2E_OUT;
// ADCTL_TEST_KEEP=1 keeps the temp dir.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";

const env = (name) => {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set (run through ctest)`);
  return v;
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => console.log(`[web_compare ${new Date().toISOString().slice(11, 19)}]`, ...a);

const adctld = env("ADCTL_E2E_ADCTLD");
const adctl = env("ADCTL_E2E_ADCTL");
const adworker = process.env.ADCTL_TEST_ADWORKER || process.env.ADCTL_E2E_ADWORKER || "";
const webDir = env("ADCTL_E2E_WEB");
const chromiumPath = env("ADCTL_E2E_CHROMIUM");
const outDir = env("ADCTL_E2E_OUT");
// Off by default: 10 jobs × 600 steps are about 3 minutes of CPU on a 2-core machine.
const benchJobs = Number(process.env.ADCTL_COMPARE_BENCH_JOBS ?? "0");
const BENCH_STEPS = 600;

if (!adworker || !fs.existsSync(adworker)) {
  console.log(`SKIP: adworker is not built (${adworker || "none"})`);
  process.exit(77);
}
for (const [what, file] of [
  ["Chromium (apt install chromium, or scripts/install-deps)", chromiumPath],
  ["the built page (cmake --build: target web)", path.join(webDir, "dist/index.html")],
]) {
  if (!fs.existsSync(file)) {
    console.error(`FAIL: ${what} is missing: ${file}`);
    process.exit(1);
  }
}
const { chromium } = createRequire(path.join(webDir, "package.json"))("playwright-core");

// Two runs of the same tiny job but for train.lr, each rendering validation samples at steps 2
// and 4 (one prompt: one GIF per step and job, plus the step's grid).
const compareSpec = (sd, lr) => `name: compare
model: {pretrained: ${sd}}
data: {kind: synthetic, num_samples: 4, frames: 4, height: 8, width: 8}
train: {max_steps: 4, batch_size: 1, lr: ${lr}}
checkpoint: {every_steps: 4, keep_last: 1}
validation: {prompts: ["a red square, moving"], steps: 2, frames: 4, height: 16, width: 16, every_steps: 0, at_steps: [2, 4]}
resources: {gpus: 1}
`;
const benchSpec = (i) => `name: bench-${i}
model: {preset: tiny}
data: {kind: synthetic, num_samples: 16, frames: 2, height: 8, width: 8}
train: {max_steps: ${BENCH_STEPS}, batch_size: 1, lr: ${(i + 1) * 1e-4}}
checkpoint: {enabled: false}
resources: {gpus: 1}
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "adctl-web-compare-"));
const dataDir = path.join(tmp, "data");
fs.mkdirSync(outDir, { recursive: true });
let daemon = null;
let browser = null;
let grpc = "";
const submitted = [];

function adctlJson(...args) {
  return JSON.parse(execFileSync(adctl, ["--server", grpc, "-o", "json", ...args], { encoding: "utf8" }));
}

function submit(name, spec) {
  const file = path.join(tmp, `${name}.yaml`);
  fs.writeFileSync(file, spec);
  const id = adctlJson("submit", file).job.id;
  submitted.push(id);
  return id;
}

function waitSucceeded(id, timeoutSeconds) {
  const job = adctlJson("wait", id, "--timeout", String(timeoutSeconds));
  if (job.state !== "JOB_STATE_SUCCEEDED") throw new Error(`${id} ended ${job.state}: ${job.message}`);
}

async function startAdctld() {
  const logFd = fs.openSync(path.join(tmp, "adctld.log"), "a");
  daemon = spawn(
    adctld,
    [
      "--data-dir", dataDir,
      "--listen", "127.0.0.1:0",
      "--http", "127.0.0.1:0",
      "--cpu-slots", "2",
      "--worker-binary", adworker,
      "--static-dir", path.join(webDir, "dist"),
      "--restart-backoff", "0.2",
      "--read-root", tmp, // the tiny SD folder
      "--write-root", path.join(tmp, "out"),
    ],
    { stdio: ["ignore", logFd, logFd] },
  );
  const infoFile = path.join(dataDir, "adctld.json");
  for (let i = 0; i < 200; i++) {
    if (fs.existsSync(infoFile)) {
      try {
        const info = JSON.parse(fs.readFileSync(infoFile, "utf8"));
        if (info.pid === daemon.pid) return info;
      } catch {
        // written while we read: try again
      }
    }
    if (daemon.exitCode !== null) break;
    await sleep(50);
  }
  throw new Error("adctld did not start");
}

// What the compare view shows, read from the page's data attributes.
async function viewFacts(page) {
  return page.evaluate(() => {
    const attr = (sel, name) => document.querySelector(sel)?.getAttribute(name) ?? null;
    const grid = document.querySelector("#sample-grid");
    const columns = [...(grid?.querySelectorAll("thead th[data-job]") ?? [])].map((th) => th.getAttribute("data-job"));
    const rows = [...(grid?.querySelectorAll("tbody tr[data-step]") ?? [])].map((tr) => ({
      step: tr.getAttribute("data-step"),
      cells: [...tr.querySelectorAll("td[data-job]")].map((td) => ({
        job: td.getAttribute("data-job"),
        loaded: Boolean(td.querySelector("img")?.complete && td.querySelector("img")?.naturalWidth),
        title: td.querySelector("img")?.getAttribute("title") ?? "",
      })),
    }));
    return {
      lossSeries: Number(attr("#chart-loss", "data-series")),
      lossPoints: Number(attr("#chart-loss", "data-points")),
      lrSeries: Number(attr("#chart-lr", "data-series")),
      evalHidden: document.querySelector("#chart-eval-loss")?.hidden ?? null,
      diffRows: [...document.querySelectorAll("#spec-diff tbody tr[data-field]")].map((tr) => ({
        field: tr.getAttribute("data-field"),
        values: [...tr.querySelectorAll("td")].slice(1).map((td) => td.textContent),
      })),
      columns,
      rows,
      restarts: Number(attr("#sample-grid", "data-restarts") ?? 0),
      loadMs: Number(attr("#compare", "data-load-ms")),
    };
  });
}

const expect = (cond, what, facts) => {
  if (!cond) throw new Error(`${what}\n${JSON.stringify(facts, null, 1)}`);
};

async function main() {
  const info = await startAdctld();
  grpc = info.grpc;
  const base = `http://${info.http}`;
  log("adctld", base, "gRPC", grpc);

  const sd = path.join(tmp, "sd");
  execFileSync(adworker, ["make-tiny-pretrained", "--out", sd], { stdio: ["ignore", "ignore", "inherit"] });
  const a = submit("a", compareSpec(sd, "0.0001"));
  const b = submit("b", compareSpec(sd, "0.0003"));
  log("submitted", a, b);
  waitSucceeded(a, 240);
  waitSucceeded(b, 240);
  log("both SUCCEEDED");

  // adctl diff: one differing field, train.lr, with both values.
  const diff = adctlJson("diff", a, b);
  const cliFields = diff.spec_diff.map((d) => d.field);
  expect(cliFields.length === 1 && cliFields[0] === "train.lr", "adctl diff: expected exactly train.lr", diff);
  expect(diff.spec_diff[0].a === "0.0001" && diff.spec_diff[0].b === "0.0003", "adctl diff: lr values", diff);
  expect(diff.metrics[0].step === 4 && diff.metrics[1].step === 4, "adctl diff: latest step 4 of both", diff);
  log("adctl diff:", JSON.stringify(diff.spec_diff));

  browser = await chromium.launch({ executablePath: chromiumPath, headless: true });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1100 } });
  // Without tokens the JSON API takes the owner token of the data directory (e2e.mjs says why).
  const ownerToken = fs.readFileSync(path.join(dataDir, "owner.token"), "utf8").trim();
  await page.addInitScript((t) => localStorage.setItem("adctl.token", t), ownerToken);
  page.on("pageerror", (e) => log("page error:", e.message));

  // From the jobs list: tick both, "Compare".
  await page.goto(`${base}/`);
  for (const id of [a, b]) await page.locator(`tr[data-job="${id}"] input.select`).check();
  await page.locator("#compare-button:not([disabled])").click();
  await page.locator('#compare[data-loaded="1"]').waitFor({ timeout: 30_000 });
  const hash = await page.evaluate(() => location.hash);
  expect(hash === `#/compare?jobs=${a},${b}`, `the Compare button opened ${hash}`, {});

  // Every GIF of the grid loaded (they restart together once all have).
  await page.waitForFunction(
    () => {
      const imgs = [...document.querySelectorAll("#sample-grid td img")];
      return imgs.length > 0 && imgs.every((i) => i.complete && i.naturalWidth > 0);
    },
    null,
    { timeout: 30_000 },
  );
  const facts = await viewFacts(page);
  expect(facts.lossSeries === 2, "two loss curves", facts);
  expect(facts.lrSeries === 2, "two learning-rate curves", facts);
  expect(facts.evalHidden === true, "no eval loss chart without eval_loss points", facts);
  expect(facts.diffRows.length === 1 && facts.diffRows[0].field === "train.lr", "a one-line spec diff: train.lr", facts);
  expect(
    facts.diffRows[0].values[0] === "0.0001" && facts.diffRows[0].values[1] === "0.0003",
    "the diff shows both learning rates",
    facts,
  );
  expect(facts.columns.length === 2 && facts.columns[0] === a && facts.columns[1] === b, "one column per job", facts);
  expect(facts.rows.map((r) => r.step).join(",") === "2,4", "one row per validation step (2, 4)", facts);
  for (const row of facts.rows) {
    expect(
      row.cells.length === 2 &&
        row.cells.every((c, k) => c.job === facts.columns[k] && c.loaded && c.title.endsWith(`step ${row.step}`)),
      `row ${row.step}: each job's GIF of that step, in its column`,
      facts,
    );
  }
  expect(facts.restarts >= 1, "the GIFs were restarted together once loaded", facts);
  log(`compare view: ${facts.lossSeries} loss curves, diff ${JSON.stringify(facts.diffRows)}, grid ${facts.rows.length}×${facts.columns.length}`);

  // The job's own page (issue 35 item 4): its samples newest first, each playing, and a click
  // enlarges one (and a second click shrinks it back).
  await page.goto(`${base}/#/jobs/${a}`);
  await page.waitForFunction(
    () => {
      const imgs = [...document.querySelectorAll("#samples figure img")];
      return imgs.length === 4 && imgs.every((i) => i.complete && i.naturalWidth > 0);
    },
    null,
    { timeout: 30_000 },
  );
  // Per step its grid and its prompt's clip: 4, 4, 2, 2.
  const captions = await page.$$eval("#samples figure figcaption", (cs) => cs.map((c) => c.textContent));
  expect(
    captions.length === 4 &&
      captions.slice(0, 2).every((c) => c.startsWith("step 4: ")) &&
      captions.slice(2).every((c) => c.startsWith("step 2: ")),
    "the job page lists its samples newest first",
    { captions },
  );
  const first = page.locator("#samples figure").first();
  const width = async () => (await first.locator("img").boundingBox()).width;
  const small = await width();
  await first.locator("img").click();
  const enlarged = await first.evaluate((f) => f.classList.contains("enlarged"));
  const big = await width();
  expect(enlarged && big > small, "a click enlarges a sample", { small, big });
  await first.locator("img").click();
  expect(!(await first.evaluate((f) => f.classList.contains("enlarged"))), "a second click shrinks it", {});
  log(`job page: samples ${JSON.stringify(captions)}, enlarged ${small}px -> ${big}px`);

  // From a job's page: the link opens the compare view with that job (then add the other).
  await page.locator("#compare-link").click();
  await page.waitForFunction(
    (id) => {
      const cols = [...document.querySelectorAll('#compare[data-loaded="1"] #sample-grid thead th[data-job]')];
      return cols.length === 1 && cols[0].getAttribute("data-job") === id;
    },
    a,
    { timeout: 30_000 },
  );
  await page.locator("#compare-add").selectOption(b);
  await page.waitForFunction(
    () => {
      const cols = document.querySelectorAll('#compare[data-loaded="1"] #sample-grid thead th[data-job]');
      const imgs = [...document.querySelectorAll("#sample-grid td img")];
      return cols.length === 2 && imgs.length === 4 && imgs.every((i) => i.complete && i.naturalWidth > 0);
    },
    null,
    { timeout: 30_000 },
  );
  const again = await page.evaluate(() => location.hash);
  expect(again === `#/compare?jobs=${a},${b}`, `job page → compare → add gave ${again}`, {});
  const shot = path.join(outDir, "compare.png");
  await page.screenshot({ path: shot, fullPage: true });
  log("screenshot", shot);

  if (benchJobs > 0) await bench(page, base);
}

// 10 jobs × 600 points: the time from opening #/compare?jobs=… to the first complete draw
// (printed, not asserted; bench/results/compare_view_cpu_20261205.md).
async function bench(page, base) {
  const ids = [];
  for (let i = 0; i < benchJobs; i++) ids.push(submit(`bench-${i}`, benchSpec(i)));
  log(`bench: ${benchJobs} jobs × ${BENCH_STEPS} steps submitted`);
  const started = Date.now();
  for (const id of ids) waitSucceeded(id, 600);
  log(`bench: the jobs ran in ${Math.round((Date.now() - started) / 1000)} s`);
  const token = fs.readFileSync(path.join(dataDir, "owner.token"), "utf8").trim();
  const points = [];
  for (const id of ids) {
    const res = await fetch(`${base}/api/v1/jobs/${id}/metrics?max_points=${BENCH_STEPS}`, {
      headers: { Authorization: `Bearer ${token}` },
    });
    points.push((await res.json()).points.length);
  }
  log(`bench: points per job (max_points=600): ${points.join(", ")}`);
  const url = `${base}/#/compare?jobs=${ids.join(",")}`;
  await page.goto(url);
  await page.locator('#compare[data-loaded="1"]').waitFor({ timeout: 60_000 });
  const runs = [];
  for (let r = 0; r < 3; r++) {
    // A fresh document each time: the page's files, then the view's requests and drawing.
    const t0 = Date.now();
    await page.reload();
    await page.locator('#compare[data-loaded="1"]').waitFor({ timeout: 60_000 });
    const wall = Date.now() - t0;
    const facts = await viewFacts(page);
    // The page's own work: from the last API answer the first draw needed to the draw.
    const lastAnswer = await page.evaluate(() =>
      Math.max(
        ...performance
          .getEntriesByType("resource")
          .filter((r) => /\/api\/v1\/jobs\/[^/?]+(\/metrics|\/samples)?(\?|$)/.test(r.name))
          .map((r) => r.responseEnd),
      ),
    );
    const loadedAt = Number(await page.locator("#compare").getAttribute("data-loaded-at"));
    runs.push({
      wall,
      inPage: facts.loadMs,
      own: Math.round(loadedAt - lastAnswer),
      series: facts.lossSeries,
      points: facts.lossPoints,
    });
  }
  for (const r of runs) {
    log(
      `bench: compare view of ${benchJobs} jobs: ${r.wall} ms from navigation, ${r.inPage} ms in the page ` +
        `(data-load-ms), ${r.own} ms of it after the last API answer; ${r.series} loss lines, ${r.points} points`,
    );
  }
  const median = (xs) => [...xs].sort((x, y) => x - y)[Math.floor(xs.length / 2)];
  log(
    `BENCH compare_view_load jobs=${benchJobs} points_per_job=${points[0]} ` +
      `median_ms_navigation=${median(runs.map((r) => r.wall))} median_ms_in_page=${median(runs.map((r) => r.inPage))} ` +
      `median_ms_after_last_answer=${median(runs.map((r) => r.own))}`,
  );
  await page.screenshot({ path: path.join(outDir, "compare_bench.png"), fullPage: true });
}

async function cleanup(failed) {
  if (browser) await browser.close().catch(() => {});
  if (failed && grpc) {
    for (const id of submitted) {
      try {
        execFileSync(adctl, ["--server", grpc, "cancel", id, "--force"], { stdio: "ignore" });
      } catch {
        // best effort (it may have ended)
      }
    }
  }
  if (daemon && daemon.exitCode === null) {
    daemon.kill("SIGTERM");
    for (let i = 0; i < 100 && daemon.exitCode === null; i++) await sleep(50);
  }
  if (failed) {
    const logFile = path.join(tmp, "adctld.log");
    if (fs.existsSync(logFile)) console.error("adctld log (end):\n" + fs.readFileSync(logFile, "utf8").slice(-4000));
  }
  if (process.env.ADCTL_TEST_KEEP) log("kept", tmp);
  else fs.rmSync(tmp, { recursive: true, force: true });
}

try {
  await main();
  await cleanup(false);
  log("PASS");
} catch (e) {
  console.error("FAIL:", e instanceof Error ? e.stack : e);
  await cleanup(true);
  process.exit(1);
}
