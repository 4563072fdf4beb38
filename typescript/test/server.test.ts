/**
 * The TypeScript server helper and client, end to end over loopback gRPC: the
 * TypeScript gridworld served from this process and driven by EnvClient and by raw
 * protocol streams (state machine, error table, pipelining, capacity, timeouts, drain).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { create, isMessage, toBinary } from "@bufbuild/protobuf";
import { AnySchema, anyPack, ValueSchema } from "@bufbuild/protobuf/wkt";
import * as grpc from "@grpc/grpc-js";
import { EnvClient } from "../src/client.js";
import { jsonType, messageType } from "../src/codec.js";
import type { EnvironmentDefinition } from "../src/environment.js";
import { echo } from "../src/envs/echo.js";
import { gridworld } from "../src/envs/gridworld.js";
import {
  DeadlineExceeded,
  ErrorCode,
  FailedPrecondition,
  Internal,
  InvalidArgument,
  NotFound,
  ResourceExhausted,
  Unavailable,
  Unimplemented,
} from "../src/errors.js";
import {
  ActionSchema,
  Move,
  ObservationSchema,
  StateSchema,
  type Action,
  type Observation,
  type State,
} from "../src/gen/gridworld/v1/gridworld_pb.js";
import { EpisodeStatus, GetInfoRequestSchema, type GetInfoResponse } from "../src/gen/openenv/v1/environment_pb.js";
import { PayloadSchema } from "../src/gen/openenv/v1/payload_pb.js";
import { CallToolRequestSchema, CallToolResponseSchema } from "../src/gen/openenv/v1/tool_pb.js";
import { Server } from "../src/server.js";
import { environmentServiceDefinition, parseUrl } from "../src/grpc.js";
import { HANDSHAKE, RawSession, bestMove, waitUntil, withServer } from "./helpers.js";

type GridClient = EnvClient<Action, Observation, State>;
const move = (m: Move): Action => create(ActionSchema, { move: m });

/** Play one episode with the shortest-path policy; returns observations and rewards. */
async function play(env: GridClient, seed: number): Promise<{ frames: string[]; rewards: number[]; steps: number }> {
  let ts = await env.reset({ seed });
  const frames = [ts.observation!.grid.join("/")];
  const rewards: number[] = [];
  while (!ts.done) {
    ts = await env.step(move(bestMove(ts.observation!)));
    frames.push(ts.observation!.grid.join("/"));
    rewards.push(ts.reward!);
  }
  return { frames, rewards, steps: ts.stepCount };
}

describe("TypeScript gridworld served by the TypeScript server helper", () => {
  it("handshakes and advertises typed payloads with their descriptors", () =>
    withServer(gridworld, {}, async (server) => {
      const env = await EnvClient.connect(server.address);
      try {
        const info = env.info;
        assert.equal(info.name, "gridworld_ts");
        assert.equal(info.protocolVersion, "1.6");
        assert.equal(info.action?.messageType, "gridworld.v1.Action");
        assert.equal(info.observation?.messageType, "gridworld.v1.Observation");
        assert.equal(info.action?.examples.length, 4);
        assert.ok(info.descriptors?.file.some((f) => f.name === "gridworld/v1/gridworld.proto"));
        assert.equal(info.capabilities?.deterministic, true);
        assert.equal(info.capabilities?.maxEpisodeSteps, 100n);
        assert.equal(info.capabilities?.maxMessageBytes, BigInt(4 * 1024 * 1024));
        const schema = info.observation?.jsonSchema as { $defs: Record<string, unknown> };
        assert.ok("gridworld.v1.Observation" in schema.$defs);
        assert.match(env.sessionId, /^[0-9a-f]{32}$/);
        // GetInfo (unary) returns the same description.
        const Ctor = grpc.makeGenericClientConstructor(environmentServiceDefinition, "EnvironmentService");
        const raw = new Ctor(parseUrl(server.address), grpc.credentials.createInsecure());
        const got = await new Promise<GetInfoResponse>((resolve, reject) => {
          raw.makeUnaryRequest(environmentServiceDefinition.GetInfo.path,
            (m: unknown) => Buffer.from(toBinary(GetInfoRequestSchema, m as never)),
            environmentServiceDefinition.GetInfo.responseDeserialize as (b: Buffer) => GetInfoResponse,
            create(GetInfoRequestSchema), (err, value) => (err ? reject(err) : resolve(value!)));
        });
        raw.close();
        assert.deepEqual(got.info, info);
      } finally {
        await env.close();
      }
    }));

  it("plays episodes to the goal, deterministically per seed", () =>
    withServer(gridworld, {}, async (server) => {
      const [a, b] = await Promise.all([EnvClient.connect<Action, Observation, State>(server.address),
        EnvClient.connect<Action, Observation, State>(server.address)]);
      try {
        const first = await play(a, 11);
        const second = await play(b, 11);
        assert.deepEqual(second, first);
        assert.ok(first.rewards.at(-1)! > 1, "the goal step earns the goal reward");
        const st = await a.state();
        assert.equal(st.status, EpisodeStatus.TERMINATED);
        assert.equal(st.stepCount, first.steps);
        assert.ok(isMessage(st.state, StateSchema));
        assert.equal(st.state.seed, 11n);
        const other = await play(b, 12);
        assert.notDeepEqual(other.frames[0], first.frames[0]);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    }));

  it("snapshots and restores an episode exactly, and refuses foreign or altered snapshots (RFC 0006)", () =>
    withServer(gridworld, {}, async (server) => {
      const env = await EnvClient.connect<Action, Observation, State>(server.address);
      try {
        assert.equal(env.info.capabilities?.snapshots, true);
        assert.equal(env.info.capabilities?.maxForks, server.runtime.maxSessions); // fork: up to the capacity
        await env.reset({ seed: 5 });
        await env.step(move(Move.UP));
        const snap = await env.snapshot();
        assert.equal(snap.envName, "gridworld_ts");
        assert.equal(snap.stepCount, 1n);
        const moves = [Move.DOWN, Move.LEFT, Move.RIGHT, Move.UP];
        const original = [];
        for (const m of moves) {
          original.push(await env.step(move(m)));
        }
        const restored = await env.restore(snap);
        assert.equal(restored.stepCount, 1);
        const replay = [];
        for (const m of moves) {
          replay.push(await env.step(move(m)));
        }
        assert.deepEqual(replay.map((r) => [r.observation!.grid.join("/"), r.reward, r.stepCount]),
          original.map((r) => [r.observation!.grid.join("/"), r.reward, r.stepCount]));
        await assert.rejects(env.restore({ ...snap, envName: "other" }), FailedPrecondition);
        await assert.rejects(env.restore({ ...snap, stepCount: 40n }), InvalidArgument);
        assert.equal((await env.state()).stepCount, 5);
      } finally {
        await env.close();
      }
    }));

  it("answers the error table in band, without ending the session", () =>
    withServer(gridworld, {}, async (server) => {
      const env: GridClient = await EnvClient.connect(server.address);
      try {
        await assert.rejects(env.step(move(Move.UP)), (e: unknown) =>
          e instanceof FailedPrecondition && !e.fatal && /before reset/.test(e.message));
        const st0 = await env.state();
        assert.equal(st0.status, EpisodeStatus.NOT_STARTED);
        assert.equal(st0.episodeId, "");
        const r = await env.reset({ seed: 1, episodeId: "ep-1" });
        assert.equal(r.episodeId, "ep-1");
        assert.equal(r.stepCount, 0);
        assert.equal(r.reward, undefined);
        await assert.rejects(env.step(move(Move.UNSPECIFIED)), (e: unknown) =>
          e instanceof InvalidArgument && /MOVE_UNSPECIFIED/.test(e.message));
        await assert.rejects(env.step({ move: 1 } as never), InvalidArgument); // a JSON payload
        const wrongType = create(PayloadSchema, {
          kind: { case: "message", value: anyPack(ValueSchema, create(ValueSchema)) },
        });
        await assert.rejects(env.step(wrongType as never), (e: unknown) =>
          e instanceof InvalidArgument && /google.protobuf.Value/.test(e.message));
        const garbage = create(PayloadSchema, {
          kind: { case: "message", value: create(AnySchema, { typeUrl: "type.googleapis.com/gridworld.v1.Action", value: new Uint8Array([0xff, 0xff]) }) },
        });
        await assert.rejects(env.step(garbage as never), (e: unknown) =>
          e instanceof InvalidArgument && /undecodable/.test(e.message));
        await assert.rejects(env.listTools(), Unimplemented);
        await assert.rejects(env.callTool("x"), Unimplemented); // UNIMPLEMENTED before NOT_FOUND
        await assert.rejects(env.request({ case: "handshake", value: { protocolVersion: "1.0" } }), (e: unknown) =>
          e instanceof FailedPrecondition && !e.fatal);
        await assert.rejects(env.request({ case: undefined }), (e: unknown) =>
          e instanceof InvalidArgument && e.code === ErrorCode.INVALID_ARGUMENT);
        await assert.rejects(env.resetBatch(), FailedPrecondition);
        await assert.rejects(env.reset({ options: { size: 4 } }), InvalidArgument);
        const st = await env.state(); // nothing above changed the episode
        assert.equal(st.episodeId, "ep-1");
        assert.equal(st.stepCount, 0);
        assert.equal(st.status, EpisodeStatus.RUNNING);
        const ok = await env.step(move(Move.UP));
        assert.equal(ok.stepCount, 1);
      } finally {
        await env.close();
      }
    }));

  it("refuses bad handshakes with fatal errors", () =>
    withServer(gridworld, {}, async (server) => {
      const cases: [Parameters<RawSession["send"]>[0], ErrorCode][] = [
        [{ requestId: 5n, kind: { case: "reset", value: {} } }, ErrorCode.FAILED_PRECONDITION],
        [{ requestId: 5n }, ErrorCode.FAILED_PRECONDITION],
        [{ requestId: 5n, kind: { case: "handshake", value: { protocolVersion: "" } } }, ErrorCode.INVALID_ARGUMENT],
        [{ requestId: 5n, kind: { case: "handshake", value: { protocolVersion: "2.0" } } }, ErrorCode.FAILED_PRECONDITION],
        [{ requestId: 5n, kind: { case: "handshake", value: { protocolVersion: "one" } } }, ErrorCode.FAILED_PRECONDITION],
        [{ requestId: 5n, kind: { case: "handshake", value: { protocolVersion: "1.0", options: { bogus: 1 } } } },
          ErrorCode.INVALID_ARGUMENT],
      ];
      for (const [req, code] of cases) {
        const s = new RawSession(server.address);
        try {
          s.send(req);
          const resp = await s.recv();
          assert.equal(resp?.requestId, 5n);
          assert.equal(resp?.kind.case, "error");
          assert.equal(resp.kind.value.code, code, resp.kind.value.message);
          assert.equal(resp.kind.value.fatal, true);
          assert.equal((await s.ended()).code, grpc.status.OK);
        } finally {
          s.close();
        }
      }
      // A newer minor version is accepted.
      const s = new RawSession(server.address);
      try {
        s.send({ requestId: 1n, kind: { case: "handshake", value: { protocolVersion: "1.7" } } });
        assert.equal((await s.recv())?.kind.case, "handshake");
      } finally {
        s.close();
      }
    }));

  it("answers pipelined requests in order, echoing request ids", () =>
    withServer(gridworld, {}, async (server) => {
      const s = new RawSession(server.address);
      try {
        s.send({ requestId: 100n, kind: HANDSHAKE });
        s.send({ requestId: 7n, kind: { case: "reset", value: { seed: 3n } } });
        const actions = [Move.UP, Move.DOWN, Move.LEFT, Move.RIGHT];
        for (let i = 0; i < 20; i++) {
          const action = create(PayloadSchema, { kind: { case: "message", value: anyPack(ActionSchema, move(actions[i % 4]!)) } });
          s.send({ requestId: BigInt(1000 - i), kind: { case: "step", value: { action } } });
        }
        s.send({ requestId: 9n, kind: { case: "close", value: {} } });
        s.send({ requestId: 10n, kind: { case: "state", value: {} } }); // after close: never answered
        assert.equal((await s.recv())?.requestId, 100n);
        assert.equal((await s.recv())?.kind.case, "reset");
        let last = 0n;
        for (let i = 0; i < 20; i++) {
          const r = await s.recv();
          assert.equal(r?.requestId, BigInt(1000 - i));
          assert.equal(r?.kind.case, "step");
          last = r.kind.value.timeStep!.stepCount;
          assert.equal(last, BigInt(i + 1));
        }
        const closed = await s.recv();
        assert.equal(closed?.kind.case, "close");
        assert.equal(await s.recv(), undefined);
        assert.equal((await s.ended()).code, grpc.status.OK);
      } finally {
        s.close();
      }
      // The EnvClient pipelines too: fire without awaiting, answers keep call order.
      const env: GridClient = await EnvClient.connect(server.address);
      try {
        const reset = env.reset({ seed: 4 });
        const steps = Array.from({ length: 10 }, () => env.step(move(Move.LEFT)));
        await reset;
        assert.deepEqual((await Promise.all(steps)).map((t) => t.stepCount), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
      } finally {
        await env.close();
      }
    }));

  it("enforces capacity with a fatal RESOURCE_EXHAUSTED and frees slots on close", () =>
    withServer(gridworld, { maxSessions: 2 }, async (server) => {
      const a = await EnvClient.connect(server.address);
      const b = await EnvClient.connect(server.address);
      await assert.rejects(EnvClient.connect(server.address), (e: unknown) =>
        e instanceof ResourceExhausted && e.fatal);
      await a.close();
      await waitUntil(() => server.manager.active < 2, "the slot to be freed");
      const c = await EnvClient.connect(server.address);
      await Promise.all([b.close(), c.close()]);
      await waitUntil(() => server.manager.active === 0, "every slot to be freed");
    }));

  it("checks message sizes on the client without losing the session", () =>
    withServer(gridworld, { maxMessageBytes: 64 * 1024 }, async (server) => {
      const env = await EnvClient.connect(server.address);
      try {
        await env.reset({ seed: 1 });
        await assert.rejects(env.step({ blob: "x".repeat(100_000) } as never), ResourceExhausted);
        assert.equal((await env.step(move(Move.UP))).stepCount, 1);
      } finally {
        await env.close();
      }
    }));

  it("serves vectorised sessions with batched reset and step", () =>
    withServer(gridworld, {}, async (server) => {
      const env: GridClient = await EnvClient.connect(server.address, { numEnvs: 3 });
      try {
        const reset = await env.resetBatch({ seeds: [20] });
        assert.deepEqual(reset.envIds, [0, 1, 2]);
        const stepped = await env.stepBatch(reset.timeSteps.map((t) => move(bestMove(t.observation!))));
        assert.deepEqual(stepped.timeSteps.map((t) => t.stepCount), [1, 1, 1]);
        assert.equal((await env.state({ envId: 2 })).stepCount, 1);
        await assert.rejects(env.step(move(Move.UP)), FailedPrecondition);
        await assert.rejects(env.stepBatch([move(Move.UP)], { envIds: [5] }), InvalidArgument);
        assert.equal(server.manager.active, 3);
      } finally {
        await env.close();
      }
    }));
});

// ------------------------------------------------------------------------ runtime semantics

interface Gate {
  release: () => void;
}

/** A JSON environment whose step waits for a gate, throws on request, and counts closes. */
function scripted(gates: Gate[], closes: { n: number }): EnvironmentDefinition<string, number> {
  return {
    name: "scripted",
    action: jsonType<string>({ type: "string" }),
    observation: jsonType<number>({ type: "number" }),
    maxEpisodeSteps: 3,
    create: () => {
      let n = 0;
      return {
        reset: () => {
          n = 0;
          return { observation: 0 };
        },
        step: async (action: string) => {
          if (action === "boom") {
            throw new TypeError("boom");
          }
          if (action === "wait") {
            await new Promise<void>((release) => gates.push({ release }));
          }
          n += 1;
          return { observation: n, reward: n };
        },
        close: () => {
          closes.n += 1;
        },
      };
    },
  };
}

describe("session runtime semantics (mirroring the Python reference server)", () => {
  it("truncates at max_episode_steps and maps exceptions to INTERNAL", async () => {
    const gates: Gate[] = [];
    const closes = { n: 0 };
    await withServer(scripted(gates, closes), {}, async (server) => {
      const env = await EnvClient.connect<string, number>(server.address);
      await env.reset();
      await assert.rejects(env.step("boom"), (e: unknown) => e instanceof Internal && e.message === "TypeError: boom" && !e.fatal);
      await assert.rejects(env.step(3 as never), (e: unknown) => e instanceof InvalidArgument && /schema/.test(e.message));
      assert.equal((await env.step("a")).truncated, false);
      assert.equal((await env.step("b")).truncated, false);
      const last = await env.step("c");
      assert.deepEqual([last.truncated, last.terminated, last.stepCount, last.observation], [true, false, 3, 3]);
      assert.equal((await env.state()).status, EpisodeStatus.TRUNCATED);
      await assert.rejects(env.step("d"), (e: unknown) => e instanceof FailedPrecondition && /truncated/.test(e.message));
      await env.close();
      await waitUntil(() => closes.n === 1, "close() to be called");
    });
    assert.equal(closes.n, 1, "close() is called exactly once");
  });

  it("aborts the episode when a step outlives its timeout", async () => {
    const gates: Gate[] = [];
    await withServer(scripted(gates, { n: 0 }), {}, async (server) => {
      const env = await EnvClient.connect<string, number>(server.address);
      try {
        await env.reset();
        await assert.rejects(env.step("wait", { stepTimeoutMs: 50 }), (e: unknown) =>
          e instanceof DeadlineExceeded && !e.fatal);
        const st = await env.state();
        assert.equal(st.status, EpisodeStatus.ABORTED);
        assert.equal(st.stepCount, 0);
        await assert.rejects(env.step("a"), FailedPrecondition);
        gates.forEach((g) => g.release()); // the straggler finishes before the next call runs
        const r = await env.reset();
        assert.equal(r.stepCount, 0);
        assert.equal((await env.step("a")).stepCount, 1);
      } finally {
        await env.close();
      }
    });
  });

  it("a client-side timeout never desyncs the stream", async () => {
    const gates: Gate[] = [];
    await withServer(scripted(gates, { n: 0 }), {}, async (server) => {
      const env = await EnvClient.connect<string, number>(server.address);
      try {
        await env.reset();
        await assert.rejects(env.step("wait", { timeoutMs: 50 }), DeadlineExceeded);
        await waitUntil(() => gates.length === 1, "the step to be waiting");
        const next = env.step("a");
        gates[0]!.release();
        assert.equal((await next).observation, 2); // the late answer (1) was discarded
      } finally {
        await env.close();
      }
    });
  });

  it("reaps idle sessions with DEADLINE_EXCEEDED and frees them", async () => {
    const closes = { n: 0 };
    await withServer(scripted([], closes), { idleTimeoutMs: 200 }, async (server) => {
      const env = await EnvClient.connect<string, number>(server.address);
      await waitUntil(() => env.ended !== undefined, "the idle session to be reaped");
      assert.ok(env.ended instanceof DeadlineExceeded, String(env.ended));
      await assert.rejects(env.reset(), DeadlineExceeded);
      await waitUntil(() => closes.n === 1 && server.manager.active === 0, "the slot to be freed");
      await env.close();
    });
  });

  it("drains on stop: UNAVAILABLE for open sessions", async () => {
    const server = await new Server(gridworld, { port: 0 }).start();
    const env = await EnvClient.connect(server.address);
    await env.reset({ seed: 1 });
    await server.stop(500);
    await waitUntil(() => env.ended !== undefined, "the session to end");
    assert.ok(env.ended instanceof Unavailable, String(env.ended));
    await env.close();
  });
});

describe("payload encodings", () => {
  it("packs client messages with the advertised descriptors", () =>
    withServer(gridworld, {}, async (server) => {
      const env = await EnvClient.connect(server.address);
      try {
        // Decoded observations are messages of the advertised type, usable with generated schemas.
        const r = await env.reset({ seed: 2 });
        assert.ok(isMessage(r.observation, ObservationSchema));
        const desc = env.registry.getMessage("gridworld.v1.Action");
        assert.ok(desc !== undefined);
        const viaRegistry = await env.step(create(desc, { move: Move.DOWN }) as never);
        assert.equal(viaRegistry.stepCount, 1);
        const typeSchemas = messageType(ActionSchema).spec([move(Move.UP)]);
        assert.equal(typeSchemas.examples.length, 1);
      } finally {
        await env.close();
      }
    }));
});

// ------------------------------------------------------------------------ tools

const call = (name: string, args: Record<string, string>) => create(CallToolRequestSchema, { name, arguments: args });

/** The echo environment plus a failing tool and a slow one. */
const tooled: typeof echo = {
  ...echo,
  tools: [
    ...echo.tools!,
    { name: "fail", call: () => { throw new RangeError("no luck"); } },
    { name: "slow", timeoutMs: 50, call: () => new Promise((r) => setTimeout(() => r("late"), 2000)) },
  ],
};

describe("tools (MCP-shaped), served by the TypeScript server helper", () => {
  it("lists and calls tools as side calls, with the error table", () =>
    withServer(tooled, {}, async (server) => {
      const env = await EnvClient.connect(server.address);
      try {
        assert.equal(env.info.capabilities?.tools, true);
        const tools = await env.listTools();
        assert.deepEqual(tools.map((t) => t.name), ["echo_message", "echo_with_length", "fail", "slow"]);
        assert.deepEqual(tools[0]!.inputSchema?.required, ["message"]);
        const r = await env.callTool("echo_with_length", { message: "héllo" });
        assert.deepEqual(r.structuredContent, { message: "héllo", length: 5 });
        assert.equal(r.content[0]?.kind.case, "text");
        await assert.rejects(env.callTool("nope"), (e: unknown) => e instanceof NotFound && !e.fatal);
        await assert.rejects(env.callTool("echo_message", { msg: "x" }), (e: unknown) =>
          e instanceof InvalidArgument && /message/.test(e.message) && Array.isArray(e.details));
        const failed = await env.callTool("fail");
        assert.equal(failed.isError, true, "a failing tool is a result, not a protocol error");
        assert.equal(failed.content[0]?.kind.value?.$typeName, "openenv.v1.TextContent");
        await assert.rejects(env.callTool("slow"), DeadlineExceeded);
        const st = await env.state();
        assert.deepEqual([st.status, st.stepCount, st.state], [EpisodeStatus.NOT_STARTED, 0, { echoed: 1 }]);
      } finally {
        await env.close();
      }
    }));

  it("runs tool-call steps through the default tool step", () =>
    withServer(tooled, {}, async (server) => {
      const env = await EnvClient.connect(server.address);
      try {
        const first = await env.reset();
        assert.equal(first.metadata.message, "Echo environment ready!");
        const [a, b] = await Promise.all([env.step(call("echo_message", { message: "hello" })),
          env.step(call("echo_with_length", { message: "hey" }))]);
        assert.deepEqual([a.stepCount, b.stepCount], [1, 2]);
        assert.ok(Math.abs(a.reward! - 0.5) < 1e-9);
        assert.ok(isMessage(a.observation, CallToolResponseSchema));
        assert.equal(a.observation.name, "echo_message");
        await assert.rejects(env.step(call("nope", {})), NotFound);
        await assert.rejects(env.step({ name: "echo_message" } as never), InvalidArgument); // JSON, not a CallToolRequest
        assert.equal((await env.state()).stepCount, 2, "refused steps are not counted");
        await assert.rejects(env.step(call("slow", {})), DeadlineExceeded);
        assert.equal((await env.state()).status, EpisodeStatus.ABORTED);
      } finally {
        await env.close();
      }
    }));

  it("serves only tools in tools-only mode", () =>
    withServer(echo, { toolsOnly: true }, async (server) => {
      const env = await EnvClient.connect(server.address);
      try {
        assert.equal(env.info.capabilities?.toolsOnly, true);
        await assert.rejects(env.reset(), Unimplemented);
        await assert.rejects(env.step(call("echo_message", { message: "x" })), Unimplemented);
        await assert.rejects(env.state(), Unimplemented);
        assert.equal((await env.callTool("echo_message", { message: "x" })).structuredContent?.result, "x");
      } finally {
        await env.close();
      }
    }));

  it("refuses reserved and duplicate tool names at definition time", () => {
    assert.throws(() => new Server({ ...echo, tools: [{ name: "step", call: () => 1 }] }), /reserved/);
    assert.throws(() => new Server({ ...echo, tools: [echo.tools![0]!, echo.tools![0]!] }), /twice/);
    assert.throws(() => new Server(gridworld, { toolsOnly: true }), /no tools/);
  });
});
