// One job: header (state, progress, throughput), cancel/pause/resume with a confirmation, live
// charts per rank, the rank logs as they grow, events, checkpoints and validation samples.
//
// Live updates: one long poll (GET …/updates after the last event and metric ids) at a time;
// each answer appends events and points. Logs are polled every 1.5 s while the job is live.
import {
  api,
  ApiError,
  artifactBlob,
  artifactUrl,
  Checkpoint,
  Export,
  Job,
  JobEvent,
  MetricPoint,
  num,
  Sample,
  SKIP_REASONS,
  skippedByReason,
} from "./api";
import { CHART_SPECS, PREPROCESS_SPECS, RankChart } from "./charts";
import { compareHash } from "./compare_view";
import { bytes, el, fixed, gpusText, isLive, progressBar, stateBadge, stateName, time } from "./format";
import { View } from "./jobs_view";

const MAX_CHART_POINTS = 600; // per rank, at load; live points are added as they come
const MAX_LOG_CHARS = 200_000;

type Command = "cancel" | "pause" | "resume";

const QUESTIONS: Record<Command, string> = {
  cancel: "Cancel job {id}? Its ranks get SIGTERM, checkpoint, and stop; the job ends CANCELLED.",
  pause: "Pause job {id}? It checkpoints and stops; resume continues from that checkpoint.",
  resume: "Resume job {id} from its newest checkpoint?",
};

function allowed(job: Job): Record<Command, boolean> {
  const s = stateName(job.state);
  return {
    cancel: isLive(job) && s !== "CANCELLING",
    pause: ["QUEUED", "STARTING", "RUNNING", "RESTARTING"].includes(s),
    resume: s === "PAUSED",
  };
}

export function showJob(root: HTMLElement, id: string, setStatus: (text: string) => void): View {
  const abort = new AbortController();
  let stopped = false;
  let job: Job | null = null;

  const header = el("div", { id: "job-header" });
  const buttons: Record<Command, HTMLButtonElement> = {
    cancel: el("button", { id: "cancel", type: "button", class: "danger" }, "Cancel"),
    pause: el("button", { id: "pause", type: "button" }, "Pause"),
    resume: el("button", { id: "resume", type: "button" }, "Resume"),
  };
  // A preprocess job's charts are its own (videos/s, skips); the training charts otherwise.
  const trainingCharts = CHART_SPECS.map((spec) => new RankChart(spec));
  const preprocessCharts = PREPROCESS_SPECS.map((spec) => new RankChart(spec));
  let charts: RankChart[] = trainingCharts;
  const chartsBox = el("div", { class: "charts" }, ...trainingCharts.map((c) => c.element));
  const lastPoint = new Map<number, MetricPoint>(); // by rank: a preprocess job's latest counts
  const rankSelect = el("select", { id: "log-rank" });
  const logView = el("pre", { id: "log", class: "log" });
  const eventsBody = el("tbody");
  const checkpointsBody = el("tbody");
  const samplesList = el("div", { id: "samples", class: "samples" });
  const exportsBody = el("tbody");

  root.replaceChildren(
    el(
      "p",
      {},
      el("a", { href: "#/" }, "← all jobs"),
      " · ",
      el("a", { href: compareHash([id]), id: "compare-link" }, "compare with other runs"),
    ),
    header,
    el("div", { class: "commands" }, buttons.cancel, buttons.pause, buttons.resume),
    chartsBox,
    // Newest first, near the top: what a run's samples look like is what a user comes to see.
    el("h3", {}, "Samples ", el("small", {}, "newest first; click one to enlarge")),
    samplesList,
    el("h3", {}, "Exports ", el("small", {}, "adctl export, and the spec's export: at the end")),
    el(
      "table",
      { id: "exports" },
      el("thead", {}, headerRow("Step", "Weights", "Format", "Size", "Written", "Download")),
      exportsBody,
    ),
    el("h3", {}, "Logs ", el("label", {}, "rank ", rankSelect)),
    logView,
    el("h3", {}, "Events"),
    el("table", { id: "events" }, el("thead", {}, headerRow("Time", "Attempt", "Kind", "Level", "Message")), eventsBody),
    el("h3", {}, "Checkpoints"),
    el(
      "table",
      { id: "checkpoints" },
      el("thead", {}, headerRow("Step", "Attempt", "Size", "Written", "On disk", "Path")),
      checkpointsBody,
    ),
  );

  const onResize = () => charts.forEach((c) => c.resize());
  window.addEventListener("resize", onResize);

  const isPreprocess = (j: Job): boolean => j.trains === "preprocessing";

  // What a preprocess job has done: clips written and videos skipped by reason, over its ranks.
  function preprocessFields(): HTMLElement[] {
    let clips = 0;
    const skipped: Record<string, number> = {};
    for (const p of lastPoint.values()) {
      clips += num(p.samples_seen);
      for (const [reason, n] of Object.entries(skippedByReason(p))) skipped[reason] = (skipped[reason] ?? 0) + n;
    }
    const reasons = SKIP_REASONS.filter((r) => skipped[r] > 0).map((r) => `${r} ${skipped[r]}`);
    return [...field("Clips written", String(clips)), ...field("Videos skipped", reasons.length ? reasons.join(", ") : "none")];
  }

  function renderHeader(j: Job): void {
    const p = j.progress;
    const preprocess = isPreprocess(j);
    if (preprocess && charts !== preprocessCharts) {
      charts = preprocessCharts;
      chartsBox.replaceChildren(...preprocessCharts.map((c) => c.element));
    }
    const trainingFields = preprocess
      ? [...field("Videos/s", fixed(p?.clips_per_second ?? 0, 2)), ...preprocessFields()]
      : [
          ...field("Loss", p && num(p.step) ? p.loss.toFixed(4) : "–"),
          ...field("Clips/s", fixed(p?.clips_per_second ?? 0, 2)),
          ...field("MFU", p && p.mfu_ratio ? `${(p.mfu_ratio * 100).toFixed(1)} %` : "–"),
        ];
    header.replaceChildren(
      el("h2", {}, `${j.name} `, el("small", {}, j.id), " ", stateBadge(j)),
      el(
        "dl",
        {},
        ...field("Trains", j.trains || "–"),
        ...field(preprocess ? "Shards" : "Progress", progressBar(j)),
        ...trainingFields,
        ...field("ETA", p && p.eta_seconds ? `${Math.round(p.eta_seconds)} s` : "–"),
        ...field("GPUs", gpusText(j)),
        ...field("Priority", `${j.priority ?? 0}${j.preemptible ? " (preemptible)" : ""}`),
        ...field("Attempt", `${j.attempt} (restarts ${j.restarts}/${j.max_restarts})`),
        ...field("Submitted", time(j.submitted_at)),
        ...(j.labels && Object.keys(j.labels).length
          ? field(
              "Labels",
              Object.keys(j.labels)
                .sort()
                .map((k) => `${k}=${j.labels![k]}`)
                .join(", "),
            )
          : []),
        ...(j.after && j.after.length
          ? field("After", `${j.after.join(", ")} (${j.after_any ? "any end" : "each must succeed"})`)
          : []),
        ...(j.preempted_by ? field("Preempted by", `${j.preempted_by} (resumes from its checkpoint)`) : []),
        ...field("Message", j.message || "–"),
        ...(j.state === "JOB_STATE_QUEUED" && j.wait_reason ? field("Waiting", j.wait_reason) : []),
      ),
    );
    const can = allowed(j);
    for (const c of Object.keys(buttons) as Command[]) buttons[c].disabled = !can[c];
    const ranks = Math.max(j.gpus, 1);
    if (rankSelect.options.length !== ranks) {
      const chosen = rankSelect.value;
      rankSelect.replaceChildren(...Array.from({ length: ranks }, (_, r) => el("option", { value: String(r) }, String(r))));
      if (chosen !== "" && Number(chosen) < ranks) rankSelect.value = chosen;
    }
  }

  function addEvents(events: JobEvent[]): void {
    for (const e of events) {
      eventsBody.append(
        el(
          "tr",
          { class: `level-${e.level}` },
          el("td", {}, time(e.time)),
          el("td", { class: "num" }, String(e.attempt)),
          el("td", {}, e.kind),
          el("td", {}, e.level),
          el("td", {}, e.message),
        ),
      );
    }
  }

  function renderCheckpoints(list: Checkpoint[]): void {
    checkpointsBody.replaceChildren(
      ...list.map((c) =>
        el(
          "tr",
          {},
          el("td", { class: "num" }, String(num(c.step))),
          el("td", { class: "num" }, String(c.attempt || "–")),
          el("td", { class: "num" }, bytes(num(c.size_bytes))),
          el("td", {}, time(c.created_at)),
          el("td", {}, c.on_disk ? "yes" : "no (removed)"),
          el("td", { class: "path" }, c.path),
        ),
      ),
    );
    if (!list.length) checkpointsBody.append(el("tr", {}, el("td", { colspan: "6" }, "none yet")));
  }

  // Each export's files as download links: fetched with the token when clicked (an <a> cannot
  // send the Authorization header), then saved under the file's own name.
  function renderExports(list: Export[]): void {
    exportsBody.replaceChildren(
      ...list.map((e) => {
        const links = e.files.map((f) => {
          const name = f.path.split("/").pop() ?? f.path;
          const a = el("a", { href: "#", class: "download", title: f.path }, name);
          a.addEventListener("click", (ev) => {
            ev.preventDefault();
            a.textContent = `${name} (downloading…)`;
            void artifactBlob(id, f.path).then(
              (blob) => {
                const url = URL.createObjectURL(blob);
                const save = el("a", { href: url, download: name });
                save.click();
                setTimeout(() => URL.revokeObjectURL(url), 60_000);
                a.textContent = name;
              },
              (err: unknown) => (a.textContent = `${name} (${err instanceof Error ? err.message : String(err)})`),
            );
          });
          return el("div", {}, a, ` ${bytes(num(f.size_bytes))}`);
        });
        const size = e.files.reduce((n, f) => n + num(f.size_bytes), 0);
        return el(
          "tr",
          {},
          el("td", { class: "num" }, String(num(e.step))),
          el("td", {}, e.weights),
          el("td", {}, e.format),
          el("td", { class: "num" }, bytes(size)),
          el("td", {}, time(e.created_at)),
          el("td", { class: "path" }, ...links),
        );
      }),
    );
    if (!list.length) {
      exportsBody.append(el("tr", {}, el("td", { colspan: "6" }, "none (adctl export JOB --format …)")));
    }
  }

  // Figures by step, newest first (a new step's go in front; within a step, prompt order).
  const shownSamples = new Set<string>();
  const sampleOrder = (s: Sample): number => -num(s.step) * 10_000 + s.index;
  function renderSamples(list: Sample[]): void {
    if (!list.length && !shownSamples.size) samplesList.replaceChildren("none (the spec's validation section renders them)");
    for (const s of [...list].sort((a, b) => sampleOrder(a) - sampleOrder(b))) {
      const key = `${num(s.step)}/${s.index}`;
      if (shownSamples.has(key) || !s.on_disk) continue;
      if (!shownSamples.size) samplesList.replaceChildren();
      shownSamples.add(key);
      const figure = el("figure", { "data-order": String(sampleOrder(s)), title: "click to enlarge" });
      figure.addEventListener("click", (e) => {
        if ((e.target as HTMLElement).tagName !== "A") figure.classList.toggle("enlarged");
      });
      const seconds = s.render_seconds ? ` (${s.render_seconds.toFixed(1)} s)` : "";
      const caption = el("figcaption", {}, `step ${num(s.step)}: ${s.index < 0 ? "grid" : s.prompt}${seconds} `);
      figure.append(caption);
      const after = Array.from(samplesList.children).find((c) => Number((c as HTMLElement).dataset.order) > sampleOrder(s));
      samplesList.insertBefore(figure, after ?? null);
      // The files come through fetch (they may need the token) as object URLs.
      void artifactUrl(id, s.gif).then((url) => figure.prepend(el("img", { src: url, alt: s.prompt })));
      void artifactUrl(id, s.mp4).then((url) =>
        caption.append(el("a", { href: url, download: s.mp4.split("/").pop() ?? "sample.mp4" }, "MP4")),
      );
    }
  }

  async function refreshFiles(): Promise<void> {
    const [ckpts, samples, exports] = await Promise.all([api.checkpoints(id), api.samples(id), api.exports(id)]);
    if (stopped) return;
    renderCheckpoints(ckpts.checkpoints);
    renderSamples(samples.samples);
    renderExports(exports.exports ?? []);
  }

  // Logs: read the chosen rank's log from where the last read ended. Each call supersedes the
  // one in flight (its answer is dropped), so a rank change or an early read never doubles text.
  let logRank = 0;
  let logOffset = 0;
  let logTimer = 0;
  let logRead = 0;
  async function followLog(): Promise<void> {
    clearTimeout(logTimer);
    const read = ++logRead;
    try {
      const chunk = await api.logs(id, logRank, logOffset);
      if (stopped || read !== logRead) return;
      if (chunk.offset < logOffset) logView.textContent = ""; // the log was replaced
      if (logOffset === 0 && chunk.size - chunk.next_offset > MAX_LOG_CHARS) {
        logOffset = chunk.size - 64 * 1024; // a long log: start near its end
        logView.textContent = "… (earlier lines left out)\n";
      } else {
        logOffset = chunk.next_offset;
        if (chunk.data) {
          const atBottom = logView.scrollTop + logView.clientHeight >= logView.scrollHeight - 4;
          let text = (logView.textContent ?? "") + chunk.data;
          if (text.length > MAX_LOG_CHARS) text = text.slice(text.length - MAX_LOG_CHARS);
          logView.textContent = text;
          if (atBottom) logView.scrollTop = logView.scrollHeight;
        } else if (!chunk.exists && !logView.textContent) {
          logView.textContent = "(no log yet)";
        }
      }
      const more = chunk.next_offset < chunk.size;
      if (!more && job && !isLive(job)) return; // the end of a finished job's log
      logTimer = window.setTimeout(followLog, more ? 0 : 1500);
    } catch (e) {
      if (!stopped && read === logRead) logTimer = window.setTimeout(followLog, 3000);
      if (e instanceof ApiError && e.status !== 400) setStatus(e.message);
    }
  }
  rankSelect.addEventListener("change", () => {
    logRank = Number(rankSelect.value);
    logOffset = 0;
    logView.textContent = "";
    void followLog();
  });

  for (const command of Object.keys(buttons) as Command[]) {
    buttons[command].addEventListener("click", async () => {
      if (!window.confirm(QUESTIONS[command].replace("{id}", id))) return;
      buttons[command].disabled = true;
      try {
        const updated = await api.command(id, command);
        if (!stopped) renderHeader(updated);
        setStatus(`${command}: job is ${stateName(updated.state)}`);
      } catch (e) {
        setStatus(`${command} failed: ${e instanceof Error ? e.message : String(e)}`);
        if (job) renderHeader(job);
      }
    });
  }

  async function run(): Promise<void> {
    let lastEvent = 0;
    let lastMetric = 0;
    try {
      const [j, events, metrics] = await Promise.all([api.job(id), api.events(id), api.metrics(id, MAX_CHART_POINTS)]);
      if (stopped) return;
      job = j;
      for (const p of metrics.points) lastPoint.set(p.rank, p);
      renderHeader(j);
      addEvents(events.events);
      for (const e of events.events) lastEvent = Math.max(lastEvent, num(e.id));
      charts.forEach((c) => {
        c.add(metrics.points);
        c.render();
      });
      lastMetric = metrics.last_id;
      void followLog();
      await refreshFiles();
      setStatus("");
    } catch (e) {
      header.replaceChildren(el("h2", {}, `Job ${id}`), el("p", { class: "error" }, e instanceof Error ? e.message : String(e)));
      return;
    }
    while (!stopped && job && isLive(job)) {
      try {
        const u = await api.updates(id, lastEvent, lastMetric, abort.signal);
        if (stopped) return;
        job = u.job;
        lastEvent = u.last_event;
        lastMetric = u.last_metric;
        for (const p of u.points) lastPoint.set(p.rank, p);
        renderHeader(u.job);
        addEvents(u.events);
        if (u.points.length) {
          charts.forEach((c) => {
            c.add(u.points);
            c.render();
          });
        }
        if (u.events.length) {
          await refreshFiles();
          if (!isLive(u.job)) void followLog(); // the log's last lines, now rather than at the next poll
        }
        setStatus("");
      } catch (e) {
        if (stopped) return;
        setStatus(`updates: ${e instanceof Error ? e.message : String(e)}; retrying`);
        await new Promise((r) => setTimeout(r, 2000));
      }
    }
  }
  void run();

  return {
    stop() {
      stopped = true;
      abort.abort();
      clearTimeout(logTimer);
      window.removeEventListener("resize", onResize);
      [...trainingCharts, ...preprocessCharts].forEach((c) => c.destroy());
    },
  };
}

function headerRow(...names: string[]): HTMLElement {
  return el("tr", {}, ...names.map((n) => el("th", {}, n)));
}

function field(name: string, value: Node | string): HTMLElement[] {
  return [el("dt", {}, name), el("dd", {}, value)];
}
