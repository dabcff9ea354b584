// Small display helpers shared by the views.
import { Job, num } from "./api";

export const stateName = (state: string): string => state.replace(/^JOB_STATE_/, "");

export const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED"]);
export const isLive = (job: Job): boolean => !TERMINAL.has(stateName(job.state));

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string> = {},
  ...children: (Node | string)[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  node.append(...children);
  return node;
}

export const fixed = (v: number, digits: number): string => (v ? v.toFixed(digits) : "–");

export function bytes(v: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export const time = (unix: number): string => (unix ? new Date(unix * 1000).toLocaleString() : "–");

export function progressText(job: Job): string {
  const p = job.progress;
  if (!p || !num(p.total_steps)) return "–";
  return `${num(p.step)} / ${num(p.total_steps)}`;
}

export function progressBar(job: Job): HTMLElement {
  const p = job.progress;
  const total = p ? num(p.total_steps) : 0;
  const bar = el("progress", { max: String(total || 1), value: String(p ? num(p.step) : 0) });
  return el("span", { class: "progress" }, bar, " ", progressText(job));
}

export function stateBadge(job: Job): HTMLElement {
  const s = stateName(job.state);
  return el("span", { class: `state state-${s.toLowerCase()}`, "data-state": s }, s);
}

export function gpusText(job: Job): string {
  return job.devices.length ? `${job.gpus} (${job.devices.join(", ")})` : String(job.gpus);
}
