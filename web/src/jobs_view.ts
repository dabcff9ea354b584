// The jobs list: state, progress, loss, throughput and GPUs of every job, refreshed every 2 s.
import { api, Job, num } from "./api";
import { el, fixed, gpusText, progressBar, stateBadge } from "./format";

export interface View {
  stop(): void;
}

function row(job: Job): HTMLElement {
  const p = job.progress;
  const link = el("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.id);
  return el(
    "tr",
    { "data-job": job.id },
    el("td", {}, link),
    el("td", {}, job.name),
    el("td", {}, stateBadge(job)),
    el("td", {}, progressBar(job)),
    el("td", { class: "num" }, p && num(p.step) ? p.loss.toFixed(4) : "–"),
    el("td", { class: "num" }, fixed(p?.clips_per_second ?? 0, 2)),
    el("td", {}, gpusText(job)),
    el("td", {}, job.message || job.wait_reason),
  );
}

export function showJobs(root: HTMLElement, setStatus: (text: string) => void): View {
  const body = el("tbody");
  const table = el(
    "table",
    { id: "jobs" },
    el(
      "thead",
      {},
      el(
        "tr",
        {},
        ...["Job", "Name", "State", "Progress", "Loss", "Clips/s", "GPUs", "Message"].map((h) => el("th", {}, h)),
      ),
    ),
    body,
  );
  root.replaceChildren(el("h2", {}, "Jobs"), table);
  let stopped = false;
  let timer = 0;
  const refresh = async () => {
    try {
      const { jobs } = await api.jobs();
      if (stopped) return;
      body.replaceChildren(...jobs.map(row));
      if (!jobs.length) body.append(el("tr", {}, el("td", { colspan: "8" }, "No jobs yet: adctl submit job.yaml")));
      setStatus("");
    } catch (e) {
      setStatus(String(e instanceof Error ? e.message : e));
    }
    if (!stopped) timer = window.setTimeout(refresh, 2000);
  };
  void refresh();
  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
    },
  };
}
