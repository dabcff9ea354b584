// The adctld JSON API (docs/web.md): typed responses and one fetch helper that adds the bearer
// token and, when adctld answers 401, asks for the token once (kept in localStorage) and retries.
//
// Field names are the proto's (adctl.v1, preserve_proto_field_names); int64 fields arrive as
// JSON strings (proto3 JSON mapping), hence `Int` and num(). tests/web/api_types.mjs checks every
// interface that mirrors a message against proto/adctl/v1/job_service.proto (ctest web_api_types).

export type Int = string | number;

export const num = (v: Int | undefined): number => (v === undefined ? 0 : Number(v));

export interface Progress {
  step: Int;
  total_steps: Int;
  loss: number;
  clips_per_second: number;
  step_seconds: number;
  eta_seconds: number;
  last_checkpoint_step: Int;
  updated_at: number;
  mfu_ratio: number;
}

export interface Rank {
  rank: number;
  pid: number;
  device: string;
  alive: boolean;
  exit_code: number;
  exit_signal: number;
  last_heartbeat: number;
}

export interface Job {
  id: string;
  name: string;
  state: string; // "JOB_STATE_RUNNING"
  gpus: number;
  priority: number;
  submitted_at: number;
  started_at: number;
  finished_at: number;
  attempt: number;
  restarts: number;
  max_restarts: number;
  message: string;
  wait_reason: string;
  devices: string[];
  progress?: Progress;
  ranks: Rank[];
  trains?: string; // "motion modules", or "MotionLoRA rank 64, alpha 64 (…) on <base>"
  after?: string[]; // the jobs it waits for (adctl submit --after)
  after_any?: boolean; // any end of them will do, not only SUCCEEDED
  labels?: Record<string, string>; // adctl submit --label k=v
  preemptible?: boolean; // resources.preemptible
  preempted_by?: string; // the job that preempted it, until it starts again
  spec_yaml?: string; // the canonical YAML of the effective spec (GET /jobs/{id} carries it)
}

export interface JobEvent {
  id: Int;
  attempt: number;
  time: number;
  kind: string;
  level: string;
  message: string;
}

// One rank's step (adctl.v1.MetricPoint).
export interface MetricPoint {
  attempt: number;
  rank: number;
  step: Int;
  time: number;
  loss: number;
  learning_rate: number;
  clips_per_second: number;
  mfu_ratio: number;
  gpu_utilization: number; // 0..1; negative: not measured
  eval_loss?: number; // held-out loss at eval steps (issue 30); absent from older adctlds
  samples_seen?: Int; // a preprocess rank: clips written so far
  // A preprocess rank: videos its shards skipped so far, by reason.
  videos_skipped_missing?: Int;
  videos_skipped_unreadable?: Int;
  videos_skipped_zero_frames?: Int;
  videos_skipped_truncated?: Int;
  videos_skipped_too_short?: Int;
}

export const SKIP_REASONS = ["missing", "unreadable", "zero_frames", "truncated", "too_short"] as const;

// The videos a preprocess point says were skipped, by reason (absent fields: 0).
export function skippedByReason(p: MetricPoint): Record<(typeof SKIP_REASONS)[number], number> {
  return {
    missing: num(p.videos_skipped_missing),
    unreadable: num(p.videos_skipped_unreadable),
    zero_frames: num(p.videos_skipped_zero_frames),
    truncated: num(p.videos_skipped_truncated),
    too_short: num(p.videos_skipped_too_short),
  };
}

export interface ArtifactFile {
  path: string;
  size_bytes: Int;
}

export interface Export {
  step: Int;
  format: string;
  weights: string; // "raw" | "ema"
  path: string;
  files: ArtifactFile[];
  created_at: number;
}

export interface Checkpoint {
  step: Int;
  path: string;
  size_bytes: Int;
  created_at: number;
  attempt: number;
  on_disk: boolean;
}

export interface Sample {
  step: Int;
  index: number;
  prompt: string;
  mp4: string;
  gif: string;
  on_disk: boolean;
  render_seconds?: number; // this sample's rendering (sampling and its files)
}

export interface Updates {
  job: Job;
  events: JobEvent[];
  points: MetricPoint[];
  last_event: number;
  last_metric: number;
}

export interface LogChunk {
  attempt: number;
  rank: number;
  exists: boolean;
  offset: number;
  next_offset: number;
  size: number;
  data: string;
  job_state: string;
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

const TOKEN_KEY = "adctl.token";

export const storedToken = (): string => localStorage.getItem(TOKEN_KEY) ?? "";

// One question at a time: concurrent 401s wait on the same dialog.
let asking: Promise<boolean> | null = null;

export function askToken(reason: string): Promise<boolean> {
  if (asking) return asking;
  const dialog = document.getElementById("token-dialog") as HTMLDialogElement;
  const input = document.getElementById("token-input") as HTMLInputElement;
  (document.getElementById("token-reason") as HTMLElement).textContent = reason;
  input.value = storedToken();
  asking = new Promise<boolean>((resolve) => {
    dialog.addEventListener(
      "close",
      () => {
        asking = null;
        if (dialog.returnValue !== "ok") return resolve(false);
        localStorage.setItem(TOKEN_KEY, input.value.trim());
        resolve(true);
      },
      { once: true },
    );
    dialog.showModal();
  });
  return asking;
}

async function request(method: string, path: string, signal?: AbortSignal): Promise<Response> {
  for (;;) {
    const headers: Record<string, string> = {};
    const token = storedToken();
    if (token) headers["Authorization"] = `Bearer ${token}`;
    if (method === "POST") headers["Content-Type"] = "application/json";
    const init: RequestInit = { method, headers };
    if (method === "POST") init.body = "{}";
    if (signal) init.signal = signal;
    const res = await fetch(path, init);
    if (res.status !== 401) return res;
    const body = (await res.json().catch(() => ({}))) as { message?: string };
    if (!(await askToken(body.message ?? "adctld asks for a token"))) {
      throw new ApiError(401, body.message ?? "token required");
    }
  }
}

export async function call<T>(method: "GET" | "POST", path: string, signal?: AbortSignal): Promise<T> {
  const res = await request(method, path, signal);
  if (!res.ok) {
    const body = (await res.json().catch(() => ({}))) as { message?: string };
    throw new ApiError(res.status, body.message ?? `${res.status} ${res.statusText}`);
  }
  return (await res.json()) as T;
}

// An artifact file (sample GIF/MP4), fetched with the token, since <img> and <a> cannot send an
// Authorization header; artifactUrl makes it an object URL.
export async function artifactBlob(jobId: string, path: string): Promise<Blob> {
  const res = await request("GET", `/api/v1/jobs/${encodeURIComponent(jobId)}/artifacts/${path}`);
  if (!res.ok) throw new ApiError(res.status, `${path}: ${res.status}`);
  return res.blob();
}

export async function artifactUrl(jobId: string, path: string): Promise<string> {
  return URL.createObjectURL(await artifactBlob(jobId, path));
}

const jobPath = (id: string) => `/api/v1/jobs/${encodeURIComponent(id)}`;

export const api = {
  jobs: () => call<{ jobs: Job[] }>("GET", "/api/v1/jobs"),
  job: (id: string) => call<Job>("GET", jobPath(id)),
  events: (id: string) => call<{ events: JobEvent[] }>("GET", `${jobPath(id)}/events`),
  metrics: (id: string, maxPoints: number) =>
    call<{ points: MetricPoint[]; last_id: number }>("GET", `${jobPath(id)}/metrics?max_points=${maxPoints}`),
  updates: (id: string, afterEvent: number, afterMetric: number, signal: AbortSignal) =>
    call<Updates>(
      "GET",
      `${jobPath(id)}/updates?after_event=${afterEvent}&after_metric=${afterMetric}&timeout_ms=20000`,
      signal,
    ),
  logs: (id: string, rank: number, offset: number) =>
    call<LogChunk>("GET", `${jobPath(id)}/logs?rank=${rank}&offset=${offset}`),
  checkpoints: (id: string) => call<{ checkpoints: Checkpoint[] }>("GET", `${jobPath(id)}/checkpoints`),
  samples: (id: string) => call<{ samples: Sample[] }>("GET", `${jobPath(id)}/samples`),
  exports: (id: string) => call<{ exports?: Export[] }>("GET", `${jobPath(id)}/exports`),
  command: (id: string, command: "cancel" | "pause" | "resume") => call<Job>("POST", `${jobPath(id)}/${command}`),
};
