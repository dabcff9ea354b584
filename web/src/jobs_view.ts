// The jobs list: state, progress, loss, throughput and GPUs of every job, refreshed every 2 s.
// Ticking jobs' boxes and "Compare" opens them side by side (#/compare?jobs=…).
import { api, Job, num } from "./api";
import { compareHash } from "./compare_view";
import { el, fixed, gpusText, progressBar, stateBadge } from "./format";

export interface View {
  stop(): void;
}

function row(job: Job, selected: Set<string>, onSelect: () => void): HTMLElement {
  const p = job.progress;
  const link = el("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, job.id);
  const box = el("input", { type: "checkbox", class: "select", "aria-label": `select ${job.id} to compare` });
  box.checked = selected.has(job.id);
  box.addEventListener("change", () => {
    if (box.checked) selected.add(job.id);
    else selected.delete(job.id);
    onSelect();
  });
  return el(
    "tr",
    { "data-job": job.id },
    el("td", {}, box),
    el("td", {}, link),
    el("td", {}, job.name),
    el("td", {}, stateBadge(job)),
    el("td", {}, progressBar(job)),
    el("td", { class: "num" }, p && num(p.step) ? p.loss.toFixed(4) : "–"),
    el("td", { class: "num" }, fixed(p?.clips_per_second ?? 0, 2)),
    el("td", {}, gpusText(job)),
    el("td", {}, job.state === "JOB_STATE_QUEUED" && job.wait_reason ? job.wait_reason : job.message),
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
        ...["", "Job", "Name", "State", "Progress", "Loss", "Clips/s", "GPUs", "Message"].map((h) => el("th", {}, h)),
      ),
    ),
    body,
  );
  // Selection survives the refreshes; the order is the order of ticking.
  const selected = new Set<string>();
  const compare = el("button", { id: "compare-button", type: "button", disabled: "" }, "Compare");
  const onSelect = () => {
    compare.disabled = selected.size < 2;
    compare.textContent = selected.size ? `Compare (${selected.size})` : "Compare";
  };
  compare.addEventListener("click", () => {
    location.hash = compareHash([...selected]);
  });
  root.replaceChildren(
    el("h2", {}, "Jobs"),
    el("div", { class: "commands" }, compare, el("span", { class: "hint" }, "tick two or more jobs to compare them")),
    table,
  );
  let stopped = false;
  let timer = 0;
  const refresh = async () => {
    try {
      const { jobs } = await api.jobs();
      if (stopped) return;
      body.replaceChildren(...jobs.map((j) => row(j, selected, onSelect)));
      if (!jobs.length) body.append(el("tr", {}, el("td", { colspan: "9" }, "No jobs yet: adctl submit job.yaml")));
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
