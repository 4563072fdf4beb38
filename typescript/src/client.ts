/**
 * The trainer's side: {@link EnvClient}, an async session with one environment server.
 *
 * ```ts
 * const env = await EnvClient.connect("grpc://127.0.0.1:50051");
 * let ts = await env.reset({ seed: 7 });
 * while (!ts.done) ts = await env.step(policy(ts.observation));
 * await env.close();
 * ```
 *
 * What you may rely on:
 *
 * - Every request carries an id and its answer is matched by id, so a call that times
 *   out on the client (`timeoutMs`) never shifts the answers of later calls.
 * - Calls may be issued without awaiting the previous one (pipelining): they are sent in
 *   call order and answered in that order.
 * - Errors reject with the class of the protocol's error table ({@link EnvError}
 *   subclasses, `code` = google.rpc.Code); `fatal` ones mean the session is over.
 * - Typed observations (`Payload.message`) are decoded with the descriptors the server
 *   advertises: no precompiled stubs are needed.
 * - A `token` (default `$OPENENV_TOKEN`) travels as `authorization: Bearer <token>`
 *   metadata on every call (RFC 0003); a server that refuses it ends the session with
 *   {@link Unauthenticated}.
 */

import { create, toBinary, type JsonObject, type JsonValue, type MessageInitShape, type Registry } from "@bufbuild/protobuf";
import { DurationSchema, type Duration } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { TOKEN_ENV } from "./auth.js";
import {
  decodePayload,
  encodeValue,
  fromValue,
  registryOf,
  type AnyValue,
} from "./codec.js";
import {
  DeadlineExceeded,
  EnvError,
  FailedPrecondition,
  ResourceExhausted,
  Unavailable,
  errorFromStatus,
} from "./errors.js";
import {
  AutoresetMode,
  EpisodeStatus,
  SessionRequestSchema,
  type EnvironmentInfo,
  type SessionResponse,
  type Snapshot,
  type TimeStep,
} from "./gen/openenv/v1/environment_pb.js";
import type { RubricScore } from "./gen/openenv/v1/rubric_pb.js";
import type { ContentBlock, Tool } from "./gen/openenv/v1/tool_pb.js";
import { PROTOCOL_VERSION, clientOptions, environmentServiceDefinition, parseUrl } from "./grpc.js";

export { AutoresetMode, EpisodeStatus };

/** One time step, as `reset` and `step` return it. */
export interface StepResult<O = AnyValue> {
  /** The observation, decoded (a protobuf message, JSON value or tensor). */
  observation: O | undefined;
  /** The reward; undefined means "no reward for this step", which is not 0. */
  reward: number | undefined;
  terminated: boolean;
  truncated: boolean;
  /** `terminated || truncated`. */
  done: boolean;
  /** Environment-specific metadata (never dropped). */
  metadata: JsonObject;
  /** The rubric's score tree, when the environment has a rubric. */
  rewardBreakdown: RubricScore | undefined;
  episodeId: string;
  stepCount: number;
}

/** What `state` returns. */
export interface SessionState<S = AnyValue> {
  episodeId: string;
  stepCount: number;
  status: EpisodeStatus;
  /** The environment-specific state, decoded; undefined when it has none. */
  state: S | undefined;
}

/** A tool's result, with its JSON parts decoded. */
export interface ToolResultValue {
  content: ContentBlock[];
  structuredContent: JsonObject | undefined;
  isError: boolean;
}

/** Options of {@link EnvClient.connect}. */
export interface ClientOptions {
  /** Sent in the handshake, for the server's logs. */
  clientName?: string;
  /** Passed to the environment factory (handshake options). */
  options?: JsonObject;
  /** Default client-side timeout of every request, in ms (none by default). */
  timeoutMs?: number;
  /** How long to wait for the channel and the handshake, in ms (default 30 s). */
  connectTimeoutMs?: number;
  /** Largest message sent or received (default 64 MiB; the server's limit also applies). */
  maxMessageBytes?: number;
  /** Keepalive ping interval, in ms (default 30 s, protocol §9). */
  keepaliveMs?: number;
  /** Instances of a vectorised session (protocol §3.9); 0 or 1 is a plain session. */
  numEnvs?: number;
  /** Autoreset mode of a vectorised session. */
  autoresetMode?: AutoresetMode;
  /**
   * Bearer token for a server that requires one (RFC 0003), sent as `authorization:
   * Bearer <token>` metadata on every call; default `$OPENENV_TOKEN`. An empty string sends none.
   */
  token?: string;
}

/** The call metadata carrying `token` (RFC 0003); empty without one. */
export function tokenMetadata(token: string | undefined): grpc.Metadata {
  const md = new grpc.Metadata();
  if (token) {
    md.set("authorization", `Bearer ${token}`);
  }
  return md;
}

/** Per-call options. */
export interface CallOptions {
  /** Client-side timeout of this call, in ms. */
  timeoutMs?: number;
}

type RequestKind = MessageInitShape<typeof SessionRequestSchema>["kind"];

function duration(ms: number): Duration {
  const whole = Math.floor(ms / 1000);
  return create(DurationSchema, { seconds: BigInt(whole), nanos: Math.round((ms - whole * 1000) * 1e6) });
}

const DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024;

/** An async session with one environment server (one environment instance, or N). */
export class EnvClient<A = unknown, O = AnyValue, S = AnyValue> {
  /** The environment's description, from the handshake. */
  info!: EnvironmentInfo;
  /** Server-assigned session id. */
  sessionId = "";
  /** Registry of the advertised message types (decodes typed payloads). */
  registry!: Registry;

  private readonly client: grpc.Client;
  private call: grpc.ClientDuplexStream<Uint8Array, SessionResponse> | undefined;
  private readonly pending = new Map<bigint, { resolve: (r: SessionResponse) => void; reject: (e: EnvError) => void }>();
  private nextId = 0n;
  private broken: EnvError | undefined;
  private serverLimit = 0;

  private constructor(readonly url: string, private readonly opts: ClientOptions) {
    const max = opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE;
    const Ctor = grpc.makeGenericClientConstructor(environmentServiceDefinition, "EnvironmentService");
    this.client = new Ctor(parseUrl(url), grpc.credentials.createInsecure(),
      clientOptions(max, opts.keepaliveMs ?? 30_000));
  }

  /** Open the channel and the session (handshake). */
  static async connect<A = unknown, O = AnyValue, S = AnyValue>(
    url: string, opts: ClientOptions = {}): Promise<EnvClient<A, O, S>> {
    const c = new EnvClient<A, O, S>(url, opts);
    try {
      await c.open();
    } catch (e) {
      c.shutdown();
      throw e;
    }
    return c;
  }

  private async open(): Promise<void> {
    const connectMs = this.opts.connectTimeoutMs ?? 30_000;
    await new Promise<void>((resolve, reject) => {
      this.client.waitForReady(Date.now() + connectMs, (err) => {
        if (err) {
          reject(new Unavailable(`cannot connect to ${this.url} within ${connectMs / 1000} s`, { fatal: true }));
        } else {
          resolve();
        }
      });
    });
    const call = this.client.makeBidiStreamRequest<Uint8Array, SessionResponse>(
      environmentServiceDefinition.Session.path,
      environmentServiceDefinition.Session.requestSerialize as (m: Uint8Array) => Buffer,
      environmentServiceDefinition.Session.responseDeserialize as (b: Buffer) => SessionResponse,
      tokenMetadata(this.opts.token ?? process.env[TOKEN_ENV]));
    this.call = call;
    call.on("data", (resp: SessionResponse) => {
      const waiter = this.pending.get(resp.requestId);
      if (waiter !== undefined) {
        this.pending.delete(resp.requestId);
        waiter.resolve(resp);
      }
    });
    call.on("error", (err: grpc.ServiceError) => {
      this.fail(EnvError.fromCode(err.code, err.details || grpc.status[err.code] || "stream failed", { fatal: true }));
    });
    call.on("status", (st: grpc.StatusObject) => {
      if (st.code === grpc.status.OK) {
        this.fail(new FailedPrecondition("the session has ended", { fatal: true }));
      }
    });
    const resp = await this.request({
      case: "handshake",
      value: {
        protocolVersion: PROTOCOL_VERSION,
        clientName: this.opts.clientName ?? "openenv-typescript",
        options: this.opts.options,
        numEnvs: this.opts.numEnvs ?? 0,
        autoresetMode: this.opts.autoresetMode ?? AutoresetMode.UNSPECIFIED,
      },
    }, { timeoutMs: connectMs });
    if (resp.kind.case !== "handshake") {
      throw new FailedPrecondition(`expected a handshake answer, got ${resp.kind.case}`);
    }
    this.sessionId = resp.kind.value.sessionId;
    this.info = resp.kind.value.info!;
    this.serverLimit = Number(this.info.capabilities?.maxMessageBytes ?? 0n);
    this.registry = registryOf(this.info.descriptors);
  }

  private fail(err: EnvError): void {
    if (this.broken === undefined) {
      this.broken = err;
    }
    for (const w of this.pending.values()) {
      w.reject(this.broken);
    }
    this.pending.clear();
  }

  private shutdown(): void {
    this.call?.cancel();
    this.fail(new FailedPrecondition("the client is closed", { fatal: true }));
    this.client.close();
  }

  /**
   * Send one request and wait for its answer (the raw SessionResponse); error answers
   * reject with their {@link EnvError}. Requests issued back to back are pipelined.
   */
  request(kind: RequestKind, opts: CallOptions = {}): Promise<SessionResponse> {
    if (this.broken !== undefined) {
      return Promise.reject(this.broken);
    }
    if (this.call === undefined) {
      return Promise.reject(new FailedPrecondition("not connected: use EnvClient.connect()"));
    }
    this.nextId += 1n;
    const id = this.nextId;
    const bytes = toBinary(SessionRequestSchema, create(SessionRequestSchema, { requestId: id, kind }));
    const max = this.opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE;
    const limit = this.serverLimit > 0 ? Math.min(max, this.serverLimit) : max;
    if (bytes.length > limit) {
      return Promise.reject(new ResourceExhausted(`request of ${bytes.length} bytes exceeds the ${limit}-byte message limit`));
    }
    const timeoutMs = opts.timeoutMs ?? this.opts.timeoutMs;
    return new Promise<SessionResponse>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      this.pending.set(id, {
        resolve: (r) => {
          clearTimeout(timer);
          if (r.kind.case === "error") {
            reject(errorFromStatus(r.kind.value));
          } else {
            resolve(r);
          }
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      if (timeoutMs !== undefined) {
        timer = setTimeout(() => {
          this.pending.delete(id); // its late answer is matched by id and discarded
          reject(new DeadlineExceeded(`no answer within ${timeoutMs / 1000} s (client-side timeout)`));
        }, timeoutMs);
      }
      this.call!.write(bytes);
    });
  }

  /** Decode a TimeStep. */
  parseTimeStep(ts: TimeStep | undefined): StepResult<O> {
    return {
      observation: decodePayload(ts?.observation, this.registry) as O | undefined,
      reward: ts?.reward,
      terminated: ts?.terminated ?? false,
      truncated: ts?.truncated ?? false,
      done: (ts?.terminated ?? false) || (ts?.truncated ?? false),
      metadata: ts?.metadata ?? {},
      rewardBreakdown: ts?.rewardBreakdown,
      episodeId: ts?.episodeId ?? "",
      stepCount: Number(ts?.stepCount ?? 0n),
    };
  }

  /** Start a new episode and return its first time step. */
  async reset(args: { seed?: number | bigint; episodeId?: string; options?: JsonObject } & CallOptions = {}):
    Promise<StepResult<O>> {
    const resp = await this.request({
      case: "reset",
      value: {
        seed: args.seed === undefined ? undefined : BigInt(args.seed),
        episodeId: args.episodeId ?? "",
        options: args.options,
      },
    }, args);
    return this.parseTimeStep(resp.kind.case === "reset" ? resp.kind.value.timeStep : undefined);
  }

  /**
   * Apply an action: a protobuf message (packed in `Any`), a `Payload`, or a JSON value.
   * `stepTimeoutMs` asks the server to stop waiting for the environment
   * (DEADLINE_EXCEEDED, episode aborted); `timeoutMs` bounds the wait here.
   */
  async step(action: A, opts: CallOptions & { stepTimeoutMs?: number } = {}): Promise<StepResult<O>> {
    const resp = await this.request({
      case: "step",
      value: {
        action: encodeValue(action, this.registry),
        timeout: opts.stepTimeoutMs === undefined ? undefined : duration(opts.stepTimeoutMs),
      },
    }, opts);
    return this.parseTimeStep(resp.kind.case === "step" ? resp.kind.value.timeStep : undefined);
  }

  /** Episode id, step count, episode status and the environment-specific state. */
  async state(opts: CallOptions & { envId?: number } = {}): Promise<SessionState<S>> {
    const resp = await this.request({ case: "state", value: { envId: opts.envId ?? 0 } }, opts);
    if (resp.kind.case !== "state") {
      throw new FailedPrecondition(`expected a state answer, got ${resp.kind.case}`);
    }
    const st = resp.kind.value;
    return {
      episodeId: st.episodeId,
      stepCount: Number(st.stepCount),
      status: st.status,
      state: decodePayload(st.state, this.registry) as S | undefined,
    };
  }

  /** The session's state now, as an opaque, sealed `openenv.v1.Snapshot` (RFC 0006). */
  async snapshot(opts: CallOptions = {}): Promise<Snapshot> {
    const resp = await this.request({ case: "snapshot", value: {} }, opts);
    if (resp.kind.case !== "snapshot" || resp.kind.value.snapshot === undefined) {
      throw new FailedPrecondition(`expected a snapshot answer, got ${resp.kind.case}`);
    }
    return resp.kind.value.snapshot;
  }

  /** Make this session's state the snapshot's; returns the restored episode id, step count and status. */
  async restore(snapshot: Snapshot, opts: CallOptions = {}): Promise<Omit<SessionState<S>, "state">> {
    const resp = await this.request({ case: "restore", value: { snapshot } }, opts);
    if (resp.kind.case !== "restore") {
      throw new FailedPrecondition(`expected a restore answer, got ${resp.kind.case}`);
    }
    const r = resp.kind.value;
    return { episodeId: r.episodeId, stepCount: Number(r.stepCount), status: r.status };
  }

  /** The environment's tools. */
  async listTools(opts: CallOptions = {}): Promise<Tool[]> {
    const resp = await this.request({ case: "listTools", value: {} }, opts);
    return resp.kind.case === "listTools" ? resp.kind.value.tools : [];
  }

  /** Call a tool outside the step loop (no step counted, no reward). */
  async callTool(name: string, args: JsonObject = {}, opts: CallOptions & { toolTimeoutMs?: number } = {}):
    Promise<ToolResultValue> {
    const resp = await this.request({
      case: "callTool",
      value: {
        name,
        arguments: args,
        timeout: opts.toolTimeoutMs === undefined ? undefined : duration(opts.toolTimeoutMs),
      },
    }, opts);
    const r = resp.kind.case === "callTool" ? resp.kind.value.result : undefined;
    return {
      content: r?.content ?? [],
      structuredContent: r?.structuredContent,
      isError: r?.isError ?? false,
    };
  }

  /** Reset instances of a vectorised session (all when `envIds` is empty). */
  async resetBatch(args: { envIds?: number[]; seeds?: (number | bigint)[]; options?: JsonObject } & CallOptions = {}):
    Promise<{ envIds: number[]; timeSteps: StepResult<O>[] }> {
    const resp = await this.request({
      case: "batchReset",
      value: {
        envIds: args.envIds ?? [],
        seeds: (args.seeds ?? []).map((s) => BigInt(s)),
        options: args.options,
      },
    }, args);
    const r = resp.kind.case === "batchReset" ? resp.kind.value : undefined;
    return { envIds: r?.envIds ?? [], timeSteps: (r?.timeSteps ?? []).map((t) => this.parseTimeStep(t)) };
  }

  /** Step instances of a vectorised session with one action each (all when `envIds` is empty). */
  async stepBatch(actions: A[], opts: CallOptions & { envIds?: number[]; stepTimeoutMs?: number } = {}):
    Promise<{ envIds: number[]; timeSteps: StepResult<O>[]; finalTimeSteps: Map<number, StepResult<O>> }> {
    const resp = await this.request({
      case: "batchStep",
      value: {
        envIds: opts.envIds ?? [],
        actions: actions.map((a) => encodeValue(a, this.registry)),
        timeout: opts.stepTimeoutMs === undefined ? undefined : duration(opts.stepTimeoutMs),
      },
    }, opts);
    const r = resp.kind.case === "batchStep" ? resp.kind.value : undefined;
    const finals = new Map<number, StepResult<O>>();
    for (const [k, v] of Object.entries(r?.finalTimeSteps ?? {})) {
      finals.set(Number(k), this.parseTimeStep(v));
    }
    return { envIds: r?.envIds ?? [], timeSteps: (r?.timeSteps ?? []).map((t) => this.parseTimeStep(t)), finalTimeSteps: finals };
  }

  /** Close the session (the server closes the environment) and the channel. */
  async close(): Promise<void> {
    if (this.call !== undefined && this.broken === undefined) {
      try {
        await this.request({ case: "close", value: {} }, { timeoutMs: 10_000 });
      } catch (e) {
        if (!(e instanceof EnvError)) {
          throw e;
        }
      }
    }
    this.shutdown();
  }

  /** The error that ended the session, if it has ended. */
  get ended(): EnvError | undefined {
    return this.broken;
  }
}

export { fromValue, type JsonValue };
