/**
 * The binary WebSocket transport of RFC 0011 (docs/protocol.md §1.5), client side: the
 * `Session` stream as one binary WebSocket message per `SessionRequest` / `SessionResponse`,
 * at `ws(s)://HOST:PORT[/prefix]/v1/session`, subprotocol `openenv.v1+proto`.
 *
 * Browser-safe: this module imports nothing of Node.js. In a browser it uses the standard
 * `WebSocket` (the bearer token travels as the offered subprotocol `bearer.<token>`, since
 * browsers cannot set headers); under Node.js it loads ws_node.ts, a small RFC 6455 client
 * on node:http(s) that sends `Authorization: Bearer` and takes TLS material (CA, client
 * certificate) as the gRPC client does.
 *
 * Close codes map back to the protocol's statuses: 1000 the stream ended normally; `4000 + c`
 * status `c` with the reason as message; 1009 RESOURCE_EXHAUSTED; anything else (a lost
 * connection) UNAVAILABLE, after which a resumable session is reattached.
 */

import type { Connector, Transport } from "./core.js";
import { EnvError, ErrorCode, ResourceExhausted, Unavailable } from "./errors.js";

/** The subprotocol of the transport (major version 1, protobuf encoding). */
export const SUBPROTOCOL = "openenv.v1+proto";

/** Options of the WebSocket transport. */
export interface WebSocketOptions {
  /** Bearer token (RFC 0003): `Authorization` header under Node.js, subprotocol `bearer.<token>` in browsers. */
  token?: string;
  /** TLS (Node.js only): CA certificates to trust, client certificate and key (PEM). */
  ca?: Uint8Array;
  cert?: Uint8Array;
  key?: Uint8Array;
  /** Largest message received (default 64 MiB). */
  maxMessageBytes?: number;
  /** Use the global `WebSocket` even under Node.js (Node >= 22, or 20 with --experimental-websocket). */
  useGlobalWebSocket?: boolean;
}

/** True for URLs of the binary WebSocket transport: `ws(s)://` or `http(s)://` ending in `/v1/session`. */
export function isWebSocketUrl(url: string): boolean {
  return /^wss?:\/\//i.test(url) || (/^https?:\/\//i.test(url) && /\/v1\/session\/?$/.test(new URL(url).pathname));
}

/** The `ws(s)://` form of a transport URL. */
export function webSocketUrl(url: string): string {
  return url.replace(/^http(s?):\/\//i, "ws$1://");
}

/** The stream status a close code stands for (undefined: a normal end). */
export function closeError(code: number, reason: string): EnvError | undefined {
  if (code === 1000) {
    return undefined;
  }
  if (code >= 4000 && code < 4100) {
    return EnvError.fromCode(code - 4000, reason || ErrorCode[code - 4000] || "the server ended the stream", { fatal: true });
  }
  if (code === 1009) {
    return new ResourceExhausted(reason || "a message exceeded the server's message limit", { fatal: true });
  }
  return new Unavailable(`the WebSocket connection was lost (close ${code}${reason ? `: ${reason}` : ""})`, { fatal: true });
}

/** The minimal WebSocket surface both implementations offer. */
export interface BinarySocket {
  send(data: Uint8Array): void;
  close(code?: number, reason?: string): void;
  /** Drop the connection without a closing handshake. */
  abort(): void;
}

/** What a socket reports. */
export interface SocketEvents {
  message(data: Uint8Array): void;
  text(): void;
  closed(code: number, reason: string): void;
}

type Opener = (url: string, protocols: string[], opts: WebSocketOptions, events: SocketEvents) => Promise<BinarySocket>;

const isNode = typeof (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node === "string";

/** Open a socket with the standard WebSocket API (browsers; Node.js >= 22). */
export const openStandard: Opener = (url, protocols, _opts, events) => new Promise((resolve, reject) => {
  const Ws = (globalThis as { WebSocket?: typeof WebSocket }).WebSocket;
  if (Ws === undefined) {
    reject(new Unavailable("no WebSocket implementation in this JavaScript runtime", { fatal: true }));
    return;
  }
  const ws = new Ws(url, protocols);
  ws.binaryType = "arraybuffer";
  let open = false;
  ws.onopen = () => {
    open = true;
    if (ws.protocol !== SUBPROTOCOL) {
      ws.close(1002, "subprotocol not selected");
      reject(new Unavailable(`the server did not select the ${SUBPROTOCOL} subprotocol`, { fatal: true }));
      return;
    }
    resolve({
      send: (data) => ws.send(data),
      close: (code, reason) => ws.close(code, reason),
      abort: () => ws.close(),
    });
  };
  ws.onmessage = (ev: MessageEvent) => {
    if (typeof ev.data === "string") {
      events.text();
    } else {
      events.message(new Uint8Array(ev.data as ArrayBuffer));
    }
  };
  ws.onclose = (ev: { code: number; reason: string }) => {
    if (!open) {
      reject(new Unavailable(`cannot open ${url} (close ${ev.code}; the upgrade was refused or the server is unreachable)`,
        { fatal: true }));
      return;
    }
    events.closed(ev.code, ev.reason);
  };
});

/** ws_node.ts, loaded only under Node.js; named by a variable so that bundlers leave it out of browser builds. */
const NODE_MODULE = "./ws_node.js";

async function nodeModule(): Promise<typeof import("./ws_node.js")> {
  return (await import(NODE_MODULE)) as typeof import("./ws_node.js");
}

async function opener(opts: WebSocketOptions): Promise<Opener> {
  if (!isNode || opts.useGlobalWebSocket) {
    return openStandard;
  }
  return (await nodeModule()).openNode;
}

/** A {@link Connector} opening `Session` streams over the binary WebSocket at `url`. */
export function webSocketConnector(url: string, opts: WebSocketOptions = {}): Connector {
  const target = webSocketUrl(url);
  return async (sink) => {
    const open = await opener(opts);
    const protocols = [SUBPROTOCOL];
    if (opts.token && (!isNode || opts.useGlobalWebSocket)) {
      protocols.push(`bearer.${opts.token}`);
    }
    let ended = false;
    const socket = await open(target, protocols, opts, {
      message: (data) => sink.message(data),
      text: () => undefined, // the server sends binary messages only
      closed: (code, reason) => {
        if (!ended) {
          ended = true;
          sink.closed(closeError(code, reason));
        }
      },
    });
    const transport: Transport = {
      send: (data) => socket.send(data),
      end: () => socket.send(new Uint8Array(0)), // half-close: an empty binary message
      cancel: () => {
        ended = true;
        socket.abort();
      },
    };
    return transport;
  };
}

/** The URL of an HTTP document (`/load`, `/openenv/info`, `/health`) on the listener of a transport URL. */
export function sideUrl(url: string, path: string): string {
  const u = new URL(webSocketUrl(url).replace(/^ws(s?):/i, "http$1:"));
  u.pathname = u.pathname.replace(/\/v1\/session\/?$/, "") + path;
  u.search = "";
  return u.toString();
}

/** GET an HTTP document beside the transport URL and parse its JSON (the WebSocket's GetInfo/GetLoad). */
export async function httpSideCall(url: string, path: string, opts: WebSocketOptions = {}): Promise<unknown> {
  const target = sideUrl(url, path);
  if (isNode) {
    return await (await nodeModule()).getJson(target, opts);
  }
  const headers: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
  const resp = await fetch(target, { headers });
  if (!resp.ok) {
    throw httpError(resp.status, await resp.text());
  }
  return await resp.json();
}

/** The protocol error of an HTTP status (401 UNAUTHENTICATED, 403 PERMISSION_DENIED, ...). */
export function httpError(status: number, body: string): EnvError {
  const code = status === 401 ? ErrorCode.UNAUTHENTICATED
    : status === 403 ? ErrorCode.PERMISSION_DENIED
      : status === 404 ? ErrorCode.NOT_FOUND
        : status === 400 ? ErrorCode.INVALID_ARGUMENT
          : status === 429 ? ErrorCode.RESOURCE_EXHAUSTED
            : ErrorCode.UNAVAILABLE;
  return EnvError.fromCode(code, `HTTP ${status}: ${body.slice(0, 300)}`, { fatal: true });
}
