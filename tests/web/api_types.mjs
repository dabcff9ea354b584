// web/src/api.ts against the proto it mirrors: every field of each TypeScript interface that
// stands for an adctl.v1 message exists in that message, under the same name, with the type the
// proto3 JSON mapping gives it (int64 → Int, 32-bit ints and doubles → number, bool → boolean,
// string and enums → string, messages → their interface, repeated → T[], map → Record). A field
// renamed or retyped in the proto fails here, not on a user's page. No dependencies: both files
// are read as text.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const proto = fs.readFileSync(path.join(root, "proto/adctl/v1/job_service.proto"), "utf8");
const api = fs.readFileSync(path.join(root, "web/src/api.ts"), "utf8");

// TypeScript interface → the message it mirrors. Interfaces of HTTP-only answers (built in
// server/http/http_server.cc, covered by tests/web/e2e.mjs and the HTTP API tests) are listed
// as such, so that a new interface has to be placed in one list or the other.
const MIRRORS = {
  Progress: "Progress",
  Rank: "Rank",
  Job: "Job",
  JobEvent: "Event",
  MetricPoint: "MetricPoint",
  ArtifactFile: "ArtifactFile",
  Export: "Export",
  Checkpoint: "Checkpoint",
  Sample: "Sample",
};
const HTTP_ONLY = new Set(["Updates", "LogChunk"]);

function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
}

// message name → field name → {type, repeated, map}
function parseProto(text) {
  const messages = {};
  const enums = new Set();
  const body = stripComments(text);
  for (const m of body.matchAll(/\benum\s+(\w+)\s*\{/g)) enums.add(m[1]);
  // Top-level messages; nested braces (oneof) are flattened.
  const re = /\bmessage\s+(\w+)\s*\{/g;
  let m;
  while ((m = re.exec(body))) {
    let depth = 1;
    let i = re.lastIndex;
    while (depth > 0 && i < body.length) {
      if (body[i] === "{") depth++;
      else if (body[i] === "}") depth--;
      i++;
    }
    const inner = body.slice(re.lastIndex, i - 1);
    const fields = {};
    for (const f of inner.matchAll(
      /(repeated\s+|optional\s+)?(map<\s*\w+\s*,\s*\w+\s*>|[\w.]+)\s+(\w+)\s*=\s*\d+/g,
    )) {
      fields[f[3]] = { type: f[2].replace(/\s+/g, ""), repeated: (f[1] ?? "").trim() === "repeated" };
    }
    messages[m[1]] = fields;
  }
  return { messages, enums };
}

// interface name → field name → {type, optional}
function parseApi(text) {
  const out = {};
  const body = stripComments(text);
  for (const m of body.matchAll(/export\s+interface\s+(\w+)\s*\{([^}]*)\}/g)) {
    const fields = {};
    for (const f of m[2].matchAll(/(\w+)(\?)?\s*:\s*([^;]+);/g)) {
      fields[f[1]] = { type: f[3].trim(), optional: f[2] === "?" };
    }
    out[m[1]] = fields;
  }
  return out;
}

const SCALARS = {
  int64: "Int",
  uint64: "Int",
  sint64: "Int",
  fixed64: "Int",
  int32: "number",
  uint32: "number",
  sint32: "number",
  double: "number",
  float: "number",
  bool: "boolean",
  string: "string",
  bytes: "string",
};
const interfaceOf = Object.fromEntries(Object.entries(MIRRORS).map(([ts, msg]) => [msg, ts]));

function expectedTs(field, enums) {
  let t;
  const map = field.type.match(/^map<(\w+),(\w+)>$/);
  if (map) return `Record<string, ${SCALARS[map[2]] ?? interfaceOf[map[2]] ?? map[2]}>`;
  if (SCALARS[field.type]) t = SCALARS[field.type];
  else if (enums.has(field.type)) t = "string";
  else t = interfaceOf[field.type] ?? `(message ${field.type}, no interface)`;
  return field.repeated ? `${t}[]` : t;
}

const { messages, enums } = parseProto(proto);
const ifaces = parseApi(api);
const problems = [];
let checked = 0;
for (const name of Object.keys(ifaces)) {
  if (!MIRRORS[name] && !HTTP_ONLY.has(name)) {
    problems.push(`interface ${name}: neither mirrors a message (MIRRORS) nor is HTTP_ONLY`);
  }
}
for (const [ts, msg] of Object.entries(MIRRORS)) {
  if (!ifaces[ts]) problems.push(`interface ${ts}: not in web/src/api.ts`);
  if (!messages[msg]) problems.push(`message ${msg}: not in job_service.proto`);
  if (!ifaces[ts] || !messages[msg]) continue;
  for (const [field, f] of Object.entries(ifaces[ts])) {
    const p = messages[msg][field];
    if (!p) {
      problems.push(`${ts}.${field}: message ${msg} has no field '${field}'`);
      continue;
    }
    const want = expectedTs(p, enums);
    if (f.type !== want) problems.push(`${ts}.${field}: typed '${f.type}', the proto's ${p.type} is '${want}'`);
    checked++;
  }
}
if (checked < 60) problems.push(`only ${checked} fields checked: is the parser still reading the files?`);
if (problems.length) {
  console.error(`web/src/api.ts disagrees with proto/adctl/v1/job_service.proto:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(`api.ts: ${checked} fields of ${Object.keys(MIRRORS).length} interfaces match the proto`);
