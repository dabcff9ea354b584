// Line charts of one metric, x = optimizer step (uPlot): RankChart draws one job live, one
// series per rank; OverlayChart draws several jobs, one series per job (the compare view).
//
// Points are kept per series by step, so a resumed attempt that repeats steps overwrites them
// instead of drawing the curve backwards. The container's data-points attribute is the number
// of points drawn and data-series the number of lines (the browser tests read them).
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

import { MetricPoint, num, skippedByReason } from "./api";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

export interface ChartSpec {
  id: string; // "loss"
  title: string;
  // The plotted value of a point; null: not measured.
  value: (p: MetricPoint) => number | null;
  unit?: string;
}

function chartElement(id: string, title: string): HTMLElement {
  const element = document.createElement("section");
  element.className = "chart";
  element.id = `chart-${id}`;
  element.dataset.points = "0";
  element.dataset.series = "0";
  const heading = document.createElement("h3");
  heading.textContent = title;
  element.append(heading);
  return element;
}

// uPlot's aligned data: the union of the series' steps, each series null where it has no point.
function alignedData(series: Map<number, number>[]): uPlot.AlignedData {
  const steps = new Set<number>();
  for (const s of series) for (const x of s.keys()) steps.add(x);
  const xs = [...steps].sort((a, b) => a - b);
  return [xs, ...series.map((s) => xs.map((x) => s.get(x) ?? null))];
}

// Small values (a learning rate of 1e-4) in exponent form; uPlot's default shows them as 0.
const formatValue = (v: number): string =>
  v !== 0 && Math.abs(v) < 1e-2 ? v.toExponential(1) : String(Number(v.toPrecision(6)));
// Whole steps on the x axis: 1, 2, 5 × 10^k.
const STEP_INCREMENTS = Array.from({ length: 10 }, (_, k) => [1, 2, 5].map((m) => m * 10 ** k)).flat();

function lineOptions(width: number, unit: string, labels: string[]): uPlot.Options {
  return {
    width,
    height: 220,
    legend: { live: true },
    scales: { x: { time: false } },
    axes: [
      { label: "step", incrs: STEP_INCREMENTS },
      { label: unit, size: 60, values: (_u, splits) => splits.map(formatValue) },
    ],
    series: [
      { label: "step" },
      ...labels.map((label, i) => ({
        label,
        stroke: COLORS[i % COLORS.length],
        width: 1.5,
        spanGaps: true,
        points: { show: false },
        value: (_u: uPlot, v: number | null) => (v === null ? "–" : formatValue(v)),
      })),
    ],
  };
}

const chartWidth = (element: HTMLElement): number => Math.max(280, (element.clientWidth || 480) - 8);

export class RankChart {
  private readonly byRank = new Map<number, Map<number, number>>();
  private plot: uPlot | null = null;
  private plottedRanks = "";
  readonly element: HTMLElement;

  constructor(private readonly spec: ChartSpec) {
    this.element = chartElement(spec.id, spec.title);
  }

  add(points: MetricPoint[]): void {
    for (const p of points) {
      const v = this.spec.value(p);
      if (v === null || !Number.isFinite(v)) continue;
      let series = this.byRank.get(p.rank);
      if (!series) {
        series = new Map();
        this.byRank.set(p.rank, series);
      }
      series.set(num(p.step), v);
    }
  }

  render(): void {
    const ranks = [...this.byRank.keys()].sort((a, b) => a - b);
    const data = alignedData(ranks.map((r) => this.byRank.get(r)!));
    let drawn = 0;
    for (const series of this.byRank.values()) drawn += series.size;
    this.element.dataset.points = String(drawn);
    this.element.dataset.series = String(ranks.length);
    const key = ranks.join(",");
    if (!this.plot || key !== this.plottedRanks) {
      this.plot?.destroy();
      this.plottedRanks = key;
      const labels = ranks.map((r) => `rank ${r}`);
      this.plot = new uPlot(lineOptions(chartWidth(this.element), this.spec.unit ?? "", labels), data, this.element);
    } else {
      this.plot.setData(data);
    }
  }

  resize(): void {
    this.plot?.setSize({ width: chartWidth(this.element), height: 220 });
  }

  destroy(): void {
    this.plot?.destroy();
    this.plot = null;
  }
}

// One line per job: its value at each step, the mean over the job's ranks (ranks report the
// same all-reduced loss and learning rate, so this is rank 0's line when they agree). Drawn
// once, from the histories the compare view loads.
export class OverlayChart {
  private plot: uPlot | null = null;
  readonly element: HTMLElement;

  constructor(private readonly spec: ChartSpec) {
    this.element = chartElement(spec.id, spec.title);
  }

  // `jobs`: a label and the job's points, each in the order adctld sent them (by id), so a
  // later attempt's point at a repeated step replaces the earlier one.
  render(jobs: { label: string; points: MetricPoint[] }[]): void {
    const series = jobs.map((j) => meanOverRanks(j.points, this.spec.value));
    const shown = series.filter((s) => s.size > 0).length;
    this.element.dataset.points = String(series.reduce((n, s) => n + s.size, 0));
    this.element.dataset.series = String(shown);
    this.plot?.destroy();
    this.plot = null;
    this.element.hidden = shown === 0;
    if (!shown) return;
    const options = lineOptions(chartWidth(this.element), this.spec.unit ?? "", jobs.map((j) => j.label));
    this.plot = new uPlot(options, alignedData(series), this.element);
  }

  resize(): void {
    this.plot?.setSize({ width: chartWidth(this.element), height: 220 });
  }

  destroy(): void {
    this.plot?.destroy();
    this.plot = null;
  }
}

// step → the mean of the ranks' values at that step (each rank's latest point for the step).
function meanOverRanks(points: MetricPoint[], value: (p: MetricPoint) => number | null): Map<number, number> {
  const byStep = new Map<number, Map<number, number>>();
  for (const p of points) {
    const v = value(p);
    if (v === null || !Number.isFinite(v)) continue;
    const step = num(p.step);
    let ranks = byStep.get(step);
    if (!ranks) {
      ranks = new Map();
      byStep.set(step, ranks);
    }
    ranks.set(p.rank, v);
  }
  const mean = new Map<number, number>();
  for (const [step, ranks] of byStep) {
    let sum = 0;
    for (const v of ranks.values()) sum += v;
    mean.set(step, sum / ranks.size);
  }
  return mean;
}

// The job page's charts: MetricPoint fields by their proto names.
export const CHART_SPECS: ChartSpec[] = [
  { id: "loss", title: "Loss", value: (p) => p.loss },
  // Held-out clips (the spec's eval): only the steps that evaluated carry one.
  { id: "eval-loss", title: "Eval loss (held-out clips)", value: (p) => (typeof p.eval_loss === "number" && p.eval_loss > 0 ? p.eval_loss : null) },
  { id: "clips", title: "Throughput (clips/s)", value: (p) => p.clips_per_second, unit: "clips/s" },
  { id: "mfu", title: "MFU (%; GPU ranks only)", value: (p) => (p.mfu_ratio > 0 ? p.mfu_ratio * 100 : null), unit: "%" },
  {
    id: "gpu",
    title: "GPU utilisation (%; CPU share on CPU slots)",
    value: (p) => (p.gpu_utilization >= 0 ? p.gpu_utilization * 100 : null),
    unit: "%",
  },
];

// A preprocess job's charts (it trains nothing: no loss, learning rate or MFU): how fast its
// ranks turn videos into clips, and what they skip.
export const PREPROCESS_SPECS: ChartSpec[] = [
  { id: "videos", title: "Throughput (videos/s)", value: (p) => p.clips_per_second, unit: "videos/s" },
  {
    id: "skipped",
    title: "Videos skipped (all reasons, so far)",
    value: (p) => Object.values(skippedByReason(p)).reduce((a, b) => a + b, 0),
  },
];

// The compare view's charts, one line per job. eval_loss: only points that carry one (a
// positive number; adctld prints 0 for a point without it) are drawn, and the chart hides when
// no job has any.
export const COMPARE_SPECS: ChartSpec[] = [
  { id: "loss", title: "Loss", value: (p) => p.loss },
  { id: "lr", title: "Learning rate", value: (p) => p.learning_rate },
  { id: "eval-loss", title: "Eval loss", value: (p) => (typeof p.eval_loss === "number" && p.eval_loss > 0 ? p.eval_loss : null) },
];
