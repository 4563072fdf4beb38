/**
 * The TypeScript server's listener guards (RFC 0003, docs/security.md) over real loopback
 * gRPC: bearer tokens on every call but health checks, the handshake deadline, no
 * anonymous listener on a non-loopback address, and undecodable requests answered in band. Every wait is a polled condition with a
 * generous bound; nothing asserts how long anything took.
 */

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";
import { create, toBinary } from "@bufbuild/protobuf";
import * as grpc from "@grpc/grpc-js";
import { service as healthService } from "grpc-health-check";
import { TOKEN_ENV, TokenSet, bearerToken, checkBind, isLoopbackHost } from "../src/auth.js";
import { EnvClient, tokenMetadata } from "../src/client.js";
import type { EnvironmentDefinition } from "../src/environment.js";
import { gridworld } from "../src/envs/gridworld.js";
import { jsonType } from "../src/codec.js";
import { ErrorCode, ResourceExhausted, Unauthenticated } from "../src/errors.js";
import { Move, ActionSchema } from "../src/gen/gridworld/v1/gridworld_pb.js";
import { GetInfoRequestSchema, type GetInfoResponse } from "../src/gen/openenv/v1/environment_pb.js";
import { environmentServiceDefinition, parseUrl } from "../src/grpc.js";
import { Server } from "../src/server.js";
import { HANDSHAKE, RawSession, waitUntil, withServer } from "./helpers.js";

/** Every wait of this file is bounded by this (a loaded 2-core machine; never a timing assertion). */
const WAIT = 60_000;
const TOKEN = "tok-A_1.x";
const bytes = (...b: number[]): Uint8Array => new Uint8Array(b);
const OTHER = "tok-B~2";

/** The gridworld, counting the environments it creates (a refused call must create none). */
function counted(): { def: EnvironmentDefinition<unknown, unknown, unknown>; created: { n: number } } {
  const created = { n: 0 };
  const base = gridworld as unknown as EnvironmentDefinition<unknown, unknown, unknown>;
  return {
    created,
    def: {
      ...base,
      create: (options) => {
        created.n += 1;
        return base.create(options);
      },
    },
  };
}

function bearer(token: string): grpc.Metadata {
  return tokenMetadata(token);
}

/** GetInfo (unary) with `metadata`: the response, or the gRPC error. */
function getInfo(url: string, metadata: grpc.Metadata): Promise<GetInfoResponse | grpc.ServiceError> {
  const Ctor = grpc.makeGenericClientConstructor(environmentServiceDefinition, "EnvironmentService");
  const raw = new Ctor(parseUrl(url), grpc.credentials.createInsecure());
  return new Promise<GetInfoResponse | grpc.ServiceError>((resolve) => {
    raw.makeUnaryRequest(environmentServiceDefinition.GetInfo.path,
      (m: unknown) => Buffer.from(toBinary(GetInfoRequestSchema, m as never)),
      environmentServiceDefinition.GetInfo.responseDeserialize as (b: Buffer) => GetInfoResponse,
      create(GetInfoRequestSchema), metadata, { deadline: Date.now() + WAIT },
      (err, value) => resolve(err ?? value!));
  }).finally(() => raw.close());
}

/** The health status of the whole server, asked without any token. */
async function healthStatus(url: string): Promise<string> {
  const check = healthService.Check!;
  const client = new grpc.Client(parseUrl(url), grpc.credentials.createInsecure());
  try {
    return await new Promise<string>((resolve, reject) => {
      client.makeUnaryRequest(check.path, check.requestSerialize, check.responseDeserialize, { service: "" },
        new grpc.Metadata(), { deadline: Date.now() + WAIT },
        (err, resp) => (err ? reject(err) : resolve(String((resp as { status?: unknown }).status))));
    });
  } finally {
    client.close();
  }
}

/** Server reflection's list of services, asked with `metadata`: the names, or the gRPC status code. */
function listServices(url: string, metadata: grpc.Metadata): Promise<string[] | grpc.status> {
  const client = new grpc.Client(parseUrl(url), grpc.credentials.createInsecure());
  // ServerReflectionRequest { list_services = 7 : "" } and its response, by hand: field 6
  // (list_services_response) holds repeated field 1 (service) whose field 1 is the name.
  const call = client.makeBidiStreamRequest<Buffer, Buffer>(
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", (b) => b, (b) => b, metadata,
    { deadline: Date.now() + WAIT });
  return new Promise<string[] | grpc.status>((resolve) => {
    call.on("data", (b: Buffer) => {
      resolve([...b.toString("latin1").matchAll(/openenv\.v1\.EnvironmentService|grpc\.health\.v1\.Health/g)].map((m) => m[0]));
      call.cancel();
    });
    call.on("error", (e: grpc.ServiceError) => resolve(e.code));
    call.write(Buffer.from([0x3a, 0x00]));
  }).finally(() => client.close());
}

describe("bearer tokens on the TypeScript server (RFC 0003)", () => {
  it("refuses anonymous handshakes with UNAUTHENTICATED, never INTERNAL, many times in a row, opening no session", () => {
    const { def, created } = counted();
    return withServer(def, { tokens: [TOKEN] }, async (server) => {
      // Each stream on a fresh channel, its handshake written at once and a reader pending:
      // the status must arrive as UNAUTHENTICATED even when the client's first write is
      // still in flight (refusing before it arrived made grpc clients report INTERNAL).
      const codes = new Map<string, number>();
      for (let i = 0; i < 60; i++) {
        const s = new RawSession(server.address);
        try {
          s.send({ requestId: 1n, kind: HANDSHAKE });
          assert.equal(await s.recv(WAIT), undefined, "an anonymous handshake is never answered");
          const end = await s.ended(WAIT);
          const name = grpc.status[end.code];
          codes.set(name, (codes.get(name) ?? 0) + 1);
          if (end.code === grpc.status.UNAUTHENTICATED) {
            assert.equal(end.details, "a bearer token is required");
          }
        } finally {
          s.close();
        }
      }
      assert.deepEqual([...codes], [["UNAUTHENTICATED", 60]]);
      assert.equal(created.n, 0, "no environment was created for a refused call");
      assert.equal(server.manager.active, 0);
    });
  });

  it("refuses a wrong token, and an anonymous stream that sends nothing or only half-closes", () => {
    const { def, created } = counted();
    return withServer(def, { tokens: [TOKEN] }, async (server) => {
      const wrong = new RawSession(server.address, bearer("not-it"));
      const silent = new RawSession(server.address); // refused after the first-request wait (5 s)
      const halfClosed = new RawSession(server.address);
      const basic = new RawSession(server.address, (() => {
        const md = new grpc.Metadata();
        md.set("authorization", `Basic ${TOKEN}`);
        return md;
      })());
      try {
        wrong.send({ requestId: 1n, kind: HANDSHAKE });
        basic.send({ requestId: 1n, kind: HANDSHAKE });
        halfClosed.halfClose();
        for (const [s, why] of [[wrong, "the bearer token is not accepted"], [basic, "the bearer token is not accepted"],
          [silent, "a bearer token is required"], [halfClosed, "a bearer token is required"]] as const) {
          assert.equal(await s.recv(WAIT), undefined);
          assert.deepEqual(await s.ended(WAIT), { code: grpc.status.UNAUTHENTICATED, details: why });
        }
      } finally {
        [wrong, silent, halfClosed, basic].forEach((s) => s.close());
      }
      await assert.rejects(EnvClient.connect(server.address, { token: OTHER }), (e: unknown) =>
        e instanceof Unauthenticated && e.fatal && /not accepted/.test(e.message));
      await assert.rejects(EnvClient.connect(server.address, { token: "" }), (e: unknown) =>
        e instanceof Unauthenticated && /required/.test(e.message));
      assert.equal(created.n, 0);
    });
  });

  it("serves a client with an accepted token, and any of several accepted tokens", () =>
    withServer(gridworld, { tokens: new TokenSet([TOKEN, OTHER]) }, async (server) => {
      for (const token of [TOKEN, OTHER]) {
        const env = await EnvClient.connect(server.address, { token });
        try {
          assert.equal(env.info.capabilities?.authRequired, true);
          await env.reset({ seed: 3 });
          assert.equal((await env.step(create(ActionSchema, { move: Move.UP }))).stepCount, 1);
        } finally {
          await env.close();
        }
      }
      await waitUntil(() => server.manager.active === 0, "the sessions to be closed", WAIT);
      // The unary GetInfo and reflection are guarded too; the answer needs the token.
      const refused = await getInfo(server.address, new grpc.Metadata());
      assert.equal((refused as grpc.ServiceError).code, grpc.status.UNAUTHENTICATED);
      const info = await getInfo(server.address, bearer(OTHER));
      assert.equal((info as GetInfoResponse).info?.capabilities?.authRequired, true);
      assert.equal(await listServices(server.address, new grpc.Metadata()), grpc.status.UNAUTHENTICATED);
      const services = await listServices(server.address, bearer(TOKEN));
      assert.ok(Array.isArray(services) && services.includes("openenv.v1.EnvironmentService"), String(services));
    }));

  it("sends $OPENENV_TOKEN when no token option is given", () =>
    withServer(gridworld, { tokens: [TOKEN] }, async (server) => {
      const saved = process.env[TOKEN_ENV];
      process.env[TOKEN_ENV] = TOKEN;
      try {
        const env = await EnvClient.connect(server.address);
        assert.equal((await env.reset({ seed: 1 })).stepCount, 0);
        await env.close();
      } finally {
        if (saved === undefined) {
          delete process.env[TOKEN_ENV];
        } else {
          process.env[TOKEN_ENV] = saved;
        }
      }
    }));

  it("leaves the health service open", () =>
    withServer(gridworld, { tokens: [TOKEN] }, async (server) => {
      assert.equal(await healthStatus(server.address), "SERVING");
    }));

  it("advertises no auth and lets anyone in without tokens", () =>
    withServer(gridworld, {}, async (server) => {
      const env = await EnvClient.connect(server.address, { token: "ignored-by-an-open-server" });
      try {
        assert.equal(env.info.capabilities?.authRequired, false);
      } finally {
        await env.close();
      }
    }));
});

describe("the handshake deadline (RFC 0003)", () => {
  it("ends a silent Session stream with DEADLINE_EXCEEDED and keeps serving", () =>
    // 2.5 s, not less: the client shares this event loop with the server, and a loaded machine can
    // stall it for longer than a few hundred ms between the stream's headers and its handshake.
    withServer(gridworld, { handshakeTimeoutMs: 2_500 }, async (server) => {
      const env = await EnvClient.connect(server.address); // handshaken before the silent stream opens
      assert.deepEqual(env.info.capabilities?.handshakeTimeout, create((await import("@bufbuild/protobuf/wkt")).DurationSchema,
        { seconds: 2n, nanos: 500_000_000 }));
      const silent = new RawSession(server.address);
      try {
        assert.equal(await silent.recv(WAIT), undefined, "a silent stream is never answered");
        assert.deepEqual(await silent.ended(WAIT), { code: grpc.status.DEADLINE_EXCEEDED, details: "no handshake within 2.5 s" });
      } finally {
        silent.close();
      }
      // The session handshaken earlier is older than the deadline and unaffected by it.
      assert.equal((await env.reset({ seed: 2 })).stepCount, 0);
      await env.close();
      const fresh = await EnvClient.connect(server.address);
      await fresh.close();
      await waitUntil(() => server.manager.active === 0, "every slot to be free", WAIT);
    }));

  it("also applies behind a token, and is advertised by default (10 s) or absent when disabled", async () => {
    await withServer(gridworld, { tokens: [TOKEN], handshakeTimeoutMs: 200 }, async (server) => {
      const silent = new RawSession(server.address, bearer(TOKEN));
      try {
        assert.equal((await silent.ended(WAIT)).code, grpc.status.DEADLINE_EXCEEDED);
      } finally {
        silent.close();
      }
    });
    await withServer(gridworld, {}, async (server) => {
      const caps = server.runtime.info.capabilities!;
      assert.equal(caps.handshakeTimeout?.seconds, 10n);
      assert.equal(caps.authRequired, false);
    });
    await withServer(gridworld, { handshakeTimeoutMs: 0 }, async (server) => {
      assert.equal(server.runtime.info.capabilities!.handshakeTimeout, undefined);
      const env = await EnvClient.connect(server.address);
      assert.equal(env.info.capabilities?.handshakeTimeout, undefined);
      await env.close();
    });
    assert.throws(() => new Server(gridworld, { handshakeTimeoutMs: -1 }), /handshakeTimeoutMs/);
  });
});

describe("undecodable requests (RFC 0003)", () => {
  it("answers them INVALID_ARGUMENT in band with their request id: fatal first, not fatal later", () =>
    withServer(gridworld, {}, async (server) => {
      const first = new RawSession(server.address);
      try {
        first.sendBytes(bytes(0x08, 0x05, 0x12, 0x09, 0x0a)); // request_id 5, then a truncated handshake
        const resp = await first.recv(WAIT);
        assert.equal(resp?.requestId, 5n);
        assert.equal(resp?.kind.case, "error");
        assert.equal(resp.kind.value.code, ErrorCode.INVALID_ARGUMENT);
        assert.match(resp.kind.value.message, /^undecodable SessionRequest \(premature EOF\)$/);
        assert.equal(resp.kind.value.fatal, true);
        assert.equal((await first.ended(WAIT)).code, grpc.status.OK);
      } finally {
        first.close();
      }
      const s = new RawSession(server.address);
      try {
        s.send({ requestId: 1n, kind: HANDSHAKE });
        assert.equal((await s.recv(WAIT))?.kind.case, "handshake");
        s.sendBytes(bytes(0x08, 0x07, 0x12, 0x04, 0x0a, 0x02, 0xc3, 0x28)); // id 7, handshake.protocol_version not UTF-8
        s.sendBytes(bytes(0xff, 0xff)); // no id at all
        s.send({ requestId: 8n, kind: { case: "reset", value: { seed: 1n } } });
        const bad = await s.recv(WAIT);
        assert.equal(bad?.requestId, 7n);
        assert.equal(bad?.kind.case, "error");
        assert.deepEqual([bad.kind.value.code, bad.kind.value.fatal], [ErrorCode.INVALID_ARGUMENT, false]);
        assert.match(bad.kind.value.message, /UTF-8/);
        const worse = await s.recv(WAIT);
        assert.equal(worse?.requestId, 0n);
        assert.equal(worse?.kind.case === "error" && worse.kind.value.code, ErrorCode.INVALID_ARGUMENT);
        const ok = await s.recv(WAIT);
        assert.deepEqual([ok?.requestId, ok?.kind.case], [8n, "reset"], "the session goes on");
      } finally {
        s.close();
      }
    }));

  it("refuses undecodable bytes without a token UNAUTHENTICATED, never decoding them", () =>
    withServer(gridworld, { tokens: [TOKEN] }, async (server) => {
      const s = new RawSession(server.address);
      try {
        s.sendBytes(bytes(0xff, 0xff, 0xff));
        assert.equal(await s.recv(WAIT), undefined);
        assert.equal((await s.ended(WAIT)).code, grpc.status.UNAUTHENTICATED);
      } finally {
        s.close();
      }
    }));
});

describe("replies over the message limit (RFC 0003)", () => {
  /** Observations of as many characters as the action asks for. */
  const sized: EnvironmentDefinition<number, string> = {
    name: "sized",
    action: jsonType<number>({ type: "integer", minimum: 0 }),
    observation: jsonType<string>({ type: "string" }),
    create: () => ({
      reset: () => ({ observation: "" }),
      step: (n: number) => ({ observation: "x".repeat(n), reward: 1 }),
    }),
  };

  it("answers them RESOURCE_EXHAUSTED in band, not fatal, the request carried out", () =>
    withServer(sized, { maxMessageBytes: 64 * 1024 }, async (server) => {
      const env = await EnvClient.connect<number, string>(server.address);
      try {
        await env.reset();
        await assert.rejects(env.step(100_000), (e: unknown) => e instanceof ResourceExhausted && !e.fatal &&
          /^the reply \(step, 1000\d\d bytes\) exceeds the 65536-byte message limit; the request was carried out$/.test(e.message));
        assert.equal((await env.state()).stepCount, 1, "the step was taken");
        const ok = await env.step(10);
        assert.deepEqual([ok.observation, ok.stepCount], ["x".repeat(10), 2]);
      } finally {
        await env.close();
      }
    }));
});

describe("connection bounds (RFC 0003)", () => {
  it("lets one connection open max_sessions + 16 streams (at least 128), as its HTTP/2 settings say", async () => {
    const { connect } = await import("node:http2");
    const advertised = (url: string): Promise<number | undefined> => new Promise((resolve, reject) => {
      const session = connect(`http://${parseUrl(url)}`);
      session.once("remoteSettings", (settings) => {
        resolve(settings.maxConcurrentStreams);
        session.close();
      });
      session.once("error", reject);
    });
    await withServer(gridworld, { maxSessions: 4 }, async (server) => assert.equal(await advertised(server.address), 128));
    await withServer(gridworld, { maxSessions: 300 }, async (server) => assert.equal(await advertised(server.address), 316));
  });
});

describe("listening beyond loopback (RFC 0003)", () => {
  it("refuses to start on a non-loopback host without a token unless anonymous access is asked for", async () => {
    for (const host of ["0.0.0.0", "::", "192.0.2.7"]) {
      await assert.rejects(new Server(gridworld, { host, port: 0 }).start(), /without authentication/);
    }
    // Nothing is bound by these: the decision itself.
    assert.doesNotThrow(() => checkBind("0.0.0.0", new TokenSet([TOKEN]), false));
    assert.doesNotThrow(() => checkBind("0.0.0.0", new TokenSet(), true));
    for (const host of ["127.0.0.1", "127.8.9.10", "::1", "[::1]:50051", "localhost", "Env.LOCALHOST.", "0:0:0:0:0:0:0:1",
      "::ffff:127.0.0.1"]) {
      assert.ok(isLoopbackHost(host), host);
      assert.doesNotThrow(() => checkBind(host, new TokenSet(), false));
    }
    for (const host of ["0.0.0.0", "::", "10.0.0.1", "example.org", "128.0.0.1", "::2", ""]) {
      assert.ok(!isLoopbackHost(host), host);
    }
  });

  it("openenv-ts serve exits with the reason on a non-loopback host without a token", async () => {
    const cli = fileURLToPath(new URL("../src/cli.js", import.meta.url));
    const env = { ...process.env, [TOKEN_ENV]: "", OPENENV_ALLOW_ANONYMOUS: "" };
    const run = (args: string[]) => new Promise<{ code: number | null; stderr: string }>((resolve) => {
      execFile(process.execPath, [cli, "serve", "gridworld", ...args], { env, timeout: WAIT }, (err, _out, stderr) =>
        resolve({ code: err === null ? 0 : (err as { code?: number }).code ?? -1, stderr }));
    });
    const refused = await run(["--host", "0.0.0.0", "--port", "0"]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /would listen on 0\.0\.0\.0 without authentication.*--allow-anonymous/);
    const badFile = await run(["--token-file", join(tmpdir(), "openenv-no-such-token-file")]);
    assert.equal(badFile.code, 1);
    assert.match(badFile.stderr, /ENOENT/);
    const bad = await run(["--token", "has space"]);
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /printable ASCII/);
  });
});

describe("token sets", () => {
  it("reads tokens from options, a file and $OPENENV_TOKEN, and compares them exactly", () => {
    const dir = mkdtempSync(join(tmpdir(), "openenv-ts-auth-"));
    const saved = process.env[TOKEN_ENV];
    try {
      const file = join(dir, "tokens");
      writeFileSync(file, "# rotated monthly\n\nfile-one\n  file-two  \n");
      process.env[TOKEN_ENV] = "env-one, env-two,";
      const set = TokenSet.load(["given"], file);
      assert.equal(set.size, 5);
      for (const t of ["given", "file-one", "file-two", "env-one", "env-two"]) {
        assert.ok(set.accepts(t), t);
      }
      for (const t of ["", "given ", "Given", "file", "env-one,env-two", undefined]) {
        assert.ok(!set.accepts(t), String(t));
      }
      assert.equal(String(set), "TokenSet(5 token(s))", "never the tokens themselves");
      assert.equal(TokenSet.load([], undefined, false).size, 0);
      writeFileSync(file, "# nothing\n\n");
      assert.throws(() => TokenSet.load([], file), /holds no token/);
      assert.throws(() => new TokenSet(["héllo"]), /printable ASCII/);
      assert.throws(() => new TokenSet(["x".repeat(4097)]), /4096/);
      assert.ok(new TokenSet([]).accepts(undefined), "no tokens: anonymous access");
    } finally {
      rmSync(dir, { recursive: true, force: true });
      if (saved === undefined) {
        delete process.env[TOKEN_ENV];
      } else {
        process.env[TOKEN_ENV] = saved;
      }
    }
  });

  it("parses Authorization values like the Python server", () => {
    assert.equal(bearerToken("Bearer abc"), "abc");
    assert.equal(bearerToken("bearer   abc  "), "abc");
    assert.equal(bearerToken(Buffer.from("BEARER abc")), "abc");
    for (const v of [undefined, "", "Bearer", "Bearer ", "Basic abc", "abc", `Bearer ${"x".repeat(4097)}`]) {
      assert.equal(bearerToken(v), undefined, String(v));
    }
  });
});
