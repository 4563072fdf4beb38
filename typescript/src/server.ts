/**
 * The gRPC transport: `openenv.v1.EnvironmentService` on @grpc/grpc-js, plus the
 * standard health (`grpc.health.v1.Health`) and reflection services (protocol §1.1).
 *
 * `new Server(definition, options).start()` serves until `stop()`; `serve()` does the
 * same until SIGTERM/SIGINT and then drains (§3.8). The semantics mirror the Python
 * reference server (openenv.server): one stream is one session, requests are answered
 * one at a time in arrival order, errors travel in band as `SessionResponse.error`, and
 * events that answer no request (idle reaping, drain) end the stream with a gRPC status.
 *
 * The listener's guards are those of RFC 0003 (docs/security.md): bearer tokens on every
 * call but health checks (`tokens`, refused with UNAUTHENTICATED before any handler runs),
 * a handshake deadline for silent Session streams (`handshakeTimeoutMs`, DEADLINE_EXCEEDED),
 * no anonymous listener on a non-loopback address unless `allowAnonymous`, and requests whose
 * bytes do not decode answered INVALID_ARGUMENT in band (fatal as the first request) instead
 * of ending the stream.
 */

import { readFileSync } from "node:fs";
import { create, toBinary, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import { DurationSchema, type Duration } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { ReflectionService } from "@grpc/reflection";
import { HealthImplementation, service as healthService } from "grpc-health-check";
import { TokenSet, checkBind, tokenGuard } from "./auth.js";
import type { EnvironmentDefinition } from "./environment.js";
import {
  Aborted,
  DeadlineExceeded,
  EnvError,
  FailedPrecondition,
  InvalidArgument,
  ResourceExhausted,
  internalError,
  statusOf,
  Unimplemented,
} from "./errors.js";
import {
  EnvironmentInfoSchema,
  EnvironmentService,
  GetInfoResponseSchema,
  SessionRequestSchema,
  SessionResponseSchema,
  type GetInfoResponse,
  HandshakeResponseSchema,
  type SessionRequest,
  type SessionResponse,
  type TimeStep,
} from "./gen/openenv/v1/environment_pb.js";
import {
  PROTOCOL_VERSION,
  SERVICE_NAME,
  environmentServiceDefinition,
  fileDescriptorProtos,
  serverOptions,
} from "./grpc.js";
import {
  Runtime,
  Session,
  SessionManager,
  VectorSession,
  type RuntimeOptions,
  type StateOutcome,
} from "./session.js";
import { strictFromBinary } from "./wire.js";
import { GetLoadResponseSchema, type GetLoadResponse } from "./gen/openenv/v1/load_pb.js";
import { DEFAULT_MAX_PIPELINED_REQUESTS, answerPipelined, endsSession } from "./pipelined.js";
import { DEFAULT_RESUME_GRACE_MS, Resumes, type Resumable } from "./resume.js";
import { TaskCatalog, perInstanceTasks, withTask } from "./tasks.js";
import type { ListTasksRequest, ListTasksResponse } from "./gen/openenv/v1/task_pb.js";
import { Seat, Worlds } from "./world.js";
import { digestOf } from "./digest.js";

/**
 * TLS of the listener (RFC 0003): PEM contents (strings or Buffers) or, with the `*File`
 * fields, paths. With `clientCa` the server requires a client certificate signed by it
 * (mutual TLS).
 */
export interface TlsOptions {
  cert?: string | Buffer;
  key?: string | Buffer;
  clientCa?: string | Buffer;
  certFile?: string;
  keyFile?: string;
  clientCaFile?: string;
}

function pem(value: string | Buffer | undefined, file: string | undefined, what: string): Buffer | undefined {
  if (value !== undefined) {
    return Buffer.from(value);
  }
  if (file === undefined) {
    return undefined;
  }
  try {
    return readFileSync(file);
  } catch (e) {
    throw new Error(`cannot read the TLS ${what} ${file}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** The server credentials of `tls` (insecure without it). */
export function serverCredentials(tls: TlsOptions | undefined): grpc.ServerCredentials {
  if (tls === undefined) {
    return grpc.ServerCredentials.createInsecure();
  }
  const cert = pem(tls.cert, tls.certFile, "certificate");
  const key = pem(tls.key, tls.keyFile, "key");
  if (cert === undefined || key === undefined) {
    throw new Error("TLS needs both a certificate and its key");
  }
  const ca = pem(tls.clientCa, tls.clientCaFile, "client CA");
  return grpc.ServerCredentials.createSsl(ca ?? null, [{ cert_chain: cert, private_key: key }], ca !== undefined);
}

/** How many recent step durations GetLoad's percentiles cover. */
const LATENCY_WINDOW = 512;

/** Where and how to serve. */
export interface ServerOptions extends RuntimeOptions {
  /** Interface to listen on (default 127.0.0.1). */
  host?: string;
  /** Port; 0 picks a free one (default 50051). */
  port?: number;
  /** Serve gRPC reflection (default true). */
  reflection?: boolean;
  /**
   * Accepted bearer tokens (RFC 0003): with one or more, every call but the health
   * service's needs `authorization: Bearer <token>` metadata, else it ends with
   * UNAUTHENTICATED and no session is opened (`Capabilities.auth_required`). Not read from
   * the environment here: `TokenSet.load()` (or the CLI) adds `$OPENENV_TOKEN`.
   */
  tokens?: TokenSet | Iterable<string>;
  /** Serve a non-loopback host without a token (refused otherwise; default false). */
  allowAnonymous?: boolean;
  /**
   * A Session stream that has not sent its first request (the handshake) within this
   * many ms ends with DEADLINE_EXCEEDED (`Capabilities.handshake_timeout`; default
   * 10 000; 0 disables).
   */
  handshakeTimeoutMs?: number;
  /**
   * How long a resumable session whose stream dropped is kept for its client to reattach
   * (RFC 0006, `Capabilities.resume_grace`; default 60 000; 0: no resumption).
   */
  resumeGraceMs?: number;
  /** Largest fork count (default: the capacity, when the environment offers snapshots). */
  maxForks?: number;
  /**
   * Most requests one pipelined message may carry (RFC 0009,
   * `Capabilities.max_pipelined_requests`; default 256; 0: pipelined messages are not accepted).
   */
  maxPipelinedRequests?: number;
  /** Serve TLS (`grpcs://`), and mutual TLS with `clientCa`. */
  tls?: TlsOptions;
}

/** Default of {@link ServerOptions.handshakeTimeoutMs}: 10 s. */
export const DEFAULT_HANDSHAKE_TIMEOUT_MS = 10_000;

const SNAKE: Record<string, string> = {
  listTools: "list_tools", callTool: "call_tool", batchReset: "batch_reset", batchStep: "batch_step",
  listTasks: "list_tasks",
};

function durationMs(d: Duration | undefined): number | undefined {
  return d === undefined ? undefined : Number(d.seconds) * 1000 + d.nanos / 1e6;
}

function durationOf(ms: number): Duration {
  const whole = Math.floor(ms / 1000);
  return create(DurationSchema, { seconds: BigInt(whole), nanos: Math.round((ms - whole * 1000) * 1e6) });
}

function majorOf(version: string): number {
  const m = /^([0-9]+)\.([0-9]+)$/.exec(version);
  if (m === null) {
    throw new Error(version);
  }
  return Number(m[1]);
}

/** A request whose bytes did not decode: why, and its id when the bytes start with field 1. */
class Undecodable {
  constructor(readonly error: string, readonly requestId: bigint) {}
}

/** Field 1 (a varint) when `data` starts with it; 0 otherwise (encoders write fields in number order). */
function leadingUint64(data: Uint8Array): bigint {
  if (data[0] !== 0x08) {
    return 0n;
  }
  let value = 0n;
  for (let i = 1; i < Math.min(data.length, 11); i++) {
    value |= BigInt(data[i]! & 0x7f) << BigInt(7 * (i - 1));
    if ((data[i]! & 0x80) === 0) {
      return BigInt.asUintN(64, value);
    }
  }
  return 0n;
}

function decodeRequest(data: Uint8Array): SessionRequest | Undecodable {
  try {
    return strictFromBinary(SessionRequestSchema, data);
  } catch (e) {
    return new Undecodable(`${e instanceof Error ? e.message : String(e)}`.slice(0, 200), leadingUint64(data));
  }
}

/**
 * Serialize a SessionResponse once; one larger than the message limit (which would end the
 * whole stream) is replaced by an in-band, non-fatal RESOURCE_EXHAUSTED for the same request
 * (RFC 0003).
 */
function boundedSerializer(limit: number): (resp: SessionResponse) => Buffer {
  return (resp) => {
    const data = toBinary(SessionResponseSchema, resp);
    if (data.length <= limit) {
      return Buffer.from(data.buffer, data.byteOffset, data.length);
    }
    const kind = (resp.kind.case ?? "nothing").replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
    const err = new ResourceExhausted(
      `the reply (${kind}, ${data.length} bytes) exceeds the ${limit}-byte message limit; the request was carried out`);
    return Buffer.from(toBinary(SessionResponseSchema, create(SessionResponseSchema, {
      requestId: resp.requestId, kind: { case: "error", value: statusOf(err) },
    })));
  };
}

/**
 * The service as registered: Session requests arrive as bytes and are decoded by the
 * handler, so that undecodable ones are answered in band (grpc-js would end the stream with
 * INTERNAL) and a call the token guard refuses is never decoded at all; replies are bounded
 * to `limit` bytes.
 */
function servedDefinition(limit: number): grpc.ServiceDefinition {
  return {
    ...environmentServiceDefinition,
    Session: {
      ...environmentServiceDefinition.Session,
      requestDeserialize: (b: Buffer) => b,
      responseSerialize: boundedSerializer(limit),
    },
  };
}

type AnySession<A, O, S> = Session<A, O, S> | VectorSession<A, O, S> | Seat<A, O, S>;
/** The answer of one request (a SessionResponse.kind), and whether the stream ends after it. */
type Answer = { kind: MessageInitShape<typeof SessionResponseSchema>["kind"]; close?: boolean };
type Call = grpc.ServerDuplexStream<Buffer, SessionResponse>;

/** An environment server on @grpc/grpc-js. `await start()`, then `await stop()`. */
export class Server<A, O, S = undefined> {
  readonly runtime: Runtime<A, O, S>;
  readonly manager: SessionManager<A, O, S>;
  /** Resumable sessions and forks (RFC 0006). */
  readonly resumes: Resumes<A, O, S>;
  /** The bound port, once started. */
  port: number | undefined;
  private readonly host: string;
  private readonly requestedPort: number;
  private grpcServer: grpc.Server | undefined;
  private readonly health = new HealthImplementation({ "": "NOT_SERVING", [SERVICE_NAME]: "NOT_SERVING" });
  /** The accepted bearer tokens (empty: anonymous access). */
  readonly tokens: TokenSet;
  /** The handshake deadline in ms (0: none). */
  readonly handshakeTimeoutMs: number;
  /** Most requests of one pipelined message (0: not accepted). */
  readonly maxPipelinedRequests: number;
  /** The declared tasks (RFC 0004), read at start. */
  tasks: TaskCatalog | undefined;
  /** The worlds of a multi-agent environment (RFC 0012), by join token. */
  readonly worlds: Worlds<A, O, S>;
  /**
   * `sha256:` and the hex SHA-256 of the EnvironmentInfo as served (RFC 0013), set at start:
   * a handshake naming it in `known_info_digest` is answered without the description.
   */
  infoDigest = "";
  private readonly optionsOf = new WeakMap<object, JsonObject>();
  private readonly started = Date.now();
  private stepsTotal = 0n;
  private queuedHandshakes = 0;
  private readonly latencies: number[] = [];
  private latencyNext = 0;

  constructor(definition: EnvironmentDefinition<A, O, S>, private readonly options: ServerOptions = {}) {
    this.runtime = new Runtime(definition, options);
    this.manager = new SessionManager(this.runtime);
    this.host = options.host ?? "127.0.0.1";
    this.requestedPort = options.port ?? 50051;
    const tokens = options.tokens ?? [];
    this.tokens = tokens instanceof TokenSet ? tokens : new TokenSet(tokens);
    const deadline = options.handshakeTimeoutMs ?? DEFAULT_HANDSHAKE_TIMEOUT_MS;
    if (!(deadline >= 0 && Number.isFinite(deadline))) {
      throw new Error(`handshakeTimeoutMs must be a finite number >= 0, got ${deadline}`);
    }
    this.handshakeTimeoutMs = deadline;
    const multi = definition.multiAgent !== undefined;
    this.worlds = new Worlds(this.manager);
    // Worlds are not resumable in 1.4 (RFC 0012): the handshake's flag is ignored.
    const grace = multi ? 0 : options.resumeGraceMs ?? DEFAULT_RESUME_GRACE_MS;
    if (!(grace >= 0 && Number.isFinite(grace))) {
      throw new Error(`resumeGraceMs must be a finite number >= 0, got ${grace}`);
    }
    const snapshots = definition.snapshots ?? false;
    const maxForks = snapshots ? Math.min(options.maxForks ?? this.runtime.maxSessions, this.runtime.maxSessions) : 0;
    this.resumes = new Resumes(this.manager, grace, maxForks);
    const pipelined = options.maxPipelinedRequests ?? DEFAULT_MAX_PIPELINED_REQUESTS;
    if (!(Number.isInteger(pipelined) && pipelined >= 0)) {
      throw new Error(`maxPipelinedRequests must be an integer >= 0, got ${pipelined}`);
    }
    this.maxPipelinedRequests = pipelined;
    const caps = this.runtime.info.capabilities!; // what GetInfo and the handshake tell clients (RFC 0003)
    caps.authRequired = this.tokens.size > 0;
    caps.handshakeTimeout = deadline > 0 ? durationOf(deadline) : undefined;
    caps.resumeGrace = grace > 0 ? durationOf(grace) : undefined; // RFC 0006
    caps.maxForks = maxForks;
    caps.loadReporting = true; // RFC 0005
    caps.pipelinedRequests = pipelined > 0; // RFC 0009
    caps.maxPipelinedRequests = pipelined;
  }

  /** `grpc://host:port` (`grpcs://` with TLS) of the running server. */
  get address(): string {
    const host = ["0.0.0.0", "::", ""].includes(this.host) ? "127.0.0.1" : this.host;
    const scheme = this.options.tls === undefined ? "grpc" : "grpcs";
    return `${scheme}://${host.includes(":") ? `[${host}]` : host}:${this.port}`;
  }

  /** The server's live load (RFC 0005): what GetLoad answers. */
  load(): GetLoadResponse {
    const sorted = [...this.latencies].sort((a, b) => a - b);
    const pct = (q: number): number => sorted.length === 0 ? 0
      : sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))]!;
    return create(GetLoadResponseSchema, {
      load: {
        sessionsOpen: this.manager.active,
        maxSessions: this.runtime.maxSessions,
        queuedHandshakes: this.queuedHandshakes,
        stepLatencyP50: durationOf(pct(0.5)),
        stepLatencyP99: durationOf(pct(0.99)),
        stepsTotal: this.stepsTotal,
        sessionsOpenedTotal: BigInt(this.manager.openedTotal),
        draining: this.manager.draining,
        uptime: durationOf(Date.now() - this.started),
      },
    });
  }

  private recordStep(ms: number): void {
    this.stepsTotal += 1n;
    if (this.latencies.length < LATENCY_WINDOW) {
      this.latencies.push(ms);
    } else {
      this.latencies[this.latencyNext] = ms;
      this.latencyNext = (this.latencyNext + 1) % LATENCY_WINDOW;
    }
  }

  /** Bind, start serving and report SERVING. */
  async start(): Promise<this> {
    checkBind(this.host, this.tokens, this.options.allowAnonymous ?? false);
    this.tasks = await TaskCatalog.of(this.runtime.def as EnvironmentDefinition<unknown, unknown, unknown>);
    if (this.tasks !== undefined) { // RFC 0004
      this.runtime.info.capabilities!.tasks = true;
      this.runtime.info.taskSplits = this.tasks.splitProtos();
    }
    // The description is final now: its digest (RFC 0013), of its deterministic serialization.
    this.infoDigest = digestOf(EnvironmentInfoSchema, this.runtime.info);
    const credentials = serverCredentials(this.options.tls);
    const server = new grpc.Server({
      ...serverOptions(this.runtime.maxMessageBytes, this.runtime.maxSessions),
      interceptors: [tokenGuard(this.tokens)],
    });
    server.addService(servedDefinition(this.runtime.maxMessageBytes), {
      Session: (call: Call) => this.session(call),
      GetInfo: (_call: unknown, callback: grpc.sendUnaryData<GetInfoResponse>) => {
        callback(null, create(GetInfoResponseSchema, { info: this.runtime.info, infoDigest: this.infoDigest }));
      },
      GetLoad: (_call: unknown, callback: grpc.sendUnaryData<GetLoadResponse>) => {
        callback(null, this.load());
      },
    });
    this.health.addToServer(server);
    if (this.options.reflection ?? true) {
      const pkg = {
        [SERVICE_NAME]: { fileDescriptorProtos: fileDescriptorProtos(EnvironmentService) },
        "grpc.health.v1.Health": healthService.Check!.requestType,
      };
      new ReflectionService(pkg as never).addToServer(server);
    }
    const host = this.host.includes(":") ? `[${this.host}]` : this.host;
    this.port = await new Promise<number>((resolve, reject) => {
      server.bindAsync(`${host}:${this.requestedPort}`, credentials, (err, port) => {
        if (err) {
          reject(new Error(`cannot bind ${this.host}:${this.requestedPort}: ${err.message}`));
        } else {
          resolve(port);
        }
      });
    });
    this.grpcServer = server;
    for (const name of ["", SERVICE_NAME]) {
      this.health.setStatus(name, "SERVING");
    }
    this.manager.startReaper();
    return this;
  }

  /** Drain: NOT_SERVING, refuse new sessions, finish requests in progress, end sessions. */
  async stop(graceMs = 10_000): Promise<void> {
    const server = this.grpcServer;
    if (server === undefined) {
      return;
    }
    this.grpcServer = undefined;
    for (const name of ["", SERVICE_NAME]) {
      this.health.setStatus(name, "NOT_SERVING");
    }
    await this.manager.drain(graceMs);
    await new Promise<void>((resolve) => {
      const force = setTimeout(() => {
        server.forceShutdown();
        resolve();
      }, Math.min(graceMs, 1000));
      server.tryShutdown(() => {
        clearTimeout(force);
        resolve();
      });
    });
    await this.resumes.closeParked();
    await this.manager.shutdown();
  }

  // ----------------------------------------------------------------- one Session stream

  private session(call: Call): void {
    const stream = {}; // this stream's identity, for the resume registry
    let session: AnySession<A, O, S> | undefined;
    let entry: Resumable<A, O, S> | undefined; // set when the session is resumable (RFC 0006)
    let first = true;
    let ended = false; // nothing more is written
    let chain: Promise<void> = Promise.resolve();
    // The handshake deadline (RFC 0003): a stream silent for that long ends DEADLINE_EXCEEDED.
    const limit = this.handshakeTimeoutMs;
    let deadline: NodeJS.Timeout | undefined = limit > 0
      ? setTimeout(() => terminate(new DeadlineExceeded(`no handshake within ${limit / 1000} s`)), limit)
      : undefined;
    const arrived = (): void => {
      clearTimeout(deadline);
      deadline = undefined;
    };

    /** The stream is done with its session: `over` (close, fatal error, idle, drain) closes it;
     *  otherwise a resumable session is parked for its client to come back. */
    const release = async (over: boolean): Promise<void> => {
      const e = entry;
      entry = undefined;
      if (e !== undefined) {
        if (!over && !this.manager.draining && !e.session.closed) {
          this.resumes.park(e);
          session = undefined;
          return;
        }
        this.resumes.forget(e);
        await e.journal.settle();
      }
      const s = session;
      session = undefined;
      if (s !== undefined) {
        await s.close();
      }
    };
    const finish = async (over: boolean): Promise<void> => {
      if (!ended) {
        ended = true;
        call.end();
      }
      await release(over);
    };
    const write = (resp: SessionResponse): void => {
      if (!ended) {
        call.write(resp);
      }
    };
    const endWith = (err: EnvError): void => {
      if (!ended) {
        ended = true;
        call.emit("error", { code: err.code, details: err.message });
      }
    };
    const terminate = (err: EnvError): void => { // idle timeout, drain: the stream's gRPC status
      endWith(err);
      void release(true);
    };
    const dropped = (): void => { // the client went away: a resumable session is parked at once
      ended = true;
      if (session instanceof Seat) { // leave the world now: requests waiting in it end, its agents are free
        void release(true);
      } else if (entry !== undefined) {
        void release(false);
      } else {
        enqueue(() => release(false));
      }
    };

    const handle = async (req: SessionRequest | Undecodable): Promise<void> => {
      if (ended) {
        return; // requests after close or a fatal error are never answered
      }
      const answer = (kind: Answer["kind"]): SessionResponse =>
        create(SessionResponseSchema, { requestId: req.requestId, kind });
      if (req instanceof Undecodable) { // in band, never dispatched; it ends only a session not yet open
        const err = new InvalidArgument(`undecodable SessionRequest (${req.error})`, { fatal: first });
        write(answer({ case: "error", value: statusOf(err) }));
        if (first) {
          first = false;
          await finish(true);
        }
        return;
      }
      if (first) {
        first = false;
        let hello: MessageInitShape<typeof HandshakeResponseSchema>;
        try {
          [session, entry, hello] = await this.handshake(req, stream);
        } catch (e) {
          const err = internalError(e);
          err.fatal = true;
          write(answer({ case: "error", value: statusOf(err) }));
          await finish(true);
          return;
        }
        session.setTerminate(terminate);
        if (entry !== undefined) {
          entry.onTakeover = () => { // another stream resumed this session: end this one, keep the session
            endWith(new Aborted("the session was resumed on another stream"));
            void release(false);
          };
        }
        if (ended) { // the client went away during the handshake
          await release(false);
          return;
        }
        write(answer({ case: "handshake", value: hello }));
        return;
      }
      const s = session!;
      const e = entry;
      const one = (item: SessionRequest): Promise<SessionResponse> => e !== undefined
        ? e.journal.answer(item, () => this.answer(s, item)) // exactly once across reconnects
        : this.answer(s, item);
      let answers: SessionResponse[];
      let over: boolean;
      if (req.kind.case === "pipelined") { // several requests in one message (RFC 0009)
        [answers, over] = await answerPipelined(req, one, this.maxPipelinedRequests, this.runtime.maxMessageBytes);
      } else {
        const resp = await one(req);
        [answers, over] = [[resp], endsSession(resp)];
      }
      answers.forEach(write);
      if (over) {
        await finish(true);
      }
    };

    const enqueue = (step: () => Promise<void>): void => {
      chain = chain.then(step).catch((e: unknown) => {
        console.error("openenv: session stream failed:", e);
      });
    };
    call.on("data", (data: Buffer) => {
      arrived();
      const req = decodeRequest(data);
      enqueue(() => handle(req));
    });
    call.on("end", () => { // half-close: answer what was sent, then end OK (a resumable session is kept)
      arrived();
      enqueue(() => finish(false));
    });
    call.on("cancelled", () => {
      arrived();
      dropped();
    });
    call.on("error", () => {
      arrived();
      dropped();
    });
  }

  private async handshake(req: SessionRequest, stream: object):
    Promise<[AnySession<A, O, S>, Resumable<A, O, S> | undefined, MessageInitShape<typeof HandshakeResponseSchema>]> {
    if (req.kind.case !== "handshake") {
      throw new FailedPrecondition(
        `the first request of a session must be a handshake, got ${SNAKE[req.kind.case ?? ""] ?? req.kind.case ?? "nothing"}`);
    }
    const hs = req.kind.value;
    if (hs.protocolVersion === "") {
      throw new InvalidArgument('handshake.protocol_version is required (e.g. "1.0")');
    }
    let major: number;
    try {
      major = majorOf(hs.protocolVersion);
    } catch {
      throw new FailedPrecondition(`unparsable protocol_version ${JSON.stringify(hs.protocolVersion)}: expected ` +
        `"MAJOR.MINOR"; this server speaks ${PROTOCOL_VERSION}`);
    }
    if (major !== majorOf(PROTOCOL_VERSION)) {
      throw new FailedPrecondition(
        `protocol version ${hs.protocolVersion} is not supported; this server speaks ${PROTOCOL_VERSION}`);
    }
    const known = hs.knownInfoDigest !== "" && hs.knownInfoDigest === this.infoDigest; // the client holds it (RFC 0013)
    const hello = {
      sessionId: "", protocolVersion: PROTOCOL_VERSION, info: known ? undefined : this.runtime.info,
      infoDigest: this.infoDigest, resumeToken: "", resumed: false,
    };
    const multi = this.runtime.def.multiAgent !== undefined;
    if (hs.world !== undefined && !multi) {
      throw new FailedPrecondition(`${this.runtime.def.name} has one agent: a handshake may not name a world`,
        { fatal: true });
    }
    if (multi && hs.resumeToken === "") { // RFC 0012: create a world, or join one by its token
      if (hs.numEnvs > 1) {
        throw new FailedPrecondition("a multi-agent environment has no vectorised sessions", { fatal: true });
      }
      const ids = hs.world?.agentIds ?? [];
      const token = hs.world?.joinToken ?? "";
      let seat: Seat<A, O, S>;
      if (token !== "") {
        seat = this.worlds.join(token, ids);
      } else {
        this.queuedHandshakes += 1;
        try {
          seat = await this.worlds.create(hs.options ?? {}, hs.clientName, ids);
        } finally {
          this.queuedHandshakes -= 1;
        }
      }
      return [seat, undefined, { ...hello, sessionId: seat.id, world: seat.info() }];
    }
    if (hs.resumeToken !== "") { // RFC 0006: reattach a dropped session, or claim a fork
      const entry = await this.resumes.take(hs.resumeToken, stream);
      return [entry.session, entry, { ...hello, sessionId: entry.session.id, resumeToken: entry.token, resumed: true }];
    }
    const options = hs.options ?? {};
    this.queuedHandshakes += 1;
    let session: AnySession<A, O, S>;
    try {
      session = hs.numEnvs > 1
        ? new VectorSession(await this.manager.openMany(hs.numEnvs, options, hs.clientName), hs.autoresetMode)
        : await this.manager.open(options, hs.clientName);
    } finally {
      this.queuedHandshakes -= 1;
    }
    let entry: Resumable<A, O, S> | undefined;
    if (session instanceof Session) {
      this.optionsOf.set(session, options);
      if (hs.resumable && this.resumes.graceMs > 0) { // vectorised sessions are not resumable
        entry = this.resumes.register(session, stream);
      }
    }
    return [session, entry, { ...hello, sessionId: session.id, resumeToken: entry?.token ?? "" }];
  }

  /** The answer to one request: its result, or its error (never rejects). */
  private async answer(session: AnySession<A, O, S>, req: SessionRequest): Promise<SessionResponse> {
    let out: Answer;
    const stepping = req.kind.case === "step" || req.kind.case === "batchStep";
    const t0 = stepping ? performance.now() : 0;
    try {
      out = await this.dispatch(session, req);
      if (stepping) {
        this.recordStep(performance.now() - t0);
      }
    } catch (e) {
      const err = internalError(e);
      out = { kind: { case: "error", value: statusOf(err) } };
    }
    return create(SessionResponseSchema, { requestId: req.requestId, kind: out.kind });
  }

  private async dispatch(session: AnySession<A, O, S>, req: SessionRequest): Promise<Answer> {
    if (session instanceof VectorSession) {
      return await this.dispatchVector(session, req);
    }
    if (session instanceof Seat) {
      return await this.dispatchSeat(session, req);
    }
    const rt = this.runtime;
    const k = req.kind;
    switch (k.case) {
      case "step": {
        session.requireSim("step"); // the kind is not served: before the action is even decoded
        const action = rt.actionCodec.decode(k.value.action);
        const r = await session.step(action, durationMs(k.value.timeout));
        return { kind: { case: "step", value: { timeStep: rt.timeStep(r) } } };
      }
      case "reset": {
        session.requireSim("reset");
        const options = withTask(this.tasks, k.value.taskId, k.value.options ?? {}); // RFC 0004
        const r = await session.reset(k.value.seed, k.value.episodeId || undefined, options);
        return { kind: { case: "reset", value: { timeStep: rt.timeStep(r) } } };
      }
      case "state":
        return this.stateAnswer(await session.state());
      case "listTools":
        return { kind: { case: "listTools", value: { tools: session.listTools() } } };
      case "callTool": {
        const result = await session.callTool(k.value.name, k.value.arguments ?? {}, durationMs(k.value.timeout));
        return { kind: { case: "callTool", value: { name: k.value.name, result } } };
      }
      case "snapshot":
        return { kind: { case: "snapshot", value: { snapshot: await session.snapshot() } } };
      case "restore": {
        if (k.value.snapshot === undefined) {
          throw new InvalidArgument("restore needs a snapshot");
        }
        await session.restore(k.value.snapshot);
        return {
          kind: {
            case: "restore",
            value: { episodeId: session.episodeId, stepCount: BigInt(session.stepCount), status: session.status },
          },
        };
      }
      case "fork": { // RFC 0006: sessions parked for a client to claim with their tokens
        const options = this.optionsOf.get(session) ?? {};
        const forks = await this.resumes.fork(session, options, k.value.count, k.value.snapshot);
        forks.forEach((f) => this.optionsOf.set(f.session, options)); // a fork's forks are made alike
        return {
          kind: {
            case: "fork",
            value: { sessionIds: forks.map((f) => f.session.id), resumeTokens: forks.map((f) => f.token) },
          },
        };
      }
      case "listTasks":
        return { kind: { case: "listTasks", value: this.listTasks(k.value) } };
      case "close":
        return { kind: { case: "close", value: {} }, close: true };
      case "handshake":
        throw new FailedPrecondition("the session is already open: handshake may only be sent once");
      case "batchReset":
      case "batchStep":
        throw new FailedPrecondition(`${SNAKE[k.case]} needs a vectorised session (handshake num_envs > 1)`);
      case "observe":
        throw new FailedPrecondition("observe is for multi-agent environments only (RFC 0012): use state");
      default:
        throw new InvalidArgument("request has no kind set");
    }
  }

  /** A request of a session in a multi-agent world (RFC 0012). */
  private async dispatchSeat(seat: Seat<A, O, S>, req: SessionRequest): Promise<Answer> {
    const rt = this.runtime;
    const k = req.kind;
    switch (k.case) {
      case "step": {
        const v = k.value;
        const action = v.action === undefined ? undefined : rt.actionCodec.decode(v.action);
        const actions = new Map(Object.entries(v.actions).map(([a, p]) => [a, rt.actionCodec.decode(p)] as const));
        const ts = await seat.step(action, v.agentId, actions, durationMs(v.timeout), durationMs(req.waitTimeout));
        return { kind: { case: "step", value: { timeStep: ts } } };
      }
      case "reset": {
        if (k.value.taskId !== "") {
          throw new Unimplemented("worlds have no tasks (RFC 0012)");
        }
        const ts = await seat.reset(k.value.seed, k.value.episodeId || undefined, k.value.options ?? {},
          durationMs(req.waitTimeout));
        return { kind: { case: "reset", value: { timeStep: ts } } };
      }
      case "observe": {
        const ts = await seat.observe(k.value.wait, durationMs(k.value.timeout), durationMs(req.waitTimeout),
          k.value.seatEvents);
        return { kind: { case: "observe", value: { timeStep: ts } } };
      }
      case "state":
        return this.stateAnswer(await seat.state());
      case "close":
        return { kind: { case: "close", value: {} }, close: true };
      case "handshake":
        throw new FailedPrecondition("the session is already open: handshake may only be sent once");
      case "batchReset":
      case "batchStep":
        throw new FailedPrecondition(`${SNAKE[k.case]} needs a vectorised session; worlds have none (RFC 0012)`);
      case undefined:
        throw new InvalidArgument("request has no kind set");
      default:
        throw new Unimplemented(`${SNAKE[k.case] ?? k.case} is not offered for multi-agent worlds (RFC 0012)`);
    }
  }

  private listTasks(req: ListTasksRequest): ListTasksResponse {
    if (this.tasks === undefined) {
      throw new Unimplemented("this environment declares no tasks (Capabilities.tasks is false)");
    }
    return this.tasks.page(req);
  }

  private async dispatchVector(vs: VectorSession<A, O, S>, req: SessionRequest): Promise<Answer> {
    const rt = this.runtime;
    const k = req.kind;
    switch (k.case) {
      case "batchStep": {
        const actions = k.value.actions.map((a) => rt.actionCodec.decode(a));
        const [ids, results, finals] = await vs.step(k.value.envIds, actions, durationMs(k.value.timeout));
        const finalTimeSteps: Record<number, TimeStep> = {};
        for (const [i, r] of finals) {
          finalTimeSteps[i] = rt.timeStep(r);
        }
        return {
          kind: { case: "batchStep", value: { envIds: ids, timeSteps: results.map((r) => rt.timeStep(r)), finalTimeSteps } },
        };
      }
      case "batchReset": {
        const options = k.value.options ?? {};
        const taskIds = k.value.taskIds;
        const optionsOf = taskIds.length === 0 ? undefined // RFC 0004: one task for all, or one each
          : (n: number): JsonObject[] => perInstanceTasks(taskIds, n).map((t) => withTask(this.tasks, t, options));
        const [ids, results] = await vs.reset(k.value.envIds, k.value.seeds, options, optionsOf);
        return { kind: { case: "batchReset", value: { envIds: ids, timeSteps: results.map((r) => rt.timeStep(r)) } } };
      }
      case "state":
        return this.stateAnswer(await vs.state(k.value.envId));
      case "listTasks":
        return { kind: { case: "listTasks", value: this.listTasks(k.value) } };
      case "close":
        return { kind: { case: "close", value: {} }, close: true };
      case "handshake":
        throw new FailedPrecondition("the session is already open: handshake may only be sent once");
      case undefined:
        throw new InvalidArgument("request has no kind set");
      default:
        throw new FailedPrecondition(`${SNAKE[k.case] ?? k.case} is not available in a vectorised session: ` +
          "use batch_reset / batch_step / state(env_id)");
    }
  }

  private stateAnswer(s: StateOutcome<S>): Answer {
    return {
      kind: {
        case: "state",
        value: {
          episodeId: s.episodeId, stepCount: BigInt(s.stepCount), status: s.status,
          state: s.state === undefined ? undefined : this.runtime.stateCodec.encode(s.state),
        },
      },
    };
  }
}

/** Options of {@link serve}. */
export interface ServeOptions extends ServerOptions {
  /** How long a drain waits for requests in progress (default 10 s). */
  graceMs?: number;
  /** Called with the started server (e.g. to print its address). */
  ready?: (server: Server<unknown, unknown, unknown>) => void;
}

/** Serve an environment until SIGTERM/SIGINT, then drain gracefully. */
export async function serve<A, O, S>(definition: EnvironmentDefinition<A, O, S>, options: ServeOptions = {}): Promise<void> {
  const server = new Server(definition, options);
  await server.start();
  options.ready?.(server as unknown as Server<unknown, unknown, unknown>);
  await new Promise<void>((resolve) => {
    const stop = (): void => {
      process.off("SIGTERM", stop);
      process.off("SIGINT", stop);
      resolve();
    };
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
  });
  await server.stop(options.graceMs ?? 10_000);
}

export type { JsonObject };
