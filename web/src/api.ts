// The adctld JSON API (docs/web.md): typed responses and one fetch helper that adds the bearer
// token and, when adctld answers 401, asks for the token once (kept in localStorage) and retries.
//
// The adctl.v1 message types are generated from proto/adctl/v1/job_service.proto into src/gen/
// by ts-proto (`npm run gen`, which build and typecheck run first; never committed), so a field
// added to the proto needs no change here. The generator's options (package.json) give the JSON
// adctld prints (proto/json.cc): the proto's field names, every scalar, repeated and map field
// present, enums by name, int64 as strings (hence `Int` and num()); message fields may be absent.
// Only the HTTP-only answers (Updates, LogChunk) are written here: tests/web/api_types.mjs
// (ctest web_api_types) checks that, and the generated types against the proto.
import type * as pb from "./gen/adctl/v1/job_service";

export type Int = string | number;

export const num = (v: Int | undefined): number => (v === undefined ? 0 : Number(v));

export type Progress = pb.Progress;
export type Rank = pb.Rank;
export type Job = pb.Job;
export type JobEvent = pb.Event;
export type MetricPoint = pb.MetricPoint; // one rank's step
export type ArtifactFile = pb.ArtifactFile;
export type Export = pb.Export;
export type Checkpoint = pb.Checkpoint;
export type Sample = pb.Sample;

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
  jobs: () => call<pb.ListJobsResponse>("GET", "/api/v1/jobs"),
  job: (id: string) => call<Job>("GET", jobPath(id)),
  events: (id: string) => call<pb.ListEventsResponse>("GET", `${jobPath(id)}/events`),
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
  checkpoints: (id: string) => call<pb.ListCheckpointsResponse>("GET", `${jobPath(id)}/checkpoints`),
  samples: (id: string) => call<pb.ListSamplesResponse>("GET", `${jobPath(id)}/samples`),
  exports: (id: string) => call<pb.ListExportsResponse>("GET", `${jobPath(id)}/exports`),
  // A job command (cancel, pause, resume: the page's list, job_view.ts), POST .../<command>.
  command: (id: string, command: string) => call<Job>("POST", `${jobPath(id)}/${command}`),
};
