/**
 * Helpers of the TypeScript tests: servers on real loopback sockets (port 0), raw
 * protocol streams over @grpc/grpc-js, bounded waits and a shortest-path gridworld
 * policy. Nothing is mocked: every test talks gRPC over 127.0.0.1.
 */

import { create, toBinary, type MessageInitShape } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import * as net from "node:net";
import { distances } from "../src/envs/gridworld.js";
import type { EnvironmentDefinition } from "../src/environment.js";
import {
  SessionRequestSchema,
  type SessionResponse,
} from "../src/gen/openenv/v1/environment_pb.js";
import { Move, type Observation } from "../src/gen/gridworld/v1/gridworld_pb.js";
import { environmentServiceDefinition, parseUrl } from "../src/grpc.js";
import { Server, type ServerOptions } from "../src/server.js";

/** Upper bound of every wait in these tests (never a timing assertion). */
export const WAIT_MS = 10_000;

/** Run `fn` with a started server on 127.0.0.1:0, stopped afterwards. */
export async function withServer<A, O, S, T>(def: EnvironmentDefinition<A, O, S>, opts: ServerOptions,
                                              fn: (server: Server<A, O, S>) => Promise<T>): Promise<T> {
  const server = await new Server(def, { host: "127.0.0.1", port: 0, ...opts }).start();
  try {
    return await fn(server);
  } finally {
    await server.stop(1000);
  }
}

/** Poll `pred` until true; throw after `timeoutMs`. */
export async function waitUntil(pred: () => boolean, what: string, timeoutMs = WAIT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** How a raw stream ended: its gRPC status. */
export interface StreamEnd {
  code: grpc.status;
  details: string;
}

/** One Session stream driven by hand: the protocol, byte for byte. */
export class RawSession {
  private readonly client: grpc.Client;
  private readonly call: grpc.ClientDuplexStream<Uint8Array, SessionResponse>;
  private readonly queue: SessionResponse[] = [];
  private waiters: (() => void)[] = [];
  end: StreamEnd | undefined;

  /** `metadata`: sent with the call (e.g. `authorization`); none by default. */
  constructor(url: string, metadata: grpc.Metadata = new grpc.Metadata()) {
    const Ctor = grpc.makeGenericClientConstructor(environmentServiceDefinition, "EnvironmentService");
    this.client = new Ctor(parseUrl(url), grpc.credentials.createInsecure());
    this.call = this.client.makeBidiStreamRequest<Uint8Array, SessionResponse>(
      environmentServiceDefinition.Session.path, (b: Uint8Array) => Buffer.from(b),
      environmentServiceDefinition.Session.responseDeserialize as (b: Buffer) => SessionResponse, metadata);
    this.call.on("data", (r: SessionResponse) => {
      this.queue.push(r);
      this.wake();
    });
    this.call.on("error", (e: grpc.ServiceError) => {
      this.end ??= { code: e.code, details: e.details };
      this.wake();
    });
    this.call.on("status", (s: grpc.StatusObject) => {
      this.end ??= { code: s.code, details: s.details };
      this.wake();
    });
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    w.forEach((f) => f());
  }

  /** Write one request (raw bytes allowed, e.g. to send an unset kind). */
  send(req: MessageInitShape<typeof SessionRequestSchema>): void {
    this.call.write(toBinary(SessionRequestSchema, create(SessionRequestSchema, req)));
  }

  /** Write bytes as one request message, whatever they hold. */
  sendBytes(bytes: Uint8Array): void {
    this.call.write(bytes);
  }

  /** Half-close the request side. */
  halfClose(): void {
    this.call.end();
  }

  /** The next response, or undefined when the stream ended first. */
  async recv(waitMs = WAIT_MS): Promise<SessionResponse | undefined> {
    const deadline = Date.now() + waitMs;
    while (this.queue.length === 0 && this.end === undefined) {
      if (Date.now() > deadline) {
        throw new Error("no response within the wait bound");
      }
      await new Promise<void>((r) => {
        this.waiters.push(r);
        setTimeout(r, 100);
      });
    }
    return this.queue.shift();
  }

  /** Wait for the end of the stream. */
  async ended(waitMs = WAIT_MS): Promise<StreamEnd> {
    await waitUntil(() => this.end !== undefined, "the end of the stream", waitMs);
    return this.end!;
  }

  close(): void {
    this.call.cancel();
    this.client.close();
  }
}

/** A handshake request. */
export const HANDSHAKE = { case: "handshake", value: { protocolVersion: "1.0", clientName: "raw" } } as const;

/** The move that follows a shortest path to the goal (BFS on the observed grid). */
export function bestMove(obs: Observation): Move {
  const toGoal = distances(obs.grid, [obs.goal!.row, obs.goal!.col]);
  const here = toGoal.get(`${obs.agent!.row},${obs.agent!.col}`)!;
  const moves: [Move, number, number][] = [[Move.UP, -1, 0], [Move.DOWN, 1, 0], [Move.LEFT, 0, -1], [Move.RIGHT, 0, 1]];
  for (const [move, dr, dc] of moves) {
    if (toGoal.get(`${obs.agent!.row + dr},${obs.agent!.col + dc}`) === here - 1) {
      return move;
    }
  }
  throw new Error("no move gets closer to the goal");
}

/**
 * A loopback TCP proxy (port 0) in front of `upstream` (`host:port`): `cut()` drops every
 * connection through it at once, as a network failure would; new connections go through.
 */
export class TcpProxy {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  port = 0;
  cuts = 0;

  private constructor(private readonly upstream: { host: string; port: number }) {
    this.server = net.createServer((client) => {
      const remote = net.connect(this.upstream.port, this.upstream.host);
      for (const s of [client, remote]) {
        s.setNoDelay(true);
        this.sockets.add(s);
        s.on("close", () => this.sockets.delete(s));
        s.on("error", () => undefined);
      }
      client.pipe(remote);
      remote.pipe(client);
      client.on("close", () => remote.destroy());
      remote.on("close", () => client.destroy());
    });
  }

  static async start(upstreamUrl: string): Promise<TcpProxy> {
    const u = new URL(upstreamUrl.includes("://") ? upstreamUrl : `grpc://${upstreamUrl}`);
    const p = new TcpProxy({ host: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port) });
    await new Promise<void>((resolve) => p.server.listen(0, "127.0.0.1", resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  /** The upstream URL with the proxy's port instead. */
  url(upstreamUrl: string): string {
    return upstreamUrl.replace(/:[0-9]+(\/|$)/, `:${this.port}$1`);
  }

  /** Drop every connection (both sides), as a network failure does. */
  cut(): void {
    this.cuts += 1;
    for (const s of this.sockets) {
      s.resetAndDestroy();
    }
  }

  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
