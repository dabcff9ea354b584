// The page's API types against the proto. web/src/api.ts takes the adctl.v1 message types from
// web/src/gen/ (generated from proto/adctl/v1/job_service.proto by ts-proto: `npm run gen`, which
// the web target's build runs first); this checks the three things tsc cannot:
//  1. nobody writes a second list: api.ts declares interfaces only for the HTTP-only answers
//     (HTTP_ONLY), and no file of web/src declares an interface or object type named after a
//     message;
//  2. every message or enum the page names (`pb.X`, imports from ./gen/) is a message or enum
//     of the proto, exported by the generated file;
//  3. the generator's options (web/package.json, "gen") give the types of adctld's JSON
//     (proto/json.cc: preserve_proto_field_names, always_print_primitive_fields): every field
//     of every message under its proto name, int64 → string, 32-bit ints and doubles → number,
//     bool → boolean, string → string, enums → their names, messages (and proto3 `optional`
//     and oneof members, which adctld leaves out when unset) optional, repeated → T[], map →
//     an index signature; the messages the page reads carry no bytes field (typed Uint8Array,
//     while the JSON has base64 strings).
// Reads the files as text; no dependencies.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const src = path.join(root, "web/src");
const genFile = path.join(src, "gen/adctl/v1/job_service.ts");
const proto = fs.readFileSync(path.join(root, "proto/adctl/v1/job_service.proto"), "utf8");
if (!fs.existsSync(genFile)) {
  console.error(`${path.relative(root, genFile)} is missing: build the web target (npm run gen) first`);
  process.exit(1);
}
const gen = fs.readFileSync(genFile, "utf8");
const pageFiles = fs
  .readdirSync(src)
  .filter((f) => f.endsWith(".ts"))
  .map((f) => ({ name: f, text: fs.readFileSync(path.join(src, f), "utf8") }));

// Answers that no message describes (built in server/http/http_server.cc, covered by
// tests/web/e2e.mjs and the HTTP API tests). LogChunk shares its name with the gRPC
// StreamLogs message, but the HTTP answer has other fields (exists, offset, size, job_state).
const HTTP_ONLY = new Set(["Updates", "LogChunk"]);

function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "");
}

// The text between the brace that `re` (global, ending in "{") matched and its closing brace,
// for each match: [match, body].
function* blocks(text, re) {
  let m;
  while ((m = re.exec(text))) {
    let depth = 1;
    let i = re.lastIndex;
    while (depth > 0 && i < text.length) {
      if (text[i] === "{") depth++;
      else if (text[i] === "}") depth--;
      i++;
    }
    yield [m, text.slice(re.lastIndex, i - 1)];
  }
}

// message name → field name → {type, repeated, optional (has presence in JSON)}; enum → values.
function parseProto(text) {
  const messages = {};
  const enums = {};
  const body = stripComments(text);
  for (const [m, inner] of blocks(body, /\benum\s+(\w+)\s*\{/g)) {
    enums[m[1]] = [...inner.matchAll(/(\w+)\s*=\s*-?\d+/g)].map((v) => v[1]);
  }
  for (const [m, inner] of blocks(body, /\bmessage\s+(\w+)\s*\{/g)) {
    const oneofFields = new Set();
    for (const [, o] of blocks(inner, /\boneof\s+\w+\s*\{/g)) {
      for (const f of o.matchAll(/[\w.]+\s+(\w+)\s*=\s*\d+/g)) oneofFields.add(f[1]);
    }
    const fields = {};
    for (const f of inner.matchAll(/(repeated\s+|optional\s+)?(map<\s*\w+\s*,\s*\w+\s*>|[\w.]+)\s+(\w+)\s*=\s*\d+/g)) {
      const label = (f[1] ?? "").trim();
      fields[f[3]] = {
        type: f[2].replace(/\s+/g, ""),
        repeated: label === "repeated",
        optional: label === "optional" || oneofFields.has(f[3]),
      };
    }
    messages[m[1]] = fields;
  }
  return { messages, enums };
}

// The generated file: interface name → field name → {type, optional}; enum const → its entries.
function parseGenerated(text) {
  const interfaces = {};
  const enums = {};
  const body = stripComments(text);
  for (const [m, inner] of blocks(body, /export\s+interface\s+(\w+)\s*\{/g)) {
    const fields = {};
    for (const f of inner.matchAll(/(\w+)(\?)?\s*:\s*([^;]+);/g)) {
      const type = f[3]
        .split("|")
        .map((t) => t.replace(/\s+/g, " ").trim())
        .filter((t) => t && t !== "undefined")
        .join(" | ");
      fields[f[1]] = { type, optional: f[2] === "?" };
    }
    interfaces[m[1]] = fields;
  }
  for (const [m, inner] of blocks(body, /export\s+const\s+(\w+)\s*=\s*\{/g)) {
    enums[m[1]] = Object.fromEntries([...inner.matchAll(/(\w+)\s*:\s*"([^"]*)"/g)].map((e) => [e[1], e[2]]));
  }
  return { interfaces, enums };
}

const SCALARS = {
  int64: "string",
  uint64: "string",
  sint64: "string",
  fixed64: "string",
  sfixed64: "string",
  int32: "number",
  uint32: "number",
  sint32: "number",
  fixed32: "number",
  sfixed32: "number",
  double: "number",
  float: "number",
  bool: "boolean",
  string: "string",
  bytes: "Uint8Array",
};

const { messages, enums } = parseProto(proto);
const generated = parseGenerated(gen);
const problems = [];

// 1. No second list.
const messageNames = new Set(Object.keys(messages));
for (const { name, text } of pageFiles) {
  const body = stripComments(text);
  for (const m of body.matchAll(/\b(?:interface\s+(\w+)\s*(?:extends[^{]*)?\{|type\s+(\w+)\s*=\s*\{)/g)) {
    const decl = m[1] ?? m[2];
    if (name === "api.ts") {
      if (!HTTP_ONLY.has(decl)) {
        problems.push(`api.ts: interface ${decl} is not HTTP_ONLY: take the message type from ./gen/ instead`);
      }
    } else if (messageNames.has(decl)) {
      problems.push(`${name}: ${decl} is a message of the proto: use api.ts's (generated) type`);
    }
  }
}

// 2. What the page names exists, in the proto and in the generated file.
const used = new Set();
for (const { name, text } of pageFiles) {
  const body = stripComments(text);
  for (const m of body.matchAll(/\bpb\.(\w+)/g)) used.add(m[1]);
  for (const m of body.matchAll(/import\s+(?:type\s+)?\{([^}]*)\}\s+from\s+"\.\/gen\/[^"]*"/g)) {
    for (const n of m[1].split(",")) {
      const id = n.replace(/^\s*type\s+/, "").split(/\s+as\s+/)[0].trim();
      if (id) used.add(id);
    }
  }
  if (name === "api.ts" && !/from\s+"\.\/gen\/adctl\/v1\/job_service"/.test(body)) {
    problems.push("api.ts: does not import ./gen/adctl/v1/job_service");
  }
}
for (const n of used) {
  if (!messages[n] && !enums[n]) problems.push(`pb.${n}: no message or enum ${n} in job_service.proto`);
  else if (!generated.interfaces[n] && !generated.enums[n]) problems.push(`pb.${n}: not in the generated file`);
}
if (used.size < 10) {
  problems.push(`the page names only ${used.size} generated types: is the parser still reading api.ts?`);
}

// 3. The generated types are adctld's JSON. Enums: their names, nothing else.
for (const [e, values] of Object.entries(enums)) {
  const g = generated.enums[e];
  if (!g || !Object.keys(g).length) {
    problems.push(`enum ${e}: not in the generated file as a string-valued const (stringEnums, enumsAsLiterals)`);
    continue;
  }
  const want = values.map((v) => `${v}:${v}`).join(" ");
  const got = Object.entries(g)
    .map(([k, v]) => `${k}:${v}`)
    .join(" ");
  if (got !== want) problems.push(`enum ${e}: generated as {${got}}, adctld prints {${values.join(" ")}}`);
}

function expectedTs(field) {
  const map = field.type.match(/^map<(\w+),(\w+)>$/);
  if (map) return `{ [key: string]: ${SCALARS[map[2]] ?? map[2]} }`;
  const t = SCALARS[field.type] ?? field.type; // an enum or a message: its own name
  return field.repeated ? `${t}[]` : t;
}

let checked = 0;
for (const [msg, fields] of Object.entries(messages)) {
  const g = generated.interfaces[msg];
  if (!g) {
    problems.push(`message ${msg}: no interface in the generated file`);
    continue;
  }
  for (const [field, f] of Object.entries(fields)) {
    const got = g[field];
    if (!got) {
      problems.push(`${msg}.${field}: not in the generated interface (snakeToCamel=false?)`);
      continue;
    }
    const want = expectedTs(f);
    if (got.type !== want) problems.push(`${msg}.${field}: generated '${got.type}', adctld's JSON is '${want}'`);
    const optional = f.optional || (!!messages[f.type] && !f.repeated);
    if (got.optional !== optional) {
      const json = optional ? "may leave it out" : "always prints it";
      problems.push(`${msg}.${field}: generated ${got.optional ? "optional" : "required"}, adctld ${json}`);
    }
    checked++;
  }
  for (const field of Object.keys(g)) {
    if (!fields[field]) problems.push(`${msg}.${field}: generated, but not a field of the message`);
  }
}
if (checked < 200) problems.push(`only ${checked} fields checked: is the parser still reading the files?`);

// The messages the page reads, and those they hold: no bytes field.
const reach = [...used].filter((n) => messages[n]);
for (let i = 0; i < reach.length; i++) {
  for (const [field, f] of Object.entries(messages[reach[i]])) {
    const inner = f.type.match(/^map<\w+,(\w+)>$/)?.[1] ?? f.type;
    if (inner === "bytes") {
      problems.push(`${reach[i]}.${field}: bytes, typed Uint8Array, but the JSON has a base64 string`);
    }
    if (messages[inner] && !reach.includes(inner)) reach.push(inner);
  }
}

if (problems.length) {
  console.error(`web/src's API types disagree with proto/adctl/v1/job_service.proto:\n  ${problems.join("\n  ")}`);
  process.exit(1);
}
console.log(
  `api.ts: ${used.size} generated types, no hand-written mirror; the generated file: ${checked} fields of ` +
    `${Object.keys(messages).length} messages and ${Object.keys(enums).length} enum(s) match adctld's JSON`,
);
