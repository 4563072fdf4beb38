/**
 * Sessions: one environment instance, its episode state machine and its lifecycle
 * (docs/protocol.md §3), mirroring the Python reference runtime (openenv.session).
 *
 * Nothing here knows about gRPC: server.ts translates wire requests into calls on
 * {@link Session} / {@link VectorSession}, obtained from a {@link SessionManager} that
 * enforces capacity, reaps idle sessions and drains on shutdown.
 */

import { createHmac, randomBytes, randomUUID, timingSafeEqual } from "node:crypto";
import { create, isMessage, toBinary, type JsonObject } from "@bufbuild/protobuf";
import { DurationSchema } from "@bufbuild/protobuf/wkt";
import { anyType, descriptorSet, type PayloadCodec } from "./codec.js";
import type { EnvStep, Environment, EnvironmentDefinition } from "./environment.js";
import {
  DeadlineExceeded,
  EnvError,
  FailedPrecondition,
  Internal,
  InvalidArgument,
  ResourceExhausted,
  Unavailable,
  Unimplemented,
  internalError,
} from "./errors.js";
import {
  AutoresetMode,
  EnvironmentInfoSchema,
  EpisodeStatus,
  SnapshotSchema,
  TimeStepSchema,
  type EnvironmentInfo,
  type Snapshot,
  type TimeStep,
} from "./gen/openenv/v1/environment_pb.js";
import {
  CallToolRequestSchema,
  CallToolResponseSchema,
  type CallToolResponse,
  type Tool,
  type ToolResult,
} from "./gen/openenv/v1/tool_pb.js";
import { DEFAULT_IDLE_TIMEOUT_MS, DEFAULT_MAX_MESSAGE_BYTES, PROTOCOL_VERSION } from "./grpc.js";
import { ToolSet, errorResult, toolResult } from "./tools.js";

/** The snapshot format this runtime writes and reads (RFC 0006). */
const SNAPSHOT_FORMAT = 1;

/** Server-side limits (the capabilities the server, not the environment, decides). */
export interface RuntimeOptions {
  /** Capacity (default: the definition's `maxSessions`, else 64). */
  maxSessions?: number;
  /** Largest message accepted and sent (default 4 MiB). */
  maxMessageBytes?: number;
  /** Sessions idle for longer are ended with DEADLINE_EXCEEDED (default 300 s; 0 disables). */
  idleTimeoutMs?: number;
  /** Largest vectorised session (default: the capacity). */
  maxNumEnvs?: number;
  /** Production mode: only tools are reachable; reset, step and state answer UNIMPLEMENTED. */
  toolsOnly?: boolean;
}

/** A time step as the runtime completes it: episode id and step count filled in. */
export interface StepOutcome<O> extends EnvStep<O> {
  episodeId: string;
  stepCount: number;
}

/** What a state request returns. */
export interface StateOutcome<S> {
  episodeId: string;
  stepCount: number;
  status: EpisodeStatus;
  state: S | undefined;
}

function uuidHex(): string {
  return randomUUID().replaceAll("-", "");
}

function checkReward(r: unknown): number | undefined {
  if (r === undefined || r === null) {
    return undefined;
  }
  if (typeof r === "boolean") {
    return r ? 1 : 0;
  }
  if (typeof r === "number") {
    return r;
  }
  throw new TypeError(`reward must be a number or undefined, got ${typeof r}`);
}

/** Everything derived once per environment definition: codecs, limits, EnvironmentInfo. */
export class Runtime<A, O, S> {
  readonly actionCodec: PayloadCodec<A>;
  readonly observationCodec: PayloadCodec<O>;
  readonly stateCodec: PayloadCodec<S>;
  readonly maxSessions: number;
  readonly maxMessageBytes: number;
  readonly idleTimeoutMs: number;
  readonly maxNumEnvs: number;
  readonly tools: ToolSet<Environment<A, O, S>>;
  readonly toolsOnly: boolean;
  readonly info: EnvironmentInfo;
  /** The key that seals snapshots (RFC 0006): OPENENV_SNAPSHOT_KEY, else random per process. */
  readonly snapshotKey: Buffer;

  constructor(readonly def: EnvironmentDefinition<A, O, S>, opts: RuntimeOptions = {}) {
    this.actionCodec = def.action;
    this.observationCodec = def.observation;
    this.stateCodec = def.state ?? (anyType() as unknown as PayloadCodec<S>);
    let cap = opts.maxSessions ?? def.maxSessions ?? 64;
    if (def.concurrentSessions === false) {
      if (opts.maxSessions !== undefined && opts.maxSessions > 1) {
        throw new Error(`${def.name} declares concurrentSessions = false; maxSessions must be 1, not ${opts.maxSessions}`);
      }
      cap = 1;
    }
    if (!Number.isInteger(cap) || cap < 1) {
      throw new Error("maxSessions must be an integer >= 1");
    }
    this.maxSessions = cap;
    this.maxMessageBytes = opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE_BYTES;
    this.idleTimeoutMs = opts.idleTimeoutMs ?? DEFAULT_IDLE_TIMEOUT_MS;
    this.maxNumEnvs = Math.min(opts.maxNumEnvs ?? cap, cap);
    this.tools = new ToolSet(def.tools ?? []);
    this.toolsOnly = opts.toolsOnly ?? false;
    if (this.toolsOnly && this.tools.size === 0) {
      throw new Error(`${def.name} has no tools: it cannot be served in tools-only mode`);
    }
    const key = process.env.OPENENV_SNAPSHOT_KEY;
    this.snapshotKey = key ? Buffer.from(key, "utf8") : randomBytes(32);
    this.info = this.buildInfo();
  }

  /** HMAC-SHA256 of a snapshot's fields 1-8 under the snapshot key. */
  seal(snap: Snapshot): Uint8Array {
    const body = create(SnapshotSchema, { ...snap, digest: new Uint8Array() });
    return createHmac("sha256", this.snapshotKey).update(toBinary(SnapshotSchema, body)).digest();
  }

  private buildInfo(): EnvironmentInfo {
    const d = this.def;
    const agentCodecs = [...Object.values(d.multiAgent?.agentActions ?? {}), ...Object.values(d.multiAgent?.agentObservations ?? {})];
    const messages = [this.actionCodec, this.observationCodec, this.stateCodec, ...agentCodecs].flatMap((c) => c.messages);
    const idleS = Math.floor(this.idleTimeoutMs / 1000);
    return create(EnvironmentInfoSchema, {
      name: d.name,
      version: d.version ?? "0.1.0",
      description: d.description ?? "",
      protocolVersion: PROTOCOL_VERSION,
      action: this.actionCodec.spec(d.exampleActions ?? []),
      observation: this.observationCodec.spec(),
      state: this.stateCodec.spec(),
      descriptors: messages.length > 0 ? descriptorSet(messages) : undefined,
      capabilities: {
        maxSessions: this.maxSessions,
        concurrentSessions: d.concurrentSessions ?? true,
        deterministic: d.deterministic ?? false,
        floatTolerance: d.floatTolerance ?? 0,
        autoReset: d.autoReset ?? false,
        tools: this.tools.size > 0,
        toolsOnly: this.toolsOnly,
        maxMessageBytes: BigInt(this.maxMessageBytes),
        maxEpisodeSteps: d.maxEpisodeSteps === undefined ? undefined : BigInt(d.maxEpisodeSteps),
        rewardMin: d.rewardRange?.[0],
        rewardMax: d.rewardRange?.[1],
        idleTimeout: create(DurationSchema, {
          seconds: BigInt(idleS), nanos: Math.round((this.idleTimeoutMs - idleS * 1000) * 1e6),
        }),
        actionBudget: d.actionBudget ?? 0,
        maxNumEnvs: this.maxNumEnvs > 1 && d.multiAgent === undefined ? this.maxNumEnvs : 0, // no vectorised worlds
        snapshots: d.snapshots ?? false,
        seeded: d.seeded ?? false,
        multiAgent: d.multiAgent !== undefined, // RFC 0012
        worldWaitTimeouts: d.multiAgent !== undefined, // RFC 0016: wait deadlines (world.ts)
        seatEvents: d.multiAgent !== undefined, // RFC 0016: seats announced, rejoin deadlines (world.ts)
      },
      multiAgent: d.multiAgent?.spec,
      rubric: d.rubric,
      metadata: d.metadata !== undefined && Object.keys(d.metadata).length > 0 ? d.metadata : undefined,
    });
  }

  /** Encode a completed time step. */
  timeStep(r: StepOutcome<O>): TimeStep {
    const meta = r.metadata;
    return create(TimeStepSchema, {
      observation: r.observation === undefined ? undefined : this.observationCodec.encode(r.observation),
      reward: r.reward,
      terminated: r.terminated ?? false,
      truncated: r.truncated ?? false,
      metadata: meta !== undefined && Object.keys(meta).length > 0 ? meta : undefined,
      rewardBreakdown: r.reward === undefined ? undefined : r.rewardBreakdown,
      episodeId: r.episodeId,
      stepCount: BigInt(r.stepCount),
    });
  }
}

/** One client's session: an environment instance and its episode state. */
export class Session<A, O, S> {
  readonly id = uuidHex();
  episodeId = "";
  stepCount = 0;
  status: EpisodeStatus = EpisodeStatus.NOT_STARTED;
  lastActive = Date.now();
  busy = false;
  closed = false;
  private straggler: Promise<unknown> | undefined; // work that outlived its timeout
  private onTerminate: ((err: EnvError) => void) | undefined;

  constructor(readonly manager: SessionManager<A, O, S>, readonly env: Environment<A, O, S>,
              readonly clientName: string) {}

  get runtime(): Runtime<A, O, S> {
    return this.manager.runtime;
  }

  /** Register how the transport ends this session's stream (idle timeout, drain). */
  setTerminate(callback: (err: EnvError) => void): void {
    this.onTerminate = callback;
  }

  /** Ask the transport to end the session with `err` (fatal). */
  terminate(err: EnvError): void {
    err.fatal = true;
    if (this.onTerminate !== undefined && !this.closed) {
      this.onTerminate(err);
    }
  }

  /** Run one environment call, never overlapping a call that outlived its timeout. */
  async call<T>(fn: () => T | Promise<T>, timeoutMs: number | undefined, what: string): Promise<T> {
    if (this.straggler !== undefined) {
      await this.straggler;
      this.straggler = undefined;
    }
    const work = Promise.resolve().then(fn);
    if (timeoutMs === undefined) {
      return await work;
    }
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<"expired">((resolve) => {
      timer = setTimeout(() => resolve("expired"), timeoutMs);
    });
    try {
      const winner = await Promise.race([work.then((v) => ({ v })), expired]);
      if (winner === "expired") {
        this.straggler = work.catch(() => undefined);
        throw new DeadlineExceeded(`${what} did not finish within ${timeoutMs / 1000} s`);
      }
      return winner.v;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Run one request: map environment exceptions to INTERNAL, track activity. */
  async guard<T>(fn: () => Promise<T>): Promise<T> {
    if (this.closed) {
      throw new FailedPrecondition("session is closed");
    }
    this.busy = true;
    try {
      return await fn();
    } catch (e) {
      throw internalError(e);
    } finally {
      this.busy = false;
      this.lastActive = Date.now();
    }
  }

  /** UNIMPLEMENTED for reset, step and state in tools-only mode. */
  requireSim(what: string): void {
    if (this.runtime.toolsOnly) {
      throw new Unimplemented(`${what} is not available: the server runs in tools-only mode`);
    }
  }

  /** Start a new episode (any status). */
  reset(seed: bigint | undefined, episodeId: string | undefined, options: JsonObject): Promise<StepOutcome<O>> {
    this.requireSim("reset");
    return this.guard(() => this.doReset(seed, episodeId, options));
  }

  private async doReset(seed: bigint | undefined, episodeId: string | undefined,
                        options: JsonObject): Promise<StepOutcome<O>> {
    const eid = episodeId || uuidHex();
    const out = await this.call(() => this.env.reset({ seed, episodeId: eid, options }), undefined, "reset");
    const reward = checkReward(out.reward);
    this.episodeId = eid;
    this.stepCount = 0;
    this.status = out.terminated ? EpisodeStatus.TERMINATED
      : out.truncated ? EpisodeStatus.TRUNCATED : EpisodeStatus.RUNNING;
    return { ...out, reward, episodeId: eid, stepCount: 0 };
  }

  /** Advance the episode (the action is already decoded and validated). */
  step(action: A, timeoutMs: number | undefined): Promise<StepOutcome<O>> {
    this.requireSim("step");
    return this.guard(() => this.doStep(action, timeoutMs));
  }

  private async doStep(action: A, timeoutMs: number | undefined): Promise<StepOutcome<O>> {
    if (this.status !== EpisodeStatus.RUNNING) {
      if (this.runtime.def.autoReset) { // from every status, NOT_STARTED included (protocol §3.1, §3.5)
        return await this.doReset(undefined, undefined, {});
      }
      if (this.status === EpisodeStatus.NOT_STARTED) {
        throw new FailedPrecondition("step before reset: call reset first");
      }
      throw new FailedPrecondition(
        `the episode is over (${EpisodeStatus[this.status].toLowerCase()}): call reset first`);
    }
    let out: EnvStep<O>;
    try {
      const step = this.env.step;
      if (step !== undefined) {
        out = await this.call(() => step.call(this.env, action), timeoutMs, "step");
      } else if (this.runtime.tools.size > 0) {
        out = await this.toolStep(action, timeoutMs) as EnvStep<O>;
      } else {
        throw new Unimplemented(`${this.runtime.def.name} does not implement step`);
      }
    } catch (e) {
      if (e instanceof DeadlineExceeded) {
        this.status = EpisodeStatus.ABORTED;
      }
      throw e;
    }
    const reward = checkReward(out.reward);
    this.stepCount += 1;
    const limit = this.runtime.def.maxEpisodeSteps;
    const truncated = (out.truncated ?? false)
      || (limit !== undefined && this.stepCount >= limit && !out.terminated);
    if (out.terminated) {
      this.status = EpisodeStatus.TERMINATED;
    } else if (truncated) {
      this.status = EpisodeStatus.TRUNCATED;
    }
    return { ...out, reward, truncated, episodeId: this.episodeId, stepCount: this.stepCount };
  }

  /** The default tool step: run the tool a CallToolRequest action names (§6). */
  private async toolStep(action: unknown, timeoutMs: number | undefined): Promise<EnvStep<CallToolResponse>> {
    if (!isMessage(action, CallToolRequestSchema)) {
      throw new InvalidArgument("expected an openenv.v1.CallToolRequest action (this environment's steps are tool calls)");
    }
    const toolTimeout = action.timeout === undefined ? timeoutMs
      : Number(action.timeout.seconds) * 1000 + action.timeout.nanos / 1e6;
    const result = await this.doCallTool(action.name, action.arguments ?? {}, toolTimeout);
    const observation = create(CallToolResponseSchema, { name: action.name, result });
    const finish = this.env.finishToolStep;
    return finish === undefined ? { observation }
      : await this.call(() => finish.call(this.env, action, observation), undefined, "finishToolStep");
  }

  /** The environment's tools; UNIMPLEMENTED without tools. */
  listTools(): Tool[] {
    if (this.runtime.tools.size === 0) {
      throw new Unimplemented(`${this.runtime.def.name} has no tools`);
    }
    this.lastActive = Date.now();
    return this.runtime.tools.descriptors();
  }

  /** A side call of a tool: no step counted, no reward, the episode unchanged. */
  callTool(name: string, args: JsonObject, timeoutMs: number | undefined): Promise<ToolResult> {
    if (this.runtime.tools.size === 0) {
      throw new Unimplemented(`${this.runtime.def.name} has no tools`);
    }
    return this.guard(() => this.doCallTool(name, args, timeoutMs));
  }

  private async doCallTool(name: string, args: JsonObject, timeoutMs: number | undefined): Promise<ToolResult> {
    const def = this.runtime.tools.resolve(name, args);
    const bounds = [timeoutMs, def.timeoutMs].filter((t): t is number => t !== undefined);
    const limit = bounds.length > 0 ? Math.min(...bounds) : undefined;
    try {
      return toolResult(await this.call(() => def.call(this.env, args), limit, `tool '${name}'`));
    } catch (e) {
      if (e instanceof EnvError) {
        throw e;
      }
      return errorResult(e); // a failing tool is a result, as in MCP
    }
  }

  /** The session's state, sealed (RFC 0006); UNIMPLEMENTED when the environment has none. */
  snapshot(): Promise<Snapshot> {
    const rt = this.runtime;
    const snapshotFn = this.env.snapshot;
    if (!rt.def.snapshots || snapshotFn === undefined || this.env.restore === undefined) {
      throw new Unimplemented(`${rt.def.name} does not offer snapshots (Capabilities.snapshots is false)`);
    }
    return this.guard(async () => {
      const data = await this.call(() => snapshotFn.call(this.env), undefined, "snapshot");
      const snap = create(SnapshotSchema, {
        format: SNAPSHOT_FORMAT, envName: rt.info.name, envVersion: rt.info.version,
        episodeId: this.episodeId, stepCount: BigInt(this.stepCount), status: this.status, environment: data,
      });
      snap.digest = rt.seal(snap);
      return snap;
    });
  }

  /** Replace the session's state with a snapshot's; a refused snapshot changes nothing. */
  restore(snap: Snapshot): Promise<void> {
    const rt = this.runtime;
    const restoreFn = this.env.restore;
    if (!rt.def.snapshots || restoreFn === undefined) {
      throw new Unimplemented(`${rt.def.name} does not offer snapshots (Capabilities.snapshots is false)`);
    }
    if (snap.envName !== rt.info.name || snap.envVersion !== rt.info.version) {
      throw new FailedPrecondition(`the snapshot is of environment ${JSON.stringify(snap.envName)} version ` +
        `${JSON.stringify(snap.envVersion)}; this server runs ${JSON.stringify(rt.info.name)} version ` +
        JSON.stringify(rt.info.version));
    }
    if (snap.format !== SNAPSHOT_FORMAT) {
      throw new InvalidArgument(`snapshot format ${snap.format} is not supported (this server reads format 1)`);
    }
    const want = Buffer.from(rt.seal(snap));
    const got = Buffer.from(snap.digest);
    if (got.length !== want.length || !timingSafeEqual(got, want)) {
      throw new InvalidArgument("the snapshot's digest does not verify: it was altered, or made by a server " +
        "with another snapshot key (set OPENENV_SNAPSHOT_KEY alike on replicas)");
    }
    if (EpisodeStatus[snap.status] === undefined || snap.status === EpisodeStatus.UNSPECIFIED) {
      throw new InvalidArgument(`the snapshot's episode status ${snap.status} is not a known status`);
    }
    return this.guard(async () => {
      await this.call(() => restoreFn.call(this.env, snap.environment), undefined, "restore");
      this.episodeId = snap.episodeId;
      this.stepCount = Number(snap.stepCount);
      this.status = snap.status;
    });
  }

  /** Episode id, step count, status and the environment-specific state. */
  state(): Promise<StateOutcome<S>> {
    this.requireSim("state");
    return this.guard(async () => {
      const st = this.env.state === undefined ? undefined
        : await this.call(() => this.env.state!(), undefined, "state");
      return { episodeId: this.episodeId, stepCount: this.stepCount, status: this.status, state: st };
    });
  }

  /** Close the environment instance (once) and free the slot. */
  close(): Promise<void> {
    return this.manager.release(this);
  }
}

/** N sessions behind one stream, stepped together (protocol §3.9). */
export class VectorSession<A, O, S> {
  readonly id: string;
  readonly autoresetMode: AutoresetMode;

  constructor(readonly sessions: Session<A, O, S>[], autoresetMode: AutoresetMode) {
    this.id = sessions[0]!.id;
    this.autoresetMode = autoresetMode === AutoresetMode.UNSPECIFIED ? AutoresetMode.DISABLED : autoresetMode;
  }

  get numEnvs(): number {
    return this.sessions.length;
  }

  setTerminate(callback: (err: EnvError) => void): void {
    this.sessions.forEach((s) => s.setTerminate(callback));
  }

  async close(): Promise<void> {
    for (const s of this.sessions) {
      await s.close();
    }
  }

  private ids(envIds: readonly number[]): number[] {
    const ids = envIds.length > 0 ? [...envIds] : this.sessions.map((_, i) => i);
    const bad = ids.filter((i) => i >= this.numEnvs);
    if (bad.length > 0) {
      throw new InvalidArgument(`env ids [${bad.join(", ")}] out of range: this session has ${this.numEnvs} instances`);
    }
    if (new Set(ids).size !== ids.length) {
      throw new InvalidArgument("env ids must not repeat within one request");
    }
    return ids;
  }

  private static async tag<T>(p: Promise<T>, envId: number): Promise<T> {
    try {
      return await p;
    } catch (e) {
      if (e instanceof EnvError) {
        e.message = `env ${envId}: ${e.message}`;
      }
      throw e;
    }
  }

  /** `optionsOf` (tasks, RFC 0004): the reset options of each of the `n` reset instances. */
  async reset(envIds: readonly number[], seeds: readonly bigint[], options: JsonObject,
              optionsOf?: (n: number) => JsonObject[]): Promise<[number[], StepOutcome<O>[]]> {
    const ids = this.ids(envIds);
    const perOptions = optionsOf?.(ids.length);
    let per: (bigint | undefined)[];
    if (seeds.length === 0) {
      per = ids.map(() => undefined);
    } else if (seeds.length === 1) {
      per = ids.map((_, k) => BigInt.asUintN(64, seeds[0]! + BigInt(k)));
    } else if (seeds.length === ids.length) {
      per = [...seeds];
    } else {
      throw new InvalidArgument(`${seeds.length} seeds for ${ids.length} instances: give 0, 1 or one per instance`);
    }
    const results: StepOutcome<O>[] = [];
    for (let k = 0; k < ids.length; k++) {
      const opts = perOptions?.[k] ?? options;
      results.push(await VectorSession.tag(this.sessions[ids[k]!]!.reset(per[k], undefined, opts), ids[k]!));
    }
    return [ids, results];
  }

  async step(envIds: readonly number[], actions: A[], timeoutMs: number | undefined):
    Promise<[number[], StepOutcome<O>[], Map<number, StepOutcome<O>>]> {
    const ids = this.ids(envIds);
    if (actions.length !== ids.length) {
      throw new InvalidArgument(`${actions.length} actions for ${ids.length} instances`);
    }
    const ended = ids.filter((i) => this.sessions[i]!.status !== EpisodeStatus.RUNNING);
    if (ended.length > 0 && this.autoresetMode !== AutoresetMode.NEXT_STEP) {
      throw new FailedPrecondition(`instances [${ended.join(", ")}] have no running episode: reset them first`);
    }
    const finals = new Map<number, StepOutcome<O>>();
    const one = async (i: number, action: A): Promise<StepOutcome<O>> => {
      const s = this.sessions[i]!;
      if (s.status !== EpisodeStatus.RUNNING) { // NEXT_STEP: this step is the reset
        return await s.reset(undefined, undefined, {});
      }
      const r = await s.step(action, timeoutMs);
      if (this.autoresetMode === AutoresetMode.SAME_STEP && (r.terminated || r.truncated)) {
        finals.set(i, r);
        return await s.reset(undefined, undefined, {});
      }
      return r;
    };
    const results = await Promise.all(ids.map((i, k) => VectorSession.tag(one(i, actions[k]!), i)));
    return [ids, results, finals];
  }

  async state(envId: number): Promise<StateOutcome<S>> {
    if (envId >= this.numEnvs) {
      throw new InvalidArgument(`env id ${envId} out of range: this session has ${this.numEnvs} instances`);
    }
    return await this.sessions[envId]!.state();
  }
}

/** Owns the sessions of one server process: capacity, idle reaping, drain. */
export class SessionManager<A, O, S> {
  readonly sessions = new Map<string, Session<A, O, S>>();
  draining = false;
  openedTotal = 0;
  private reserved = 0;
  private reaper: NodeJS.Timeout | undefined;

  constructor(readonly runtime: Runtime<A, O, S>) {}

  /** Sessions holding a slot (open or being created). */
  get active(): number {
    return this.sessions.size + this.reserved;
  }

  private checkCapacity(n: number): void {
    if (this.draining) {
      throw new Unavailable("server is shutting down", { fatal: true });
    }
    const max = this.runtime.maxSessions;
    if (this.active + n > max) {
      throw new ResourceExhausted(`server at capacity: ${this.active}/${max} sessions active`,
        { details: { active_sessions: this.active, max_sessions: max }, fatal: true });
    }
  }

  /** Create a session: RESOURCE_EXHAUSTED at capacity, UNAVAILABLE while draining,
   *  INTERNAL (fatal) when the factory fails. */
  async open(options: JsonObject, clientName: string): Promise<Session<A, O, S>> {
    this.checkCapacity(1);
    this.reserved += 1;
    try {
      let env: Environment<A, O, S>;
      try {
        env = await this.runtime.def.create(options);
      } catch (e) {
        if (e instanceof EnvError) {
          e.fatal = true;
          throw e;
        }
        const text = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        throw new Internal(`environment factory failed: ${text}`, { fatal: true });
      }
      const session = new Session(this, env, clientName);
      this.sessions.set(session.id, session);
      this.openedTotal += 1;
      return session;
    } finally {
      this.reserved -= 1;
    }
  }

  /** Create `n` sessions for one vectorised stream (all or none). */
  async openMany(n: number, options: JsonObject, clientName: string): Promise<Session<A, O, S>[]> {
    if (n > Math.max(this.runtime.maxNumEnvs, 1)) {
      throw new ResourceExhausted(`num_envs ${n} exceeds this server's max_num_envs ${this.runtime.maxNumEnvs}`,
        { fatal: true });
    }
    this.checkCapacity(n);
    const out: Session<A, O, S>[] = [];
    try {
      for (let i = 0; i < n; i++) {
        out.push(await this.open(options, clientName));
      }
    } catch (e) {
      for (const s of out) {
        await this.release(s);
      }
      throw e;
    }
    return out;
  }

  /** End a session: close its environment exactly once and free its slot. */
  async release(session: Session<A, O, S>): Promise<void> {
    if (session.closed) {
      return;
    }
    session.closed = true;
    this.sessions.delete(session.id);
    const close = session.env.close;
    if (close === undefined) {
      return;
    }
    try {
      await session.call(() => close.call(session.env), 30_000, "close");
    } catch (e) {
      console.error(`openenv: closing session ${session.id} failed:`, e);
    }
  }

  /** Reap sessions idle (no request, none in progress) for longer than the idle timeout. */
  startReaper(): void {
    const idle = this.runtime.idleTimeoutMs;
    if (this.reaper !== undefined || !(idle > 0) || !Number.isFinite(idle)) {
      return;
    }
    const period = Math.min(Math.max(idle / 4, 50), 5000);
    this.reaper = setInterval(() => {
      const now = Date.now();
      for (const s of [...this.sessions.values()]) {
        if (!s.busy && now - s.lastActive > idle) {
          s.terminate(new DeadlineExceeded(`session idle for more than ${idle / 1000} s`));
        }
      }
    }, period);
    this.reaper.unref();
  }

  /** Refuse new sessions, let requests in progress finish (up to `graceMs`), then end
   *  every session with UNAVAILABLE. */
  async drain(graceMs: number): Promise<void> {
    this.draining = true;
    const deadline = Date.now() + graceMs;
    const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
    while ([...this.sessions.values()].some((s) => s.busy) && Date.now() < deadline) {
      await sleep(20);
    }
    for (const s of [...this.sessions.values()]) {
      s.terminate(new Unavailable("server is shutting down"));
    }
    while (this.sessions.size > 0 && Date.now() < deadline + 1000) {
      await sleep(20);
    }
    for (const s of [...this.sessions.values()]) { // transports that did not react: close directly
      await this.release(s);
    }
  }

  /** Stop the reaper and close every remaining session. */
  async shutdown(): Promise<void> {
    if (this.reaper !== undefined) {
      clearInterval(this.reaper);
      this.reaper = undefined;
    }
    for (const s of [...this.sessions.values()]) {
      await this.release(s);
    }
  }
}
