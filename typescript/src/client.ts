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
 * URLs: `grpc://host:port` (or `host:port`), `grpcs://host:port` (TLS: `ca`/`caFile` to
 * trust, `clientCert`/`clientKey` for mutual TLS), and `ws://host:port/v1/session` /
 * `wss://...` for the binary WebSocket transport (RFC 0011, ws.ts).
 *
 * What you may rely on (core.ts has the transport-free details):
 *
 * - Every request carries an id and its answer is matched by id, so a call that times
 *   out on the client (`timeoutMs`) never shifts the answers of later calls.
 * - Calls may be issued without awaiting the previous one (pipelining): they are sent in
 *   call order and answered in that order; requests issued while a message awaits its
 *   answer go out together as one pipelined message (RFC 0009).
 * - Errors reject with the class of the protocol's error table ({@link EnvError}
 *   subclasses, `code` = google.rpc.Code); `fatal` ones mean the session is over.
 * - Typed observations (`Payload.message`) are decoded with the descriptors the server
 *   advertises: no precompiled stubs are needed.
 * - A `token` (default `$OPENENV_TOKEN`) travels as `authorization: Bearer <token>`
 *   metadata on every call (RFC 0003); a server that refuses it ends the session with
 *   {@link Unauthenticated}.
 * - `resumable: true` (RFC 0006) survives dropped connections; `fork()` opens sessions
 *   claimed with `connect(url, { resumeToken })`; `getLoad()` reads the server's load (RFC 0005).
 */

import { readFileSync } from "node:fs";
import { create, type JsonValue } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { TOKEN_ENV } from "./auth.js";
import type { AnyValue } from "./codec.js";
import {
  SessionClient,
  fromValue,
  loadReportOf,
  type Connector,
  type LoadReport,
  type SessionOptions,
} from "./core.js";
import { EnvError, Unavailable } from "./errors.js";
import { GetLoadRequestSchema, ServerLoadSchema, type GetLoadResponse, type ServerLoad } from "./gen/openenv/v1/load_pb.js";
import { clientOptions, environmentServiceDefinition, parseUrl } from "./grpc.js";
import { httpSideCall, isWebSocketUrl, webSocketConnector, type WebSocketOptions } from "./ws.js";

export {
  AutoresetMode,
  EpisodeStatus,
  INFO_CACHE_SIZE,
  SessionClient,
  WAIT_GRACE_MS,
  infoOf,
  knownInfoDigest,
  loadReportOf,
  type AgentStep,
  type CallOptions,
  type LoadReport,
  type FeedbackLevel,
  type Forks,
  type GradingInfo,
  type SeatEvent,
  type SessionOptions,
  type SessionState,
  type StepResult,
  type TaskPage,
  type ToolResultValue,
  type Transport,
  type TransportSink,
  type Connector,
} from "./core.js";

/** A PEM value: its contents, or (`*File` options) a path. */
type Pem = string | Uint8Array;

/** Options of {@link EnvClient.connect}. */
export interface ClientOptions extends SessionOptions {
  /** Keepalive ping interval, in ms (default 30 s, protocol §9). */
  keepaliveMs?: number;
  /**
   * Bearer token for a server that requires one (RFC 0003), sent as `authorization:
   * Bearer <token>` metadata on every call; default `$OPENENV_TOKEN`. An empty string sends none.
   */
  token?: string;
  /** TLS (`grpcs://`, `wss://`): the CA certificates to trust (PEM; default: the system's). */
  ca?: Pem;
  /** The same, from a file. */
  caFile?: string;
  /** Mutual TLS: this client's certificate chain (PEM) ... */
  clientCert?: Pem;
  /** ... and its private key (PEM). */
  clientKey?: Pem;
  /** The same two, from files. */
  clientCertFile?: string;
  clientKeyFile?: string;
}

/** The call metadata carrying `token` (RFC 0003); empty without one. */
export function tokenMetadata(token: string | undefined): grpc.Metadata {
  const md = new grpc.Metadata();
  if (token) {
    md.set("authorization", `Bearer ${token}`);
  }
  return md;
}

function pem(value: Pem | undefined, file: string | undefined): Buffer | undefined {
  if (value !== undefined) {
    return Buffer.from(value);
  }
  return file === undefined ? undefined : readFileSync(file);
}

/** The TLS material of `opts` (undefined parts are the defaults). */
export function tlsMaterial(opts: ClientOptions): { ca?: Buffer; cert?: Buffer; key?: Buffer } {
  return {
    ca: pem(opts.ca, opts.caFile),
    cert: pem(opts.clientCert, opts.clientCertFile),
    key: pem(opts.clientKey, opts.clientKeyFile),
  };
}

function channelCredentials(url: string, opts: ClientOptions): grpc.ChannelCredentials {
  if (!url.startsWith("grpcs://")) {
    return grpc.credentials.createInsecure();
  }
  const { ca, cert, key } = tlsMaterial(opts);
  if ((cert === undefined) !== (key === undefined)) {
    throw new Error("mutual TLS needs both clientCert and clientKey");
  }
  return grpc.credentials.createSsl(ca ?? null, key ?? null, cert ?? null);
}

/** An async session with one environment server (one environment instance, or N). */
export class EnvClient<A = unknown, O = AnyValue, S = AnyValue> extends SessionClient<A, O, S> {
  private readonly client: grpc.Client | undefined;
  private readonly token: string | undefined;

  private constructor(url: string, private readonly clientOpts: ClientOptions) {
    const token = clientOpts.token ?? process.env[TOKEN_ENV];
    let client: grpc.Client | undefined;
    let connector: Connector;
    if (isWebSocketUrl(url)) {
      const { ca, cert, key } = tlsMaterial(clientOpts);
      const wsOpts: WebSocketOptions = { token, ca, cert, key, maxMessageBytes: clientOpts.maxMessageBytes };
      connector = webSocketConnector(url, wsOpts);
    } else {
      const max = clientOpts.maxMessageBytes ?? 64 * 1024 * 1024;
      const Ctor = grpc.makeGenericClientConstructor(environmentServiceDefinition, "EnvironmentService");
      client = new Ctor(parseUrl(url), channelCredentials(url, clientOpts), clientOptions(max, clientOpts.keepaliveMs ?? 30_000));
      const c = client;
      connector = (sink) => grpcConnector(c, url, token, clientOpts.connectTimeoutMs ?? 30_000)(sink);
    }
    super(url, clientOpts, connector);
    this.client = client;
    this.token = token;
  }

  /** Open the connection and the session (handshake). */
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

  /** The server's live load (RFC 0005) and its workers' (RFC 0013): `GetLoad` over gRPC,
   *  `GET /load` beside a WebSocket URL. */
  override async getLoadReport(): Promise<LoadReport> {
    if (this.client === undefined) {
      const { ca, cert, key } = tlsMaterial(this.clientOpts);
      return loadReportOf(await httpSideCall(this.url, "/load", { token: this.token, ca, cert, key }));
    }
    const client = this.client;
    const method = environmentServiceDefinition.GetLoad;
    return await new Promise<LoadReport>((resolve, reject) => {
      client.makeUnaryRequest(method.path, method.requestSerialize, method.responseDeserialize,
        create(GetLoadRequestSchema), tokenMetadata(this.token),
        { deadline: Date.now() + (this.clientOpts.connectTimeoutMs ?? 30_000) },
        (err: grpc.ServiceError | null, value?: unknown) => {
          if (err) {
            reject(EnvError.fromCode(err.code, err.details || grpc.status[err.code] || "GetLoad failed"));
          } else {
            const r = value as GetLoadResponse;
            resolve({ load: r.load ?? create(ServerLoadSchema), workers: r.workers });
          }
        });
    });
  }

  protected override shutdown(): void {
    super.shutdown();
    this.client?.close();
  }
}

/** The ServerLoad of `GET /load` (proto3 JSON, docs/protocol.md §1.1). */
export function serverLoadOf(body: unknown): ServerLoad {
  return loadReportOf(body).load;
}

/** A connector opening `Session` streams on a grpc-js channel. */
function grpcConnector(client: grpc.Client, url: string, token: string | undefined, connectMs: number): Connector {
  return async (sink) => {
    await new Promise<void>((resolve, reject) => {
      client.waitForReady(Date.now() + connectMs, (err) => {
        if (err) {
          reject(new Unavailable(`cannot connect to ${url} within ${connectMs / 1000} s`, { fatal: true }));
        } else {
          resolve();
        }
      });
    });
    const call = client.makeBidiStreamRequest<Uint8Array, Buffer>(
      environmentServiceDefinition.Session.path,
      (m: Uint8Array) => Buffer.from(m.buffer, m.byteOffset, m.byteLength),
      (b: Buffer) => b,
      tokenMetadata(token));
    let done = false;
    call.on("data", (b: Buffer) => sink.message(b));
    call.on("error", (err: grpc.ServiceError) => {
      if (!done) {
        done = true;
        sink.closed(EnvError.fromCode(err.code, err.details || grpc.status[err.code] || "stream failed", { fatal: true }));
      }
    });
    call.on("status", (st: grpc.StatusObject) => {
      if (st.code === grpc.status.OK && !done) {
        done = true;
        sink.closed(undefined);
      }
    });
    return {
      send: (data) => {
        call.write(data);
      },
      end: () => call.end(),
      cancel: () => call.cancel(),
    };
  };
}

export { fromValue, type JsonValue };
