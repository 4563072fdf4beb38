/**
 * The client's session logic, independent of the transport: {@link SessionClient} speaks the
 * `Session` stream (protocol 1.3) over any {@link Transport} that carries one
 * `SessionRequest` / `SessionResponse` per message: gRPC (client.ts) or the binary WebSocket
 * of RFC 0011 (ws.ts). This module imports nothing of Node.js, so it runs in a browser too.
 *
 * What it adds to "send a request, wait for its answer":
 *
 * - Answers are matched by request id, never by position; a client-side timeout never
 *   shifts the answers of later calls.
 * - Calls issued without awaiting the previous one are pipelined and **coalesced** (RFC
 *   0009): a request goes out at once when no earlier message awaits its answer; requests
 *   issued while one does are held until its answer arrives and then go out as one
 *   `pipelined` message (to a server that sets `Capabilities.pipelined_requests`; one
 *   message each otherwise). No timer: lock-step use is unchanged.
 * - Resumable sessions (RFC 0006): with `resumable`, a stream that drops (a transport error,
 *   not an answer) is reattached with the resume token within the server's
 *   `resume_grace`, and the requests it had not answered are re-sent under their ids: the
 *   server answers each exactly once.
 * - The description by digest (RFC 0013): the process keeps the last {@link INFO_CACHE_SIZE}
 *   descriptions by digest and, per server URL, the digest it last received; a handshake names
 *   it (`known_info_digest`) and a 1.4 server then leaves the description out.
 * - Multi-agent worlds (RFC 0012): `agentIds` / `joinToken` create or join a world; time
 *   steps carry `agents` (this session's agents' views) and `toAct`; `observe`, `stepAgents`.
 * - Worlds that behave (RFC 0016, protocol 1.6): against a server that sets
 *   `Capabilities.world_wait_timeouts`, a client-side timeout of `reset`, `step`, `stepAgents` or
 *   `observe` travels with the request (`SessionRequest.wait_timeout`), so the server ends a
 *   wait on other sessions itself (`DeadlineExceeded`, not fatal, nothing changed) and this side
 *   gives up {@link WAIT_GRACE_MS} later (`ClientTimeout`). Time steps carry `seatEvents`;
 *   `observe({ wait: true, seatEvents: true })` also answers for one.
 * - Grading environments (RFC 0015, protocol 1.5): `grading` reads the server's declaration,
 *   `reset({ feedback: "rich" })` asks for an episode's feedback level, and each time step of a
 *   grading environment says its episode's level (`feedback`).
 */

import {
  create,
  fromBinary,
  fromJson,
  toBinary,
  type JsonObject,
  type JsonValue,
  type MessageInitShape,
  type Registry,
} from "@bufbuild/protobuf";
import { DurationSchema, type Duration } from "@bufbuild/protobuf/wkt";
import { decodePayload, encodeValue, fromValue, registryOf, type AnyValue } from "./codec.js";
import {
  ClientTimeout,
  EnvError,
  ErrorCode,
  FailedPrecondition,
  Internal,
  ResourceExhausted,
  Unavailable,
  errorFromStatus,
} from "./errors.js";
import {
  AutoresetMode,
  EnvironmentInfoSchema,
  EpisodeStatus,
  Feedback,
  SessionRequestSchema,
  SessionResponseSchema,
  type EnvironmentInfo,
  type SessionRequest,
  type SessionResponse,
  type Snapshot,
  type TimeStep,
} from "./gen/openenv/v1/environment_pb.js";
import { ServerLoadSchema, WorkerLoadSchema, type ServerLoad, type WorkerLoad } from "./gen/openenv/v1/load_pb.js";
import { SeatEventKind, type MultiAgentSpec, type SeatEvent as SeatEventPb, type WorldInfo } from "./gen/openenv/v1/multiagent_pb.js";
import type { RubricScore } from "./gen/openenv/v1/rubric_pb.js";
import type { TaskInfo } from "./gen/openenv/v1/task_pb.js";
import type { ContentBlock, Tool } from "./gen/openenv/v1/tool_pb.js";
import { PROTOCOL_VERSION } from "./grpc.js"; // (grpc.ts imports only types of @grpc/grpc-js: browser-safe)

export { AutoresetMode, EpisodeStatus };


/** One agent's part of a time step (RFC 0012): its own view, reward and end flags. */
export interface AgentStep<O = AnyValue> {
  observation: O | undefined;
  /** Its reward since the last time step this session received for it; undefined: none. */
  reward: number | undefined;
  terminated: boolean;
  truncated: boolean;
  done: boolean;
  /** Metadata for this agent only. */
  metadata: JsonObject;
  rewardBreakdown: RubricScore | undefined;
}

/**
 * What happened to one seat of a multi-agent world (RFC 0016), as a time step reports it.
 * `left`: the session acting for `agentIds` closed or disconnected (nobody acts for them until a
 * session joins for them); `joined`: a session now acts for them; `expired`: their rejoin
 * deadline passed with nobody acting for them (the world's vacancy rule ended the episode);
 * `unspecified`: a kind newer than this client.
 */
export interface SeatEvent {
  kind: "left" | "joined" | "expired" | "unspecified";
  agentIds: string[];
  /** For `left` during a running episode: how long (ms, from when the time step was built) the
   *  seat stays open before the world's vacancy rule applies; undefined when no deadline applies. */
  rejoinWithinMs: number | undefined;
}

/** A feedback level of a grading environment's episode (RFC 0015). */
export type FeedbackLevel = "strict" | "rich";

/**
 * What a grading environment declares (RFC 0015: `Capabilities.grades`, `feedback`,
 * `feedback_offered`), as `SessionClient.grading` returns it.
 */
export interface GradingInfo {
  /** The environment grades work an agent submits (its reward is a verdict). */
  grades: boolean;
  /** The level of an episode whose reset asks for none; undefined when it does not grade. */
  feedback: FeedbackLevel | undefined;
  /** The levels a reset may ask for (`reset({ feedback })`); empty when it does not grade. */
  offered: FeedbackLevel[];
}

const FEEDBACK_LEVELS: Partial<Record<Feedback, FeedbackLevel>> = {
  [Feedback.STRICT]: "strict",
  [Feedback.RICH]: "rich",
};

const SEAT_EVENT_KINDS: Partial<Record<SeatEventKind, SeatEvent["kind"]>> = {
  [SeatEventKind.LEFT]: "left",
  [SeatEventKind.JOINED]: "joined",
  [SeatEventKind.EXPIRED]: "expired",
};

/**
 * RFC 0016: when a request's client-side timeout travels with it (`SessionRequest.wait_timeout`,
 * to a server that sets `Capabilities.world_wait_timeouts`), this client itself gives up this
 * much later, so a server's `DeadlineExceeded` (the wait ended, the session usable) and
 * `ClientTimeout` (the server did not answer) are distinct outcomes. As the Python client.
 */
export const WAIT_GRACE_MS = 5_000;

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
  /** Multi-agent worlds (RFC 0012): agent id -> its part, for this session's agents only ({} otherwise). */
  agents: Record<string, AgentStep<O>>;
  /** Multi-agent worlds: the agents to act now, in the environment's order (the whole world's). */
  toAct: string[];
  /**
   * Multi-agent worlds (RFC 0016): what happened to other sessions' seats since this session's
   * last time step (left, joined, rejoin deadline passed), oldest first; [] from a server that
   * does not set `Capabilities.seat_events`.
   */
  seatEvents: SeatEvent[];
  /**
   * Grading environments (RFC 0015): the feedback level of this time step's episode, as this
   * client asked for it at reset (or the environment's default); undefined for an environment
   * that does not grade, or a session claimed by resume token before this client reset it.
   * `"strict"`: the observation of a graded step is its reward (`{ reward }`), the breakdown its
   * root, the metadata the environment's public keys: nothing finer about the hidden checks.
   */
  feedback: FeedbackLevel | undefined;
}

/** What `getLoadReport` returns (RFC 0005, RFC 0013). */
export interface LoadReport {
  /** The whole server's load (the sum over its workers). */
  load: ServerLoad;
  /** Each worker process of a server that runs several, in worker order; empty for one process. */
  workers: WorkerLoad[];
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

/** One page of a split's tasks (RFC 0004). */
export interface TaskPage {
  tasks: TaskInfo[];
  total: number;
  nextOffset: number;
}

/** What `fork` returns (RFC 0006): the new sessions, each claimed by connecting with its token. */
export interface Forks {
  sessionIds: string[];
  resumeTokens: string[];
}

/** Per-call options. */
export interface CallOptions {
  /**
   * Client-side timeout of this call, in ms. For `reset`, `step`, `stepAgents` and `observe`
   * against a server that sets `Capabilities.world_wait_timeouts` (RFC 0016) it also travels
   * with the request: the server ends a wait on other sessions of the world then
   * (`DeadlineExceeded`, not fatal, nothing changed: a simultaneous step's actions are
   * withdrawn), and this client rejects with `ClientTimeout` only {@link WAIT_GRACE_MS} later.
   */
  timeoutMs?: number;
}

/** The session options every transport shares. */
export interface SessionOptions {
  /** Sent in the handshake, for the server's logs. */
  clientName?: string;
  /** Passed to the environment factory (handshake options). */
  options?: JsonObject;
  /** Default client-side timeout of every request, in ms (none by default). */
  timeoutMs?: number;
  /** How long to wait for the connection and the handshake, in ms (default 30 s). */
  connectTimeoutMs?: number;
  /** Largest message sent or received (default 64 MiB; the server's limit also applies). */
  maxMessageBytes?: number;
  /** Instances of a vectorised session (protocol §3.9); 0 or 1 is a plain session. */
  numEnvs?: number;
  /** Autoreset mode of a vectorised session. */
  autoresetMode?: AutoresetMode;
  /**
   * Ask for a resumable session (RFC 0006): the server hands out a resume token, keeps the
   * session for its `resume_grace` after the stream drops, and this client reattaches on its
   * own, re-sending what was unanswered. Request ids are then unique within the session.
   */
  resumable?: boolean;
  /**
   * Reattach the session of this token (a `resumeToken` of another client, or one of
   * `fork()`'s) instead of opening a new one; options, numEnvs and autoresetMode are ignored.
   */
  resumeToken?: string;
  /** Coalesce pipelined requests into one message (RFC 0009; default true, when the server accepts them). */
  coalesce?: boolean;
  /**
   * Multi-agent environments (RFC 0012): the agents this session acts for. Without
   * `joinToken`, a new world is created (empty: every agent, self-play); with it, the world is
   * joined (empty: every agent nobody acts for).
   */
  agentIds?: string[];
  /** Join the world of this token (another session's `world.joinToken`) instead of creating one. */
  joinToken?: string;
  /** Name the description this process holds in the handshake (RFC 0013; default true). */
  infoCache?: boolean;
}

/** The load report of `GET /load` (proto3 JSON: `{load, workers}`, or a bare ServerLoad). */
export function loadReportOf(body: unknown): LoadReport {
  const obj = (body !== null && typeof body === "object" ? body : {}) as Record<string, JsonValue>;
  const load = ("load" in obj ? obj.load : obj) as JsonValue;
  const workers = Array.isArray(obj.workers) ? obj.workers : [];
  return {
    load: fromJson(ServerLoadSchema, load, { ignoreUnknownFields: true }),
    workers: workers.map((w) => fromJson(WorkerLoadSchema, w, { ignoreUnknownFields: true })),
  };
}

/** Descriptions kept by digest (RFC 0013), per process. */
export const INFO_CACHE_SIZE = 64;
const infoByDigest = new Map<string, EnvironmentInfo>();
const digestOf = new Map<string, string>();

/** The digest to name in a handshake to `server` ("" when this process holds none). */
export function knownInfoDigest(server: string): string {
  const d = digestOf.get(server) ?? "";
  return infoByDigest.has(d) ? d : "";
}

/** The description a handshake answer carries (then kept under its digest), or the one kept
 *  under its digest when the server left it out. */
export function infoOf(server: string, info: EnvironmentInfo | undefined, digest: string): EnvironmentInfo {
  if (info !== undefined || digest === "") {
    const got = info ?? create(EnvironmentInfoSchema);
    if (digest !== "") {
      infoByDigest.delete(digest);
      infoByDigest.set(digest, got);
      while (infoByDigest.size > INFO_CACHE_SIZE) {
        infoByDigest.delete(infoByDigest.keys().next().value!);
      }
      digestOf.set(server, digest);
    }
    return got;
  }
  const kept = infoByDigest.get(digest);
  if (kept === undefined) {
    throw new Internal(`the server left the environment's description out of the handshake (digest ${digest}), ` +
      "and this client does not hold it", { fatal: true });
  }
  return kept;
}

/** One Session stream, as a transport carries it: whole messages, in order. */
export interface Transport {
  /** Send one serialized `SessionRequest`. */
  send(data: Uint8Array): void;
  /** Half-close: the server answers what was sent, then ends the stream. */
  end(): void;
  /** Drop the stream at once (no close request: a resumable session is kept by the server). */
  cancel(): void;
}

/** What a transport reports. */
export interface TransportSink {
  /** One serialized `SessionResponse`. */
  message(data: Uint8Array): void;
  /** The stream ended: `undefined` when it ended normally (status OK, close 1000). */
  closed(err: EnvError | undefined): void;
}

/** Opens one Session stream (rejects with an {@link EnvError} when it cannot). */
export type Connector = (sink: TransportSink) => Promise<Transport>;

type RequestKind = MessageInitShape<typeof SessionRequestSchema>["kind"];

interface Waiter {
  req: SessionRequest;
  resolve: (r: SessionResponse) => void;
  reject: (e: EnvError) => void;
}

export function duration(ms: number): Duration {
  const whole = Math.floor(ms / 1000);
  return create(DurationSchema, { seconds: BigInt(whole), nanos: Math.round((ms - whole * 1000) * 1e6) });
}

function durationMs(d: Duration | undefined): number {
  return d === undefined ? 0 : Number(d.seconds) * 1000 + d.nanos / 1e6;
}

function seatEventOf(e: SeatEventPb): SeatEvent {
  return {
    kind: SEAT_EVENT_KINDS[e.kind] ?? "unspecified",
    agentIds: [...e.agentIds],
    rejoinWithinMs: e.rejoinWithin === undefined ? undefined : durationMs(e.rejoinWithin),
  };
}

export const DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024;
/** Stream statuses after which a resumable session is reattached (the connection, not the session, failed). */
const TRANSIENT = new Set<number>([ErrorCode.UNAVAILABLE, ErrorCode.CANCELLED, 2 /* UNKNOWN */, ErrorCode.INTERNAL]);

/** An async session with one environment server, over any {@link Transport}. */
export class SessionClient<A = unknown, O = AnyValue, S = AnyValue> {
  /** The environment's description, from the handshake. */
  info!: EnvironmentInfo;
  /** Server-assigned session id. */
  sessionId = "";
  /** Registry of the advertised message types (decodes typed payloads). */
  registry!: Registry;
  /** The resume token of a resumable session (RFC 0006; treat it as a secret), else "". */
  resumeToken = "";
  /** True when the handshake reattached an existing session (a resume token was given). */
  resumed = false;
  /** How many times the stream dropped and the session was reattached. */
  reconnects = 0;
  /** Messages sent, and how many of them were pipelined messages (RFC 0009). */
  readonly sent = { messages: 0, pipelined: 0 };
  /** The digest of the description (RFC 0013; "" from a server before 1.4). */
  infoDigest = "";
  /** True when the server left the description out and the one this process held was used. */
  infoFromCache = false;
  /** Multi-agent environments (RFC 0012): the world this session is in (its join token, agents, ownership). */
  world: WorldInfo | undefined;
  /**
   * Grading environments (RFC 0015): the feedback level of the current episode, as this client's
   * last reset asked for it (or the environment's default); undefined for an environment that
   * does not grade, or before this client's first reset of a session claimed by resume token.
   */
  feedback: FeedbackLevel | undefined;

  private transport: Transport | undefined;
  private generation = 0;
  private readonly pending = new Map<bigint, Waiter>();
  private nextId = 0n;
  private broken: EnvError | undefined;
  private serverLimit = 0;
  /** Request ids of the messages in flight (coalescing waits until they are answered). */
  private readonly awaiting = new Set<bigint>();
  /** Requests held back while a message awaits its answer. */
  private held: SessionRequest[] = [];
  /** Enclosing id of a pipelined message -> the ids it carries. */
  private readonly enclosing = new Map<bigint, bigint[]>();
  private over = false;
  private reconnecting = false;

  protected constructor(readonly url: string, protected readonly opts: SessionOptions,
                        private readonly connector: Connector) {}

  /** Open the stream and the session (handshake). */
  protected async open(): Promise<void> {
    const connectMs = this.opts.connectTimeoutMs ?? 30_000;
    if (this.opts.resumeToken) {
      // Another client's session: its journal holds that client's ids (exactly-once by id), so
      // this one numbers its requests from a random point far from them.
      this.nextId = BigInt(Math.floor(Math.random() * 2 ** 40)) << 20n;
    }
    await this.attach(this.opts.resumeToken ?? "", connectMs);
    this.resumed = this.resumed && (this.opts.resumeToken ?? "") !== "";
  }

  /** Open a stream and send the handshake (new session, or resume `token`). */
  private async attach(token: string, timeoutMs: number): Promise<void> {
    const gen = ++this.generation;
    const transport = await this.connector({
      message: (data) => {
        if (gen === this.generation) {
          this.onMessage(data);
        }
      },
      closed: (err) => {
        if (gen === this.generation) {
          this.onClosed(err);
        }
      },
    });
    this.transport = transport;
    this.nextId += 1n;
    const id = this.nextId;
    const known = (this.opts.infoCache ?? true) ? knownInfoDigest(this.url) : "";
    const joinToken = this.opts.joinToken ?? "";
    const agentIds = this.opts.agentIds ?? [];
    const req = create(SessionRequestSchema, {
      requestId: id,
      kind: {
        case: "handshake",
        value: token !== "" ? {
          protocolVersion: PROTOCOL_VERSION, clientName: this.opts.clientName ?? "openenv-typescript",
          resumeToken: token, knownInfoDigest: known,
        } : {
          protocolVersion: PROTOCOL_VERSION,
          clientName: this.opts.clientName ?? "openenv-typescript",
          options: this.opts.options,
          numEnvs: this.opts.numEnvs ?? 0,
          autoresetMode: this.opts.autoresetMode ?? AutoresetMode.UNSPECIFIED,
          resumable: this.opts.resumable ?? false,
          knownInfoDigest: known,
          world: joinToken !== "" || agentIds.length > 0 ? { joinToken, agentIds } : undefined,
        },
      },
    });
    const resp = await this.wait(req, timeoutMs, () => {
      this.sent.messages += 1;
      transport.send(toBinary(SessionRequestSchema, req));
    });
    if (resp.kind.case !== "handshake") {
      throw new FailedPrecondition(`expected a handshake answer, got ${resp.kind.case}`);
    }
    const hs = resp.kind.value;
    this.sessionId = hs.sessionId;
    this.info = infoOf(this.url, hs.info, hs.infoDigest);
    this.infoDigest = hs.infoDigest;
    this.infoFromCache = hs.info === undefined && hs.infoDigest !== "";
    this.world = hs.world;
    this.resumeToken = hs.resumeToken;
    this.resumed = hs.resumed;
    this.serverLimit = Number(this.info.capabilities?.maxMessageBytes ?? 0n);
    this.registry = registryOf(this.info.descriptors);
    if (this.feedback === undefined && !hs.resumed) {
      this.feedback = this.grading.feedback; // a new session's first episode has the default level
    }
  }

  /** What the environment declares about grading (RFC 0015; `grades` false from a server before 1.5). */
  get grading(): GradingInfo {
    const caps = this.info?.capabilities;
    const level = (f: Feedback): FeedbackLevel | undefined => FEEDBACK_LEVELS[f];
    if (caps === undefined || !caps.grades) {
      return { grades: false, feedback: undefined, offered: [] };
    }
    return {
      grades: true,
      feedback: level(caps.feedback) ?? "strict",
      offered: caps.feedbackOffered.map(level).filter((f): f is FeedbackLevel => f !== undefined),
    };
  }

  private get coalescing(): boolean {
    return (this.opts.coalesce ?? true) && (this.info?.capabilities?.pipelinedRequests ?? false);
  }

  private get limit(): number {
    const max = this.opts.maxMessageBytes ?? DEFAULT_MAX_MESSAGE;
    return this.serverLimit > 0 ? Math.min(max, this.serverLimit) : max;
  }

  private onMessage(data: Uint8Array): void {
    let resp: SessionResponse;
    try {
      resp = fromBinary(SessionResponseSchema, data);
    } catch (e) {
      this.fail(new FailedPrecondition(`undecodable SessionResponse from the server: ${String(e)}`, { fatal: true }));
      this.transport?.cancel();
      return;
    }
    const inner = this.enclosing.get(resp.requestId);
    if (resp.kind.case === "pipelined") {
      this.enclosing.delete(resp.requestId);
      resp.kind.value.responses.forEach((r) => this.deliver(r));
    } else if (inner !== undefined) { // the whole pipelined message was refused: each request gets the error
      this.enclosing.delete(resp.requestId);
      for (const id of inner) {
        this.deliver(create(SessionResponseSchema, { requestId: id, kind: resp.kind }));
      }
    } else {
      this.deliver(resp);
    }
    if (this.awaiting.size === 0 && this.held.length > 0 && !this.reconnecting) {
      this.flush(this.held.splice(0));
    }
  }

  private deliver(resp: SessionResponse): void {
    this.awaiting.delete(resp.requestId);
    if (resp.kind.case === "close" || (resp.kind.case === "error" && resp.kind.value.fatal)) {
      this.over = true; // the server ends the stream after this answer
    }
    const waiter = this.pending.get(resp.requestId);
    if (waiter !== undefined) {
      this.pending.delete(resp.requestId);
      waiter.resolve(resp);
    }
  }

  private onClosed(err: EnvError | undefined): void {
    this.transport = undefined;
    if (this.reconnecting) { // a reattaching stream failed: its handshake fails and the loop tries again
      for (const [id, w] of this.pending) {
        if (w.req.kind.case === "handshake") {
          this.pending.delete(id);
          w.reject(err ?? new Unavailable("the stream ended during the resume handshake"));
        }
      }
      return;
    }
    const transient = err !== undefined && TRANSIENT.has(err.code);
    if (!this.over && this.broken === undefined && this.resumeToken !== "" && transient) {
      void this.reconnect();
      return;
    }
    this.fail(err ?? new FailedPrecondition("the session has ended", { fatal: true }));
  }

  /** The stream dropped: reattach with the resume token and re-send what was unanswered. */
  private async reconnect(): Promise<void> {
    this.reconnecting = true;
    this.awaiting.clear();
    this.enclosing.clear();
    const graceMs = durationMs(this.info.capabilities?.resumeGrace) || 60_000;
    const deadline = Date.now() + graceMs;
    let backoff = 50;
    let last: EnvError | undefined;
    while (Date.now() < deadline && this.broken === undefined) {
      try {
        await this.attach(this.resumeToken, Math.max(1000, Math.min(this.opts.connectTimeoutMs ?? 30_000, deadline - Date.now())));
        this.reconnects += 1;
        this.reconnecting = false;
        const unanswered = [...this.pending.values()].map((w) => w.req)
          .filter((r) => r.kind.case !== "handshake")
          .sort((a, b) => (a.requestId < b.requestId ? -1 : 1));
        const held = this.held.splice(0);
        const again = [...unanswered, ...held.filter((r) => !unanswered.includes(r))];
        if (again.length > 0) {
          this.flush(again);
        }
        return;
      } catch (e) {
        last = e instanceof EnvError ? e : new Unavailable(String(e));
        if (!TRANSIENT.has(last.code) && last.code !== ErrorCode.DEADLINE_EXCEEDED) {
          break; // ABORTED: the session is gone (or the token is refused)
        }
        this.transport?.cancel();
        await new Promise((r) => setTimeout(r, backoff));
        backoff = Math.min(backoff * 2, 1000);
      }
    }
    this.reconnecting = false;
    last ??= new Unavailable("the session could not be resumed within its grace period");
    last.fatal = true;
    this.fail(last);
  }

  private fail(err: EnvError): void {
    if (this.broken === undefined) {
      this.broken = err;
    }
    for (const w of this.pending.values()) {
      w.reject(this.broken);
    }
    this.pending.clear();
    this.held = [];
    this.awaiting.clear();
  }

  /** Drop the stream and release the transport's resources (subclasses close their channel). */
  protected shutdown(): void {
    this.generation += 1;
    this.transport?.cancel();
    this.transport = undefined;
    this.fail(new FailedPrecondition("the client is closed", { fatal: true }));
  }

  /** Register a waiter for `req`, run `send`, and wait for the answer (or the timeout). */
  private wait(req: SessionRequest, timeoutMs: number | undefined, send: () => void): Promise<SessionResponse> {
    const id = req.requestId;
    return new Promise<SessionResponse>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout> | undefined;
      this.pending.set(id, {
        req,
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
          reject(new ClientTimeout(`no answer within ${timeoutMs / 1000} s (client-side timeout)`));
        }, timeoutMs);
      }
      send();
    });
  }

  /** Send `reqs` now: one message each, or (coalescing) pipelined messages within the limits. */
  private flush(reqs: SessionRequest[]): void {
    const transport = this.transport;
    if (transport === undefined) {
      this.held.push(...reqs);
      return;
    }
    const maxItems = this.coalescing ? this.info.capabilities?.maxPipelinedRequests ?? 0 : 0;
    let i = 0;
    while (i < reqs.length) {
      const chunk: SessionRequest[] = [reqs[i]!];
      let size = toBinary(SessionRequestSchema, reqs[i]!).length + 16;
      i += 1;
      while (i < reqs.length && chunk.length < maxItems) {
        const n = toBinary(SessionRequestSchema, reqs[i]!).length + 16;
        if (size + n > this.limit) {
          break;
        }
        chunk.push(reqs[i]!);
        size += n;
        i += 1;
      }
      chunk.forEach((r) => this.awaiting.add(r.requestId));
      this.sent.messages += 1;
      if (chunk.length === 1) {
        transport.send(toBinary(SessionRequestSchema, chunk[0]!));
        continue;
      }
      this.nextId += 1n;
      const enc = this.nextId;
      this.enclosing.set(enc, chunk.map((r) => r.requestId));
      this.sent.pipelined += 1;
      transport.send(toBinary(SessionRequestSchema, create(SessionRequestSchema, {
        requestId: enc, kind: { case: "pipelined", value: { requests: chunk } },
      })));
    }
  }

  /**
   * Send one request and wait for its answer (the raw SessionResponse); error answers
   * reject with their {@link EnvError}. Requests issued back to back are pipelined.
   */
  request(kind: RequestKind, opts: CallOptions = {}): Promise<SessionResponse> {
    if (this.broken !== undefined) {
      return Promise.reject(this.broken);
    }
    if (this.info === undefined) {
      return Promise.reject(new FailedPrecondition("not connected: use EnvClient.connect()"));
    }
    this.nextId += 1n;
    const req = create(SessionRequestSchema, { requestId: this.nextId, kind });
    let timeoutMs = opts.timeoutMs ?? this.opts.timeoutMs;
    if (timeoutMs !== undefined && this.waitsOnServer(req)) {
      // RFC 0016: the wait travels with the request, so the server ends it (DEADLINE_EXCEEDED,
      // nothing changed) and the session stays usable; this side gives up a grace later.
      req.waitTimeout = duration(timeoutMs);
      timeoutMs += WAIT_GRACE_MS;
    }
    const size = toBinary(SessionRequestSchema, req).length;
    if (size > this.limit) {
      return Promise.reject(new ResourceExhausted(`request of ${size} bytes exceeds the ${this.limit}-byte message limit`));
    }
    return this.wait(req, timeoutMs, () => {
      if (this.reconnecting || (this.coalescing && this.awaiting.size > 0)) {
        this.held.push(req); // goes out with the others when the message in flight is answered
      } else {
        this.flush([req]);
      }
    });
  }

  /** Whether `req` may wait on other sessions of a world whose server honours
   *  `SessionRequest.wait_timeout` (RFC 0016). */
  private waitsOnServer(req: SessionRequest): boolean {
    const k = req.kind.case;
    return (this.info?.capabilities?.worldWaitTimeouts ?? false) && (k === "observe" || k === "step" || k === "reset");
  }

  /** Multi-agent environments (RFC 0012): how the world is played (agents, turn mode, ...); undefined otherwise. */
  get multiAgent(): MultiAgentSpec | undefined {
    return this.info?.multiAgent;
  }

  /** Decode a TimeStep. */
  parseTimeStep(ts: TimeStep | undefined): StepResult<O> {
    const agents: Record<string, AgentStep<O>> = {};
    for (const [id, part] of Object.entries(ts?.agents ?? {})) {
      agents[id] = {
        observation: decodePayload(part.observation, this.registry) as O | undefined,
        reward: part.reward,
        terminated: part.terminated,
        truncated: part.truncated,
        done: part.terminated || part.truncated,
        metadata: part.metadata ?? {},
        rewardBreakdown: part.rewardBreakdown,
      };
    }
    return {
      agents,
      toAct: [...(ts?.toAct ?? [])],
      observation: decodePayload(ts?.observation, this.registry) as O | undefined,
      reward: ts?.reward,
      terminated: ts?.terminated ?? false,
      truncated: ts?.truncated ?? false,
      done: (ts?.terminated ?? false) || (ts?.truncated ?? false),
      metadata: ts?.metadata ?? {},
      rewardBreakdown: ts?.rewardBreakdown,
      episodeId: ts?.episodeId ?? "",
      stepCount: Number(ts?.stepCount ?? 0n),
      seatEvents: (ts?.seatEvents ?? []).map(seatEventOf),
      feedback: this.feedback,
    };
  }

  /**
   * Start a new episode and return its first time step; `taskId` plays that task (RFC 0004).
   * `feedback` (RFC 0015) asks a grading environment for the episode's feedback level (the
   * reset option `"feedback"`): one of `grading.offered`, else the server answers
   * `InvalidArgument` and no episode starts; absent, the environment's default (`grading.feedback`).
   * In a world, a joining session's reset waits for the owner's next episode (`timeoutMs`
   * bounds it on the server too: see {@link CallOptions}).
   */
  async reset(args: { seed?: number | bigint; episodeId?: string; options?: JsonObject; taskId?: string;
                      feedback?: FeedbackLevel } & CallOptions = {}): Promise<StepResult<O>> {
    const options = args.feedback === undefined ? args.options : { ...(args.options ?? {}), feedback: args.feedback };
    const resp = await this.request({
      case: "reset",
      value: {
        seed: args.seed === undefined ? undefined : BigInt(args.seed),
        episodeId: args.episodeId ?? "",
        options,
        taskId: args.taskId ?? "",
      },
    }, args);
    const grading = this.grading;
    if (grading.grades) {
      const asked = options?.feedback;
      this.feedback = asked === "strict" || asked === "rich" ? asked : grading.feedback;
    }
    return this.parseTimeStep(resp.kind.case === "reset" ? resp.kind.value.timeStep : undefined);
  }

  /**
   * Apply an action: a protobuf message (packed in `Any`), a `Payload`, or a JSON value.
   * `stepTimeoutMs` asks the server to stop waiting for the environment
   * (DEADLINE_EXCEEDED, episode aborted); `timeoutMs` bounds the wait here. In a multi-agent
   * world (RFC 0012) the action is `agentId`'s (default: this session's agent to act); an agent
   * not to act is `FailedPrecondition`, another session's `PermissionDenied`.
   */
  async step(action: A, opts: CallOptions & { stepTimeoutMs?: number; agentId?: string } = {}): Promise<StepResult<O>> {
    const resp = await this.request({
      case: "step",
      value: {
        action: encodeValue(action, this.registry),
        timeout: opts.stepTimeoutMs === undefined ? undefined : duration(opts.stepTimeoutMs),
        agentId: opts.agentId ?? "",
      },
    }, opts);
    return this.parseTimeStep(resp.kind.case === "step" ? resp.kind.value.timeStep : undefined);
  }

  /**
   * A simultaneous world's step (RFC 0012): this session's part of the joint action, one
   * action per agent of it that is to act. Answered once the world stepped (every agent to
   * act, of every session, has an action); `stepTimeoutMs` bounds that wait
   * (`DeadlineExceeded`, these actions withdrawn).
   */
  async stepAgents(actions: Record<string, A>, opts: CallOptions & { stepTimeoutMs?: number } = {}):
    Promise<StepResult<O>> {
    const encoded = Object.fromEntries(Object.entries(actions).map(([a, v]) => [a, encodeValue(v, this.registry)]));
    const resp = await this.request({
      case: "step",
      value: {
        actions: encoded,
        timeout: opts.stepTimeoutMs === undefined ? undefined : duration(opts.stepTimeoutMs),
      },
    }, opts);
    return this.parseTimeStep(resp.kind.case === "step" ? resp.kind.value.timeStep : undefined);
  }

  /**
   * The current time step of this session's agents (RFC 0012); with `wait`, once one of them
   * is to act, the episode ended, or a new episode started, that this session has not seen
   * (`waitTimeoutMs`: `DeadlineExceeded` after that long, not fatal). With `seatEvents` (RFC
   * 0016, a server that sets `Capabilities.seat_events`) a wait also ends once another session
   * left or joined the world, or a rejoin deadline passed: the result's `seatEvents` say which.
   * `timeoutMs` bounds the wait on the server as well (see {@link CallOptions}).
   */
  async observe(args: { wait?: boolean; waitTimeoutMs?: number; seatEvents?: boolean } & CallOptions = {}):
    Promise<StepResult<O>> {
    const resp = await this.request({
      case: "observe",
      value: {
        wait: args.wait ?? false,
        timeout: args.waitTimeoutMs === undefined ? undefined : duration(args.waitTimeoutMs),
        seatEvents: args.seatEvents ?? false,
      },
    }, args);
    if (resp.kind.case !== "observe") {
      throw new FailedPrecondition(`expected an observe answer, got ${resp.kind.case}`);
    }
    return this.parseTimeStep(resp.kind.value.timeStep);
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

  /**
   * Open `count` sessions starting from `snapshot` (this session's state now, by default):
   * RFC 0006. Each is claimed by connecting with one of the returned resume tokens
   * (`connect(url, { resumeToken })`) within the server's resume grace.
   */
  async fork(args: { count?: number; snapshot?: Snapshot } & CallOptions = {}): Promise<Forks> {
    const resp = await this.request({ case: "fork", value: { count: args.count ?? 1, snapshot: args.snapshot } }, args);
    if (resp.kind.case !== "fork") {
      throw new FailedPrecondition(`expected a fork answer, got ${resp.kind.case}`);
    }
    return { sessionIds: resp.kind.value.sessionIds, resumeTokens: resp.kind.value.resumeTokens };
  }

  /** One page of a split's tasks (RFC 0004; empty split: the default one). */
  async listTasks(args: { split?: string; offset?: number; limit?: number } & CallOptions = {}): Promise<TaskPage> {
    const resp = await this.request({
      case: "listTasks",
      value: { split: args.split ?? "", offset: BigInt(args.offset ?? 0), limit: args.limit ?? 0 },
    }, args);
    if (resp.kind.case !== "listTasks") {
      throw new FailedPrecondition(`expected a list_tasks answer, got ${resp.kind.case}`);
    }
    const r = resp.kind.value;
    return { tasks: r.tasks, total: Number(r.total), nextOffset: Number(r.nextOffset) };
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

  /** Reset instances of a vectorised session (all when `envIds` is empty); `taskIds`: none, one for all, or one each. */
  async resetBatch(args: { envIds?: number[]; seeds?: (number | bigint)[]; options?: JsonObject; taskIds?: string[] } &
    CallOptions = {}): Promise<{ envIds: number[]; timeSteps: StepResult<O>[] }> {
    const resp = await this.request({
      case: "batchReset",
      value: {
        envIds: args.envIds ?? [],
        seeds: (args.seeds ?? []).map((s) => BigInt(s)),
        options: args.options,
        taskIds: args.taskIds ?? [],
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

  /** The server's live load (RFC 0005); transports implement it outside the session stream. */
  async getLoad(): Promise<ServerLoad> {
    return (await this.getLoadReport()).load;
  }

  /** The server's live load and, for a server of several worker processes, each worker's (RFC 0013). */
  getLoadReport(): Promise<LoadReport> {
    return Promise.reject(new FailedPrecondition("this transport has no GetLoad"));
  }

  /**
   * Leave the session without closing it: the stream is dropped, so the server keeps a
   * resumable session for its grace period. Returns the resume token ("" when the session
   * is not resumable: the server then closes it). This client is unusable afterwards.
   */
  detach(): string {
    const token = this.resumeToken;
    this.over = true;
    this.shutdown();
    return token;
  }

  /** Close the session (the server closes the environment) and the connection. */
  async close(): Promise<void> {
    if (this.transport !== undefined && this.broken === undefined) {
      try {
        await this.request({ case: "close", value: {} }, { timeoutMs: 10_000 });
      } catch (e) {
        if (!(e instanceof EnvError)) {
          throw e;
        }
      }
    }
    this.over = true;
    this.shutdown();
  }

  /** The error that ended the session, if it has ended. */
  get ended(): EnvError | undefined {
    return this.broken;
  }
}

export { fromValue, type JsonValue };
