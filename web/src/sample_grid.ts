// The compare view's validation samples: one row per step, one column per job, one prompt
// index at a time (the same prompt and seed in every job whose specs agree on them).
//
// The GIFs play in sync: once every GIF of the grid has loaded, and on "Restart together", each
// image gets a fresh object URL of its file in the same task, which starts every animation at
// its first frame. Jobs whose loops differ in length (validation.frames / validation.fps) are
// restarted together every longest loop. Files are fetched once per job and path.
import { artifactBlob, num, Sample } from "./api";
import { el } from "./format";

export interface GridJob {
  id: string;
  label: string;
  samples: Sample[];
  loopSeconds: number; // one pass of its GIFs; 0: unknown
}

const GRID_INDEX = -1; // Sample.index of a step's grid of all prompts

export class SampleGrid {
  readonly element: HTMLElement;
  private readonly table = el("table", { id: "sample-grid", class: "sample-grid" });
  private readonly promptSelect = el("select", { id: "sample-prompt" });
  private readonly blobs = new Map<string, Promise<Blob>>();
  private images: { img: HTMLImageElement; blob: Blob }[] = [];
  private urls: string[] = [];
  private timer = 0;
  private render = 0; // the current render; images of an older one are dropped
  private jobs: GridJob[] = [];

  constructor() {
    const restart = el("button", { id: "samples-restart", type: "button" }, "Restart together");
    restart.addEventListener("click", () => this.restart());
    this.promptSelect.addEventListener("change", () => this.draw());
    this.element = el(
      "section",
      { id: "compare-samples" },
      el("h3", {}, "Samples ", el("label", {}, "prompt ", this.promptSelect), " ", restart),
      this.table,
    );
  }

  // (Re)draws the grid when the jobs' samples changed since the last call.
  update(jobs: GridJob[]): void {
    const key = (list: GridJob[]) =>
      list.map((j) => `${j.id}:${j.samples.filter((s) => s.on_disk).map((s) => `${num(s.step)}/${s.index}`).join(",")}`).join(";");
    if (this.jobs.length && key(jobs) === key(this.jobs)) return;
    this.jobs = jobs;
    const indices = [...new Set(jobs.flatMap((j) => j.samples.map((s) => s.index)))].sort((a, b) =>
      a === GRID_INDEX ? 1 : b === GRID_INDEX ? -1 : a - b,
    );
    const chosen = this.promptSelect.value;
    this.promptSelect.replaceChildren(
      ...indices.map((i) => {
        const prompt = jobs.flatMap((j) => j.samples).find((s) => s.index === i)?.prompt ?? "";
        const text = i === GRID_INDEX ? "grid (all prompts)" : `${i}: ${prompt}`;
        return el("option", { value: String(i) }, text);
      }),
    );
    if (indices.map(String).includes(chosen)) this.promptSelect.value = chosen;
    this.draw();
  }

  destroy(): void {
    clearInterval(this.timer);
    this.render++;
    this.urls.forEach((u) => URL.revokeObjectURL(u));
    this.urls = [];
  }

  private draw(): void {
    this.destroy();
    const render = this.render;
    this.images = [];
    const index = Number(this.promptSelect.value);
    const jobs = this.jobs;
    const byJob = jobs.map(
      (j) => new Map(j.samples.filter((s) => s.on_disk && s.index === index).map((s) => [num(s.step), s] as const)),
    );
    const steps = [...new Set(byJob.flatMap((m) => [...m.keys()]))].sort((a, b) => a - b);
    this.table.dataset.rows = String(steps.length);
    this.table.dataset.columns = String(jobs.length);
    const head = el("tr", {}, el("th", {}, "Step"), ...jobs.map((j) => el("th", { "data-job": j.id }, j.label)));
    const body = steps.map((step) =>
      el(
        "tr",
        { "data-step": String(step) },
        el("th", { class: "num" }, String(step)),
        ...jobs.map((j, k) => this.cell(j, byJob[k].get(step), render)),
      ),
    );
    if (!steps.length) {
      body.push(el("tr", {}, el("td", { colspan: String(jobs.length + 1) }, "none (the specs' validation sections render them)")));
    }
    this.table.replaceChildren(el("thead", {}, head), el("tbody", {}, ...body));
    const loops = jobs.map((j) => j.loopSeconds).filter((s) => s > 0);
    if (loops.length && loops.some((s) => s !== loops[0])) {
      this.timer = window.setInterval(() => this.restart(), Math.max(...loops) * 1000);
    }
  }

  private cell(job: GridJob, sample: Sample | undefined, render: number): HTMLElement {
    const td = el("td", { "data-job": job.id });
    if (!sample) {
      td.textContent = "–";
      return td;
    }
    const img = el("img", { alt: sample.prompt || "grid", title: `${job.label}, step ${num(sample.step)}` });
    td.append(img);
    const key = `${job.id}/${sample.gif}`;
    let blob = this.blobs.get(key);
    if (!blob) {
      blob = artifactBlob(job.id, sample.gif);
      this.blobs.set(key, blob);
    }
    blob.then(
      (b) => {
        if (render !== this.render) return;
        const url = URL.createObjectURL(b);
        this.urls.push(url);
        img.src = url; // shown at once; restarted with the others once all have loaded
        this.images.push({ img, blob: b });
        this.restartWhenAllLoaded();
      },
      (e: unknown) => {
        if (render !== this.render) return;
        td.replaceChildren(`(${e instanceof Error ? e.message : String(e)})`);
        this.restartWhenAllLoaded();
      },
    );
    return td;
  }

  private restartWhenAllLoaded(): void {
    if (this.images.length === this.table.querySelectorAll("td img").length) this.restart();
  }

  // Every GIF from its first frame, in one task.
  private restart(): void {
    const old = this.urls;
    this.urls = this.images.map(({ img, blob }) => {
      const url = URL.createObjectURL(blob);
      img.src = url;
      return url;
    });
    old.forEach((u) => URL.revokeObjectURL(u));
    this.table.dataset.restarts = String(Number(this.table.dataset.restarts ?? "0") + 1);
  }
}
