/**
 * The TypeScript binding against the contract's tables as data (proto/tables/*.json,
 * docs/protocol.md §3.1 and §5.2): errors.ts has exactly the error table's classes and codes,
 * session.ts makes exactly the episode transitions of the data, the server answers every request
 * rule of the data before and after the handshake (raw gRPC streams on loopback), and grpc.ts
 * speaks the protocol version typescript/openenv-binding.json declares. A change to the tables
 * not made here fails.
 * The Python binding and the certifier check themselves against the same files.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { create, isFieldSet, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { jsonType } from "../src/codec.js";
import type { EnvStep, EnvironmentDefinition } from "../src/environment.js";
import * as errors from "../src/errors.js";
import { EnvError, ErrorCode } from "../src/errors.js";
import { CapabilitiesSchema, EpisodeStatus } from "../src/gen/openenv/v1/environment_pb.js";
import { echo } from "../src/envs/echo.js";
import { gridworld } from "../src/envs/gridworld.js";
import { tictactoe } from "../src/envs/tictactoe.js";
import { PROTOCOL_VERSION } from "../src/grpc.js";
import { Runtime, SessionManager, type Session } from "../src/session.js";
import { RawSession, withServer } from "./helpers.js";

/** The repository root, from typescript/dist/test/ (compiled) or typescript/test/. */
const ROOT = new URL(import.meta.url.includes("/dist/test/") ? "../../../" : "../../", import.meta.url);

function data<T>(path: string): T {
  return JSON.parse(readFileSync(new URL(path, ROOT), "utf8")) as T;
}

interface ErrorRow {
  name: string;
  number: number;
  class: string;
  retryable?: boolean;
  subclasses?: { class: string }[];
}

interface Transition {
  from: string[];
  event: string;
  auto_reset: boolean | null;
  to: string;
  answer: string;
  step_count: "0" | "+1" | "same";
}

type ErrorClass = new (message?: string) => EnvError;

/** Where errors.ts and the error table differ (empty: they agree). */
function errorDifferences(rows: ErrorRow[]): string[] {
  const out: string[] = [];
  const exported = new Map<string, ErrorClass>();
  for (const [name, value] of Object.entries(errors)) {
    if (typeof value === "function" && value.prototype instanceof EnvError) {
      exported.set(name, value as unknown as ErrorClass);
    }
  }
  const named = new Set<string>();
  for (const row of rows) {
    const enumValue = (ErrorCode as unknown as Record<string, number>)[row.name];
    if (enumValue !== row.number) {
      out.push(`${row.name}: the generated ErrorCode has ${enumValue}, the table ${row.number}`);
    }
    const cls = exported.get(row.class);
    if (cls === undefined) {
      out.push(`${row.name}: errors.ts exports no class ${row.class}`);
      continue;
    }
    named.add(row.class);
    const made = EnvError.fromCode(row.number, "x");
    if (new cls("x").code !== row.number || made.constructor !== cls) {
      out.push(`${row.name}: ${row.class}.code is ${new cls("x").code}, fromCode gives ${made.constructor.name}`);
    }
    if (made.retryable !== Boolean(row.retryable)) {
      out.push(`${row.name}: retryable is ${made.retryable} in errors.ts, ${Boolean(row.retryable)} in the table`);
    }
    for (const sub of row.subclasses ?? []) {
      named.add(sub.class);
      const subCls = exported.get(sub.class);
      if (subCls === undefined || !(subCls.prototype instanceof cls)) {
        out.push(`${row.name}: errors.ts exports no ${sub.class} extending ${row.class}`);
      }
    }
  }
  const extra = [...exported.keys()].filter((n) => !named.has(n)).sort();
  if (extra.length > 0) {
    out.push(`errors.ts exports classes the table does not name: ${extra.join(", ")}`);
  }
  const codes = Object.values(ErrorCode).filter((v): v is number => typeof v === "number" && v !== 0);
  const missing = codes.filter((c) => !rows.some((r) => r.number === c));
  if (missing.length > 0) {
    out.push(`openenv.v1.ErrorCode has codes the table lacks: ${missing.join(", ")}`);
  }
  return out;
}

describe("the error table (proto/tables/errors.json)", () => {
  const rows = data<{ codes: ErrorRow[] }>("proto/tables/errors.json").codes;

  it("is exactly errors.ts's classes and the generated ErrorCode", () => {
    assert.deepEqual(errorDifferences(rows), []);
  });

  it("a change to the table not made in errors.ts is caught", () => {
    const added = [...rows, { name: "OUT_OF_RANGE", number: 11, class: "OutOfRange" }];
    assert.ok(errorDifferences(added).some((d) => d.includes("errors.ts exports no class OutOfRange")));
    const renamed = rows.map((r) => (r.name === "INTERNAL" ? { ...r, class: "Boom" } : r));
    assert.ok(errorDifferences(renamed).includes("INTERNAL: errors.ts exports no class Boom"));
    const unretryable = rows.map((r) => (r.name === "UNAVAILABLE" ? { ...r, retryable: false } : r));
    assert.ok(errorDifferences(unretryable).includes("UNAVAILABLE: retryable is true in errors.ts, false in the table"));
    const dropped = rows.filter((r) => r.name !== "ABORTED");
    assert.ok(errorDifferences(dropped).some((d) => d.includes("does not name: Aborted")));
  });
});

// ----------------------------------------------------------------------------- state machine

/** A gate a hanging step waits on, opened by the test once the step's timeout answered. */
let release: () => void = () => undefined;

class Machine {
  reset(): EnvStep<JsonValue> {
    return { observation: { ready: true } };
  }

  async step(action: JsonValue): Promise<EnvStep<JsonValue>> {
    const op = (action as JsonObject).op;
    if (op === "hang") {
      await new Promise<void>((resolve) => { release = resolve; });
    }
    if (op === "invalid") {
      throw new errors.InvalidAction("not this one");
    }
    if (op === "raise") {
      throw new Error("boom");
    }
    return { observation: {}, terminated: op === "terminate", truncated: op === "truncate" };
  }
}

function definition(autoReset: boolean): EnvironmentDefinition<JsonValue, JsonValue> {
  return { name: "machine", action: jsonType(), observation: jsonType(), autoReset, create: () => new Machine() };
}

const TIMEOUT_MS = 50; // a hanging step never ends by itself: only its timeout answers it

const EVENT_ACTIONS: Record<string, (JsonObject | undefined)[]> = {
  step: [{ op: "go" }],
  step_terminates: [{ op: "terminate" }],
  step_truncates: [{ op: "truncate" }],
  step_times_out: [{ op: "hang" }],
  step_rejected: [{ op: "invalid" }, { op: "raise" }],
  step_not_running: [{ op: "go" }],
};

type S = Session<JsonValue, JsonValue, undefined>;

async function enter(s: S, status: string): Promise<void> {
  if (status === "NOT_STARTED") {
    return;
  }
  await s.reset(undefined, undefined, {});
  if (status === "TERMINATED" || status === "TRUNCATED") {
    await s.step({ op: status === "TERMINATED" ? "terminate" : "truncate" }, undefined);
  } else if (status === "ABORTED") {
    await assert.rejects(s.step({ op: "hang" }, TIMEOUT_MS), errors.DeadlineExceeded);
    release();
  }
}

async function apply(s: S, event: string, action: JsonObject | undefined): Promise<unknown> {
  try {
    if (event === "reset") {
      return await s.reset(undefined, undefined, {});
    }
    if (event === "state") {
      return await s.state();
    }
    return await s.step(action as JsonValue, event === "step_times_out" ? TIMEOUT_MS : undefined);
  } catch (e) {
    return e;
  } finally {
    release(); // a hanging step ends once its timeout has answered
  }
}

/** Where session.ts and the transitions differ (empty: they agree). */
async function transitionFailures(transitions: Transition[]): Promise<string[]> {
  const out: string[] = [];
  for (const t of transitions) {
    for (const autoReset of t.auto_reset === null ? [false, true] : [t.auto_reset]) {
      const manager = new SessionManager(new Runtime(definition(autoReset)));
      for (const source of t.from) {
        for (const action of EVENT_ACTIONS[t.event] ?? [undefined]) {
          const s = (await manager.open({}, "tables-test")) as S;
          await enter(s, source);
          const before = await s.state();
          const answer = await apply(s, t.event, action);
          const after = await s.state();
          await s.close();
          const where = `${source} --${t.event}${action ? `/${String(action.op)}` : ""} (auto_reset ${autoReset})`;
          const allowed = t.answer.split("|");
          if (answer instanceof EnvError) {
            if (!allowed.includes(ErrorCode[answer.code] ?? "") || answer.fatal) {
              out.push(`${where}: answered ${answer.toString()} (the table: ${t.answer})`);
            }
          } else if (!allowed.some((a) => ["time_step", "reset_time_step", "state"].includes(a))) {
            out.push(`${where}: answered without an error, the table says ${t.answer}`);
          }
          const to = t.to === "same" ? EpisodeStatus[before.status] : t.to;
          if (EpisodeStatus[after.status] !== to) {
            out.push(`${where}: status ${EpisodeStatus[after.status]}, the table says ${to}`);
          }
          const want = { "0": 0, "+1": before.stepCount + 1, same: before.stepCount }[t.step_count];
          if (after.stepCount !== want) {
            out.push(`${where}: step_count ${after.stepCount}, the table says ${t.step_count} (was ${before.stepCount})`);
          }
          if (t.step_count === "same" && after.episodeId !== before.episodeId) {
            out.push(`${where}: the episode id changed`);
          }
          if (t.step_count === "0" && (after.episodeId === "" || after.episodeId === before.episodeId)) {
            out.push(`${where}: no new episode id`);
          }
        }
      }
      await manager.shutdown();
    }
  }
  return out;
}

describe("the episode state machine (proto/tables/sessions.json)", () => {
  const transitions = data<{ episode_transitions: Transition[] }>("proto/tables/sessions.json").episode_transitions;

  it("session.ts makes every transition of the table", async () => {
    assert.deepEqual(await transitionFailures(transitions), []);
  });

  it("a transition session.ts does not make is caught", async () => {
    const timeout = transitions.find((t) => t.event === "step_times_out")!;
    const failures = await transitionFailures([{ ...timeout, to: "RUNNING", answer: "INTERNAL" }]);
    assert.ok(failures.some((f) => f.includes("status ABORTED, the table says RUNNING")), failures.join("\n"));
    assert.ok(failures.some((f) => f.includes("answered DEADLINE_EXCEEDED")), failures.join("\n"));
  });
});

// ----------------------------------------------------------------------------- request rules

interface Rule {
  requests: string[];
  awaiting_handshake: { error?: string; fatal?: boolean; answer?: string };
  open: { error?: string; fatal?: boolean; answer?: string };
}

/** A valid request of `kind` for the echo environment ("": no kind set). */
function request(kind: string, id: number): Parameters<RawSession["send"]>[0] {
  const value: Record<string, object> = {
    handshake: { protocolVersion: PROTOCOL_VERSION, clientName: "tables-test" },
    step: { action: { kind: { case: "json", value: { kind: { case: "nullValue", value: 0 } } } } },
    call_tool: { name: "echo_message", arguments: { message: "hi" } },
  };
  const cases: Record<string, string> = { list_tools: "listTools", call_tool: "callTool" };
  if (kind === "") {
    return { requestId: BigInt(id) };
  }
  return { requestId: BigInt(id), kind: { case: cases[kind] ?? kind, value: value[kind] ?? {} } } as Parameters<
    RawSession["send"]
  >[0];
}

const SNAKE: Record<string, string> = { listTools: "list_tools", callTool: "call_tool" };

/** Where the TypeScript server and the request rules differ (empty: they agree). */
async function ruleFailures(rules: Rule[]): Promise<string[]> {
  const out: string[] = [];
  await withServer(echo, {}, async (server) => {
    for (const rule of rules) {
      for (const kind of rule.requests) {
        for (const side of ["awaiting_handshake", "open"] as const) {
          const want = rule[side];
          const where = `${kind || "no kind"} in ${side.toUpperCase()}`;
          if (want.answer === "episode") {
            continue; // the episode transitions say (tested above)
          }
          const s = new RawSession(server.address);
          try {
            if (side === "open") {
              s.send(request("handshake", 1));
              const hs = await s.recv();
              assert.equal(hs?.kind.case, "handshake");
            }
            s.send(request(kind, 7));
            const resp = await s.recv();
            const got = resp === undefined ? "end of stream" : (SNAKE[resp.kind.case ?? ""] ?? resp.kind.case);
            if (want.error !== undefined) {
              const code = resp?.kind.case === "error" ? ErrorCode[resp.kind.value.code] : got;
              const fatal = resp?.kind.case === "error" ? resp.kind.value.fatal : undefined;
              if (code !== want.error || fatal !== want.fatal) {
                out.push(`${where}: answered ${code} (fatal ${fatal}), the table ${JSON.stringify(want)}`);
              } else if (want.fatal) {
                const end = await s.ended();
                if (end.code !== 0) {
                  out.push(`${where}: after the fatal error the stream ended with status ${end.code}`);
                }
              }
            } else if (got !== (kind || undefined)) {
              out.push(`${where}: answered ${got}, the table says its own kind`);
            }
          } finally {
            s.close();
          }
        }
      }
    }
  });
  return out;
}

describe("the request rules (proto/tables/sessions.json)", () => {
  const rules = data<{ request_rules: Rule[] }>("proto/tables/sessions.json").request_rules;

  it("the server answers every request kind as the table says, before and after the handshake", async () => {
    assert.deepEqual(await ruleFailures(rules), []);
  });

  it("a rule the server does not follow is caught", async () => {
    const lenient = rules.slice(1, 2).map((r) => ({ ...r, awaiting_handshake: { error: "FAILED_PRECONDITION", fatal: false } }));
    assert.deepEqual(await ruleFailures(lenient), [
      'reset in AWAITING_HANDSHAKE: answered FAILED_PRECONDITION (fatal true), the table {"error":"FAILED_PRECONDITION","fatal":false}',
    ]);
  });
});

describe("the declaration (typescript/openenv-binding.json)", () => {
  it("states the protocol version grpc.ts speaks, and only known features", () => {
    const decl = data<{ protocol_version: string; features: string[] }>("typescript/openenv-binding.json");
    assert.equal(decl.protocol_version, PROTOCOL_VERSION);
    const known = new Set(data<{ features: { id: string }[] }>("proto/tables/features.json").features.map((f) => f.id));
    assert.deepEqual(decl.features.filter((f) => !known.has(f)), []);
  });

  it("is no older than what the servers advertise, nor newer than the contract", async () => {
    // What the TypeScript servers of the shipped environments advertise (every Capabilities
    // field set, by the environment or the server) belongs to a feature the declaration names,
    // of a minor no newer than PROTOCOL_VERSION: a binding advertises only what it implements.
    type Row = { id: string; minor: string | null; capabilities: string[] };
    const decl = data<{ features: string[] }>("typescript/openenv-binding.json");
    const rows = data<{ features: Row[] }>("proto/tables/features.json").features;
    const minor = (v: string): number => Number(v.split(".")[1]);
    const newest = Math.max(...rows.filter((r) => r.minor !== null).map((r) => minor(r.minor!)));
    assert.ok(minor(PROTOCOL_VERSION) <= newest, `${PROTOCOL_VERSION} is newer than the contract's 1.${newest}`);
    const featureOf = new Map(rows.flatMap((r) => r.capabilities.map((c) => [c, r] as const)));
    const advertised = new Set<string>();
    for (const def of [gridworld, echo, tictactoe] as EnvironmentDefinition<unknown, unknown, unknown>[]) {
      await withServer(def, {}, async (server) => {
        const caps = create(CapabilitiesSchema, server.runtime.info.capabilities);
        for (const field of CapabilitiesSchema.fields) {
          if (isFieldSet(caps, field)) {
            advertised.add(field.name);
          }
        }
      });
    }
    const out: string[] = [];
    for (const name of [...advertised].sort()) {
      const row = featureOf.get(name);
      if (row === undefined) {
        out.push(`${name}: in no feature row`);
      } else if (!decl.features.includes(row.id)) {
        out.push(`${name}: advertised, but feature ${row.id} is not declared`);
      } else if (row.minor !== null && minor(row.minor) > minor(PROTOCOL_VERSION)) {
        out.push(`${name}: feature ${row.id} is of ${row.minor}, newer than ${PROTOCOL_VERSION}`);
      }
    }
    assert.deepEqual(out, []);
    assert.ok(advertised.has("seat_events") && !advertised.has("grades"), [...advertised].join(", "));
  });
});
