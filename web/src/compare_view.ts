// Runs side by side (#/compare?jobs=a,b,…): loss, learning rate and (when the points carry it)
// eval loss overlaid by step with one line per job, the spec fields that differ, and the
// validation samples as a grid of steps × jobs playing in sync.
//
// Each job's history is loaded once (600 points per rank, as the job view does), then reloaded
// every 5 s while any of the jobs is live. The root's data-load-ms is the time from opening the
// view to the first complete draw (charts, diff, grid; the GIFs may still be arriving), and
// data-loaded-at that moment on the page's clock (performance.now()).
import { api, Job, MetricPoint, Sample } from "./api";
import { COMPARE_SPECS, OverlayChart } from "./charts";
import { el, isLive, stateBadge } from "./format";
import type { View } from "./jobs_view";
import { GridJob, SampleGrid } from "./sample_grid";
import type { DiffRow, FlatSpec } from "./spec_diff";

const MAX_CHART_POINTS = 600; // per rank
const REFRESH_MS = 5000;

export const compareHash = (ids: string[]): string => `#/compare?jobs=${ids.map(encodeURIComponent).join(",")}`;

// The job ids of a #/compare hash, in order, without repeats.
export function compareIds(hash: string): string[] | null {
  const match = /^#\/compare(?:\?(.*))?$/.exec(hash);
  if (!match) return null;
  const jobs = new URLSearchParams(match[1] ?? "").get("jobs") ?? "";
  return [...new Set(jobs.split(",").map((s) => s.trim()).filter(Boolean))];
}

interface Loaded {
  job: Job;
  points: MetricPoint[];
  samples: Sample[];
}

const label = (job: Job): string => `${job.name} (${job.id})`;

// validation.frames / validation.fps of a flattened spec: one pass of its GIFs.
function loopSeconds(spec: FlatSpec | undefined): number {
  const frames = Number(spec?.get("validation.frames"));
  const fps = Number(spec?.get("validation.fps"));
  return frames > 0 && fps > 0 ? frames / fps : 0;
}

export function showCompare(root: HTMLElement, ids: string[], setStatus: (text: string) => void): View {
  const started = performance.now();
  let stopped = false;
  let timer = 0;

  const jobsLine = el("div", { id: "compare-jobs", class: "compare-jobs" });
  const addSelect = el("select", { id: "compare-add" });
  const errors = el("div", { class: "error" });
  const charts = COMPARE_SPECS.map((spec) => new OverlayChart(spec));
  const diffTable = el("table", { id: "spec-diff" });
  const diffNote = el("p", { id: "spec-diff-note" });
  const grid = new SampleGrid();
  const view = el("div", { id: "compare" });
  view.append(
    el("p", {}, el("a", { href: "#/" }, "← all jobs")),
    el("h2", {}, `Compare ${ids.length} job${ids.length === 1 ? "" : "s"}`),
    jobsLine,
    el("p", {}, el("label", {}, "Add a job ", addSelect)),
    errors,
    el("div", { class: "charts" }, ...charts.map((c) => c.element)),
    el("h3", {}, "Spec fields that differ"),
    diffNote,
    diffTable,
    grid.element,
  );
  root.replaceChildren(view);

  const onResize = () => charts.forEach((c) => c.resize());
  window.addEventListener("resize", onResize);
  addSelect.addEventListener("change", () => {
    if (addSelect.value) location.hash = compareHash([...ids, addSelect.value]);
  });

  function renderJobs(loaded: Loaded[]): void {
    jobsLine.replaceChildren(
      ...loaded.map(({ job }) => {
        const others = ids.filter((id) => id !== job.id);
        return el(
          "span",
          { class: "compare-job", "data-job": job.id },
          el("a", { href: `#/jobs/${encodeURIComponent(job.id)}` }, label(job)),
          " ",
          stateBadge(job),
          " ",
          el("a", { href: compareHash(others), class: "remove", title: "remove from the comparison" }, "×"),
        );
      }),
    );
  }

  function renderDiff(loaded: Loaded[], rows: DiffRow[]): void {
    diffTable.dataset.rows = String(rows.length);
    diffNote.textContent =
      loaded.length < 2 ? "Add a second job to compare specs." : rows.length ? "" : "The specs are the same.";
    diffTable.hidden = rows.length === 0;
    diffTable.replaceChildren(
      el("thead", {}, el("tr", {}, el("th", {}, "Field"), ...loaded.map(({ job }) => el("th", { "data-job": job.id }, label(job))))),
      el(
        "tbody",
        {},
        ...rows.map((r) =>
          el(
            "tr",
            { "data-field": r.path },
            el("td", { class: "path" }, r.path),
            ...r.values.map((v) => el("td", {}, v ?? "(unset)")),
          ),
        ),
      ),
    );
  }

  async function fillAddSelect(): Promise<void> {
    const { jobs } = await api.jobs();
    if (stopped) return;
    const others = jobs.filter((j) => !ids.includes(j.id));
    addSelect.replaceChildren(
      el("option", { value: "" }, others.length ? "choose…" : "no other jobs"),
      ...others.map((j) => el("option", { value: j.id }, label(j))),
    );
  }

  async function load(): Promise<Loaded[]> {
    const settled = await Promise.allSettled(
      ids.map(async (id): Promise<Loaded> => {
        const [job, metrics, samples] = await Promise.all([
          api.job(id),
          api.metrics(id, MAX_CHART_POINTS),
          api.samples(id),
        ]);
        return { job, points: metrics.points, samples: samples.samples };
      }),
    );
    const problems: string[] = [];
    const loaded: Loaded[] = [];
    settled.forEach((s, i) => {
      if (s.status === "fulfilled") loaded.push(s.value);
      else problems.push(`${ids[i]}: ${s.reason instanceof Error ? s.reason.message : String(s.reason)}`);
    });
    errors.textContent = problems.join("; ");
    return loaded;
  }

  async function refresh(first: boolean): Promise<void> {
    try {
      // The YAML parser is loaded with the first compare view, not with the page.
      const [loaded, { flattenSpec, specDiff }] = await Promise.all([load(), import("./spec_diff")]);
      if (stopped) return;
      const specs: FlatSpec[] = loaded.map(({ job }) => {
        try {
          return flattenSpec(job.spec_yaml ?? "");
        } catch (e) {
          errors.append(` ${job.id}: spec does not parse (${e instanceof Error ? e.message : String(e)})`);
          return new Map<string, string>();
        }
      });
      renderJobs(loaded);
      charts.forEach((c) => c.render(loaded.map((l) => ({ label: label(l.job), points: l.points }))));
      renderDiff(loaded, loaded.length > 1 ? specDiff(specs) : []);
      const gridJobs: GridJob[] = loaded.map((l, i) => ({
        id: l.job.id,
        label: label(l.job),
        samples: l.samples,
        loopSeconds: loopSeconds(specs[i]),
      }));
      grid.update(gridJobs);
      if (first) {
        view.dataset.loadMs = String(Math.round(performance.now() - started));
        view.dataset.loadedAt = String(Math.round(performance.now())); // since the page's navigation
        view.dataset.loaded = "1";
        void fillAddSelect();
      }
      setStatus("");
      if (loaded.some((l) => isLive(l.job))) timer = window.setTimeout(() => void refresh(false), REFRESH_MS);
    } catch (e) {
      setStatus(`compare: ${e instanceof Error ? e.message : String(e)}; retrying`);
      if (!stopped) timer = window.setTimeout(() => void refresh(first), REFRESH_MS);
    }
  }
  void refresh(true);

  return {
    stop() {
      stopped = true;
      clearTimeout(timer);
      window.removeEventListener("resize", onResize);
      charts.forEach((c) => c.destroy());
      grid.destroy();
    },
  };
}
