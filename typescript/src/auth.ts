/**
 * Bearer tokens of the gRPC listener (RFC 0003, docs/security.md): which are accepted,
 * how they are read (options, a file, `$OPENENV_TOKEN`), when one is mandatory, and the
 * server interceptor that refuses calls without one.
 *
 * What you may rely on:
 *
 * - With at least one token configured, every call but the gRPC health service's needs
 *   `authorization: Bearer <token>` metadata; others end with `UNAUTHENTICATED` before
 *   any handler runs, so no session is ever opened for them.
 * - A refused call that streams requests is ended only once its first request arrived
 *   (or after {@link FIRST_REQUEST_WAIT_MS}): a gRPC client whose first write is still in
 *   flight when the status arrives reports `INTERNAL` instead of the status it was sent.
 * - Tokens are compared in constant time against every accepted one.
 */

import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import * as grpc from "@grpc/grpc-js";

/** The environment variable holding tokens (server: accepted, comma-separated; client: the one sent). */
export const TOKEN_ENV = "OPENENV_TOKEN";

/** Calls under this prefix stay open without a token (load balancers and orchestrators probe it). */
export const HEALTH_PREFIX = "/grpc.health.v1.Health/";

/**
 * How long a refused client-streaming call waits for its first request before it is
 * ended anyway (a client that sends nothing is refused after this).
 */
export const FIRST_REQUEST_WAIT_MS = 5_000;

const MAX_TOKEN_CHARS = 4096; // a longer "token" is refused before any comparison

/** The token of an `authorization: Bearer <token>` value (scheme case-insensitive); undefined otherwise. */
export function bearerToken(value: string | Buffer | undefined): string | undefined {
  if (value === undefined) {
    return undefined;
  }
  const text = (typeof value === "string" ? value : value.toString("latin1")).trim();
  const space = text.search(/\s/);
  if (space < 0) {
    return undefined;
  }
  const token = text.slice(space).trim();
  if (text.slice(0, space).toLowerCase() !== "bearer" || token === "" || token.length > MAX_TOKEN_CHARS) {
    return undefined;
  }
  return token;
}

function digest(token: string): Buffer {
  return createHash("sha256").update(token, "utf8").digest();
}

/**
 * The bearer tokens a listener accepts. Empty: anonymous access (no check). Several may be
 * accepted at once (to rotate one without downtime).
 */
export class TokenSet {
  private readonly digests: Buffer[];
  /** How many tokens are accepted (0: anonymous access). */
  readonly size: number;

  /** Throws for a token with whitespace, non-ASCII characters or over 4096 characters; blank ones are skipped. */
  constructor(tokens: Iterable<string> = []) {
    const cleaned = new Set<string>();
    for (const raw of tokens) {
      const t = raw.trim();
      if (t === "") {
        continue;
      }
      if (!/^[\x21-\x7e]+$/.test(t) || t.length > MAX_TOKEN_CHARS) {
        throw new Error("a token must be printable ASCII without spaces, at most 4096 characters");
      }
      cleaned.add(t);
    }
    this.digests = [...cleaned].map(digest);
    this.size = cleaned.size;
  }

  /**
   * Tokens given directly, read from `tokenFile` (one per line; blank lines and `#`
   * comments skipped) and, when `environ`, from `$OPENENV_TOKEN` (comma-separated). A
   * missing or empty token file is an error, not anonymous access.
   */
  static load(tokens: Iterable<string> = [], tokenFile?: string, environ = true): TokenSet {
    const out = [...tokens];
    if (tokenFile !== undefined) {
      const found = readFileSync(tokenFile, "utf8").split(/\r?\n/).map((l) => l.trim())
        .filter((l) => l !== "" && !l.startsWith("#"));
      if (found.length === 0) {
        throw new Error(`token file ${tokenFile} holds no token`);
      }
      out.push(...found);
    }
    if (environ) {
      out.push(...(process.env[TOKEN_ENV] ?? "").split(","));
    }
    return new TokenSet(out);
  }

  /** True when no token is required, or `token` is one of the accepted ones. */
  accepts(token: string | undefined): boolean {
    if (this.size === 0) {
      return true;
    }
    if (token === undefined) {
      return false;
    }
    // Equal-length digests, and no early exit: the time taken does not say which token
    // (or how much of one) matched.
    const given = digest(token);
    let ok = false;
    for (const d of this.digests) {
      ok = timingSafeEqual(given, d) || ok;
    }
    return ok;
  }

  /** Never the tokens themselves. */
  toString(): string {
    return `TokenSet(${this.size} token(s))`;
  }
}

/** True for `localhost` (and `*.localhost`), 127.0.0.0/8 and `::1` (brackets and a `:port` suffix allowed). */
export function isLoopbackHost(host: string): boolean {
  let h = host.trim().toLowerCase();
  if (h.startsWith("[")) {
    h = h.slice(1).split("]", 1)[0]!;
  } else if (h.split(":").length === 2) {
    h = h.split(":", 1)[0]!;
  }
  h = h.replace(/\.+$/, "");
  if (h === "localhost" || h.endsWith(".localhost")) {
    return true;
  }
  if (isIP(h) === 4) {
    return h.startsWith("127.");
  }
  if (isIP(h) === 6) { // canonical form: ::1, or 127.0.0.0/8 mapped (::ffff:7fxx:xxxx)
    const canonical = new URL(`http://[${h}]/`).hostname;
    return canonical === "[::1]" || /^\[::ffff:7f[0-9a-f]{2}:[0-9a-f]{1,4}\]$/.test(canonical);
  }
  return false;
}

/**
 * Throws when `host` is not a loopback address, no token is configured and anonymous
 * access was not asked for: a listener reachable from the network is never open to
 * anyone by accident.
 */
export function checkBind(host: string, tokens: TokenSet, allowAnonymous: boolean): void {
  if (tokens.size > 0 || allowAnonymous || isLoopbackHost(host)) {
    return;
  }
  throw new Error(
    `the server would listen on ${host} without authentication: give a token (tokens / --token, --token-file ` +
    `or $${TOKEN_ENV}), or allowAnonymous / --allow-anonymous to serve anyone who can reach it`);
}

/**
 * The server interceptor that checks the bearer token of every call but those under
 * `openPrefixes`. A refused call never reaches its handler (its metadata is not passed
 * on) and its requests are never decoded into the service's types.
 */
export function tokenGuard(tokens: TokenSet, openPrefixes: readonly string[] = [HEALTH_PREFIX],
                           firstRequestWaitMs = FIRST_REQUEST_WAIT_MS): grpc.ServerInterceptor {
  return (method, call) => {
    if (tokens.size === 0 || openPrefixes.some((p) => method.path.startsWith(p))) {
      return new grpc.ServerInterceptingCall(call);
    }
    let done = false;
    let pendingWhy: string | undefined; // set once the call is refused, until its status is sent
    let timer: NodeJS.Timeout | undefined;
    const refuse = (why: string): void => {
      if (!done) {
        done = true;
        clearTimeout(timer);
        call.sendStatus({ code: grpc.status.UNAUTHENTICATED, details: why });
      }
    };
    return new grpc.ServerInterceptingCall(call, {
      start: (next) => {
        next({
          onReceiveMetadata: (metadata, pass) => {
            const values = metadata.get("authorization");
            const header = values.length === 0 ? undefined : values[values.length - 1]!;
            if (tokens.accepts(bearerToken(header))) {
              pass(metadata);
              return;
            }
            const why = header === undefined ? "a bearer token is required" : "the bearer token is not accepted";
            if (!method.requestStream) {
              refuse(why); // the request and its half-close travel together: nothing in flight to lose
              return;
            }
            // Wait for the first request (or the half-close) before ending the call: read it
            // here, since the handler never starts. `startRead` delivers it to the listener
            // below, which does not pass it on.
            timer = setTimeout(() => refuse(why), firstRequestWaitMs);
            pendingWhy = why;
            call.startRead();
          },
          onReceiveMessage: (message, pass) => {
            if (pendingWhy === undefined) {
              pass(message);
            } else {
              refuse(pendingWhy);
            }
          },
          onReceiveHalfClose: (pass) => {
            if (pendingWhy === undefined) {
              pass();
            } else {
              refuse(pendingWhy);
            }
          },
          onCancel: () => {
            done = true;
            clearTimeout(timer);
          },
        });
      },
    });
  };
}
