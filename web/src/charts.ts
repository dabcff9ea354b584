// A live line chart of one metric, one series per rank, x = optimizer step (uPlot).
//
// Points are kept per rank by step, so a resumed attempt that repeats steps overwrites them
// instead of drawing the curve backwards. The container's data-points attribute is the number
// of points drawn (the browser test reads it).
import uPlot from "uplot";
import "uplot/dist/uPlot.min.css";

import { MetricPoint, num } from "./api";

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

export interface ChartSpec {
  id: string; // "loss"
  title: string;
  // The plotted value of a point; null: not measured.
  value: (p: MetricPoint) => number | null;
  unit?: string;
}

export class RankChart {
  private readonly byRank = new Map<number, Map<number, number>>();
  private plot: uPlot | null = null;
  private plottedRanks = "";
  readonly element: HTMLElement;

  constructor(private readonly spec: ChartSpec) {
    this.element = document.createElement("section");
    this.element.className = "chart";
    this.element.id = `chart-${spec.id}`;
    this.element.dataset.points = "0";
    const title = document.createElement("h3");
    title.textContent = spec.title;
    this.element.append(title);
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
    const steps = new Set<number>();
    for (const series of this.byRank.values()) for (const s of series.keys()) steps.add(s);
    const xs = [...steps].sort((a, b) => a - b);
    const data: uPlot.AlignedData = [
      xs,
      ...ranks.map((r) => {
        const series = this.byRank.get(r)!;
        return xs.map((x) => series.get(x) ?? null);
      }),
    ];
    let drawn = 0;
    for (const series of this.byRank.values()) drawn += series.size;
    this.element.dataset.points = String(drawn);
    const key = ranks.join(",");
    if (!this.plot || key !== this.plottedRanks) {
      this.plot?.destroy();
      this.plottedRanks = key;
      this.plot = new uPlot(this.options(ranks), data, this.element);
    } else {
      this.plot.setData(data);
    }
  }

  resize(): void {
    this.plot?.setSize({ width: this.width(), height: 220 });
  }

  destroy(): void {
    this.plot?.destroy();
    this.plot = null;
  }

  private width(): number {
    return Math.max(280, (this.element.clientWidth || 480) - 8);
  }

  private options(ranks: number[]): uPlot.Options {
    const unit = this.spec.unit ?? "";
    return {
      width: this.width(),
      height: 220,
      legend: { live: true },
      scales: { x: { time: false } },
      axes: [{ label: "step" }, { label: unit, size: 60 }],
      series: [
        { label: "step" },
        ...ranks.map((r, i) => ({
          label: `rank ${r}`,
          stroke: COLORS[i % COLORS.length],
          width: 1.5,
          spanGaps: true,
          points: { show: false },
        })),
      ],
    };
  }
}

// The job page's charts: MetricPoint fields by their proto names.
export const CHART_SPECS: ChartSpec[] = [
  { id: "loss", title: "Loss", value: (p) => p.loss },
  { id: "clips", title: "Throughput (clips/s)", value: (p) => p.clips_per_second, unit: "clips/s" },
  { id: "mfu", title: "MFU (%; GPU ranks only)", value: (p) => (p.mfu_ratio > 0 ? p.mfu_ratio * 100 : null), unit: "%" },
  {
    id: "gpu",
    title: "GPU utilisation (%; CPU share on CPU slots)",
    value: (p) => (p.gpu_utilization >= 0 ? p.gpu_utilization * 100 : null),
    unit: "%",
  },
];
