// web_e2e: the web page in a real browser against a real adctld.
//
// Starts adctld (temp dir, free ports, one CPU slot, the page from web/dist), submits a tiny
// training job with adctl, opens the page in headless Chromium (Debian's /usr/bin/chromium
// through playwright-core), finds the running job in the list, opens it, waits until the loss
// chart gains points, exports the motion modules with adctl and downloads them from the page's
// Exports list (byte for byte), cancels with the confirmation accepted, sees CANCELLED, and saves
// a screenshot to $ADCTL_E2E_OUT/web_e2e.png. Exit 0 pass, 1 fail, 77 skip (no adworker).
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
const log = (...a) => console.log(`[web_e2e ${new Date().toISOString().slice(11, 19)}]`, ...a);

const adctld = env("ADCTL_E2E_ADCTLD");
const adctl = env("ADCTL_E2E_ADCTL");
const adworker = process.env.ADCTL_TEST_ADWORKER || process.env.ADCTL_E2E_ADWORKER || "";
const webDir = env("ADCTL_E2E_WEB");
const chromiumPath = env("ADCTL_E2E_CHROMIUM");
const outDir = env("ADCTL_E2E_OUT");

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

const spec = `name: web-e2e
model: {preset: tiny}
data: {kind: synthetic, num_samples: 16, frames: 4, height: 8, width: 8}
train: {max_steps: 100000, batch_size: 1}
checkpoint: {every_steps: 25, keep_last: 1}
resources: {gpus: 1, grace_seconds: 20}
`;

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "adctl-web-e2e-"));
const dataDir = path.join(tmp, "data");
fs.mkdirSync(outDir, { recursive: true });
let daemon = null;
let browser = null;
let grpc = "";
let jobId = "";

function adctlJson(...args) {
  return JSON.parse(execFileSync(adctl, ["--server", grpc, "-o", "json", ...args], { encoding: "utf8" }));
}

async function startAdctld() {
  const logFd = fs.openSync(path.join(tmp, "adctld.log"), "a");
  daemon = spawn(
    adctld,
    [
      "--data-dir", dataDir,
      "--listen", "127.0.0.1:0",
      "--http", "127.0.0.1:0",
      "--cpu-slots", "1",
      "--worker-binary", adworker,
      "--static-dir", path.join(webDir, "dist"),
      "--restart-backoff", "0.2",
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

async function main() {
  const info = await startAdctld();
  grpc = info.grpc;
  const base = `http://${info.http}`;
  log("adctld", base, "gRPC", grpc);

  const specFile = path.join(tmp, "job.yaml");
  fs.writeFileSync(specFile, spec);
  jobId = adctlJson("submit", specFile).job.id;
  log("submitted", jobId);

  browser = await chromium.launch({ executablePath: chromiumPath, headless: true });
  const page = await browser.newPage({ viewport: { width: 1400, height: 1000 } });
  // Without tokens adctld's JSON API takes the owner token in its data directory; the page keeps
  // a token in localStorage (a person pastes it once into the token dialog).
  const ownerToken = fs.readFileSync(path.join(dataDir, "owner.token"), "utf8").trim();
  await page.addInitScript((t) => localStorage.setItem("adctl.token", t), ownerToken);
  page.on("pageerror", (e) => log("page error:", e.message));
  await page.goto(`${base}/`);

  // The list shows the job; once it is RUNNING, open it.
  const row = page.locator(`tr[data-job="${jobId}"]`);
  await row.locator('[data-state="RUNNING"]').waitFor({ timeout: 180_000 });
  log("job RUNNING in the list");
  await row.locator("a").first().click();
  await page.locator("#job-header h2").waitFor();

  // Live charts: the loss chart gains points without a reload.
  const lossPoints = async () => Number(await page.locator("#chart-loss").getAttribute("data-points"));
  await page.waitForFunction(() => Number(document.querySelector("#chart-loss")?.getAttribute("data-points")) > 0, null, {
    timeout: 120_000,
  });
  const before = await lossPoints();
  await page.waitForFunction(
    (n) => Number(document.querySelector("#chart-loss")?.getAttribute("data-points")) > n,
    before,
    { timeout: 120_000 },
  );
  const after = await lossPoints();
  log(`loss chart: ${before} → ${after} points`);
  // The rank log follows.
  await page.waitForFunction(() => (document.querySelector("#log")?.textContent ?? "").length > 40, null, {
    timeout: 60_000,
  });

  // An export made with adctl appears under Exports; its link downloads the file with the token.
  const auth = { headers: { Authorization: `Bearer ${ownerToken}` } };
  for (let i = 0; ; i++) {
    const c = await (await fetch(`${base}/api/v1/jobs/${jobId}/checkpoints`, auth)).json();
    if ((c.checkpoints ?? []).some((k) => k.on_disk)) break;
    if (i > 600) throw new Error("no checkpoint committed in 120 s");
    await sleep(200);
  }
  const exported = path.join(tmp, "mm.safetensors");
  execFileSync(adctl, ["--server", grpc, "export", jobId, "--format", "animatediff", "--out", exported]);
  const link = page.locator("#exports a.download").first();
  await link.waitFor({ timeout: 60_000 });
  const [download] = await Promise.all([page.waitForEvent("download", { timeout: 60_000 }), link.click()]);
  const saved = path.join(tmp, "downloaded.safetensors");
  await download.saveAs(saved);
  if (!fs.readFileSync(saved).equals(fs.readFileSync(exported))) {
    throw new Error(`the page's download (${fs.statSync(saved).size} bytes) differs from adctl export's`);
  }
  log(`export listed on the page and downloaded: ${download.suggestedFilename()}, ${fs.statSync(saved).size} bytes`);

  // Cancel, accepting the confirmation; the page shows CANCELLED.
  let asked = "";
  page.once("dialog", async (dialog) => {
    asked = dialog.message();
    await dialog.accept();
  });
  await page.locator("#cancel").click();
  await page.locator('#job-header [data-state="CANCELLED"]').waitFor({ timeout: 90_000 });
  if (!asked.includes(jobId)) throw new Error(`the confirmation did not name the job: '${asked}'`);
  log("CANCELLED on the page after confirming:", asked);
  // The rank log followed to its end: the training steps are in it.
  await page.waitForFunction(() => /step \d+/.test(document.querySelector("#log")?.textContent ?? ""), null, {
    timeout: 30_000,
  });
  const job = await (await fetch(`${base}/api/v1/jobs/${jobId}`, { headers: { Authorization: `Bearer ${ownerToken}` } })).json();
  if (job.state !== "JOB_STATE_CANCELLED") throw new Error(`API says ${job.state}`);

  const shot = path.join(outDir, "web_e2e.png");
  await page.screenshot({ path: shot, fullPage: true });
  log("screenshot", shot);
}

async function cleanup(failed) {
  if (browser) await browser.close().catch(() => {});
  if (failed && jobId && grpc) {
    try {
      execFileSync(adctl, ["--server", grpc, "cancel", jobId, "--force"], { stdio: "ignore" });
      execFileSync(adctl, ["--server", grpc, "wait", jobId, "--timeout", "30"], { stdio: "ignore" });
    } catch {
      // best effort
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
