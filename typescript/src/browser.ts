/**
 * The client for browsers: {@link WebClient}, the same session client as {@link EnvClient}
 * (core.ts: ids, pipelining and coalescing, resume, every request kind of protocol 1.3) over
 * the binary WebSocket transport of RFC 0011 with the standard `WebSocket` API. Nothing here
 * imports Node.js or gRPC, so a bundler can ship this module (and its imports: core, ws,
 * codec, errors, the generated messages) to a page:
 *
 * ```ts
 * import { WebClient } from "@openenv/sdk/browser";
 * const env = await WebClient.connect(`ws://${location.host}/v1/session`, { token });
 * const ts = await env.reset({ seed: 1 });
 * ```
 *
 * The bearer token travels as the offered subprotocol `bearer.<token>` (browsers cannot set
 * an `Authorization` header on a WebSocket); `getLoad` / `getLoadReport` read `GET /load` beside the URL.
 */

import type { AnyValue } from "./codec.js";
import { SessionClient, loadReportOf, type LoadReport, type SessionOptions } from "./core.js";
import { httpSideCall, webSocketConnector } from "./ws.js";

export * from "./core.js";
export * from "./codec.js";
export * from "./errors.js";
export { isWebSocketUrl, SUBPROTOCOL, closeError } from "./ws.js";

/** Options of {@link WebClient.connect}. */
export interface WebClientOptions extends SessionOptions {
  /** Bearer token (RFC 0003), offered as the subprotocol `bearer.<token>`. */
  token?: string;
}

/** A session over the binary WebSocket, with the standard WebSocket API. */
export class WebClient<A = unknown, O = AnyValue, S = AnyValue> extends SessionClient<A, O, S> {
  private constructor(url: string, private readonly token: string | undefined, opts: SessionOptions) {
    super(url, opts, webSocketConnector(url, { token, useGlobalWebSocket: true, maxMessageBytes: opts.maxMessageBytes }));
  }

  /** Open the WebSocket and the session (handshake). */
  static async connect<A = unknown, O = AnyValue, S = AnyValue>(url: string, opts: WebClientOptions = {}):
    Promise<WebClient<A, O, S>> {
    const c = new WebClient<A, O, S>(url, opts.token, opts);
    try {
      await c.open();
    } catch (e) {
      c.shutdown();
      throw e;
    }
    return c;
  }

  /** The server's live load (RFC 0005) and its workers' (RFC 0013), from `GET /load` on the same listener. */
  override async getLoadReport(): Promise<LoadReport> {
    return loadReportOf(await httpSideCall(this.url, "/load", { token: this.token }));
  }
}
