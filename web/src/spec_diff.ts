// The spec diff of the compare view: each job's canonical spec (Job.spec_yaml) flattened to
// dotted paths ("train.lr", "model.lora.rank"), and the paths whose values differ between jobs.
//
// A list is one value ("[0.9, 0.999]"), as `adctl diff` compares it. A path a spec lacks (the
// canonical YAML leaves out unset launcher and LoRA fields) is undefined there, and differs from
// any value.
import { parse } from "yaml";

export type FlatSpec = Map<string, string>;

export interface DiffRow {
  path: string;
  values: (string | undefined)[]; // one per spec, in the order given
}

function show(value: unknown): string {
  if (typeof value === "string") return value === "" ? '""' : value;
  if (Array.isArray(value)) return `[${value.map((v) => (typeof v === "string" ? JSON.stringify(v) : show(v))).join(", ")}]`;
  // A list's mappings (data.sources: [{path, weight}]) as JSON.
  if (value !== null && typeof value === "object") return JSON.stringify(value);
  return String(value);
}

function flattenInto(out: FlatSpec, prefix: string, value: unknown): void {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
      flattenInto(out, prefix ? `${prefix}.${key}` : key, child);
    }
    return;
  }
  if (prefix) out.set(prefix, show(value));
}

// Throws on YAML that does not parse (the caller names the job).
export function flattenSpec(yamlText: string): FlatSpec {
  const out: FlatSpec = new Map();
  flattenInto(out, "", parse(yamlText) as unknown);
  return out;
}

// The paths whose values are not all equal, in the order they first appear.
export function specDiff(specs: FlatSpec[]): DiffRow[] {
  const paths: string[] = [];
  const seen = new Set<string>();
  for (const spec of specs) {
    for (const path of spec.keys()) {
      if (!seen.has(path)) {
        seen.add(path);
        paths.push(path);
      }
    }
  }
  const rows: DiffRow[] = [];
  for (const path of paths) {
    const values = specs.map((s) => s.get(path));
    if (values.some((v) => v !== values[0])) rows.push({ path, values });
  }
  return rows;
}
