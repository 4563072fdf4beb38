/**
 * The TypeScript client against the Python reference environments, over real gRPC.
 *
 * The servers are started by python/tests/test_typescript.py, which passes their URLs
 * in OPENENV_ECHO_URL (echo_env.server:EchoEnvironment) and OPENENV_GRIDWORLD_URL
 * (gridworld.server:GridWorldEnvironment), and OPENENV_SECURED_URL with
 * OPENENV_SECURED_TOKEN for an echo_env that requires that bearer token (RFC 0003).
 * Without them these tests are skipped.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { create, isMessage } from "@bufbuild/protobuf";
import { EnvClient } from "../src/client.js";
import { EpisodeStatus } from "../src/gen/openenv/v1/environment_pb.js";
import { FailedPrecondition, InvalidArgument, NotFound, Unauthenticated } from "../src/errors.js";
import { ActionSchema, Move, ObservationSchema, type Action, type Observation } from "../src/gen/gridworld/v1/gridworld_pb.js";
import { CallToolRequestSchema, CallToolResponseSchema, type CallToolResponse } from "../src/gen/openenv/v1/tool_pb.js";
import { bestMove } from "./helpers.js";

const ECHO = process.env.OPENENV_ECHO_URL;
const GRID = process.env.OPENENV_GRIDWORLD_URL;
const skipEcho = ECHO ? false : "OPENENV_ECHO_URL is not set (python/tests/test_typescript.py sets it)";
const skipGrid = GRID ? false : "OPENENV_GRIDWORLD_URL is not set (python/tests/test_typescript.py sets it)";
const SECURED = process.env.OPENENV_SECURED_URL;
const SECURED_TOKEN = process.env.OPENENV_SECURED_TOKEN;
const skipSecured = SECURED && SECURED_TOKEN ? false : "OPENENV_SECURED_URL/_TOKEN are not set (python/tests/test_typescript.py sets them)";

const echo = (message: string) => create(CallToolRequestSchema, { name: "echo_message", arguments: { message } });

describe("TypeScript client, Python echo_env", () => {
  it("lists and calls tools, with the error table", { skip: skipEcho }, async () => {
    const env = await EnvClient.connect(ECHO!, { clientName: "ts-interop" });
    try {
      assert.equal(env.info.name, "echo_env");
      assert.equal(env.info.capabilities?.tools, true);
      const tools = await env.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), ["echo_message", "echo_with_length"]);
      assert.equal((tools[0]!.inputSchema as { type?: string }).type, "object");
      const r = await env.callTool("echo_with_length", { message: "hey" });
      assert.equal(r.isError, false);
      assert.deepEqual(r.structuredContent, { message: "hey", length: 3 });
      await assert.rejects(env.callTool("nope"), (e: unknown) => e instanceof NotFound && !e.fatal);
      await assert.rejects(env.callTool("echo_message", { wrong: 1 }), InvalidArgument);
    } finally {
      await env.close();
    }
  });

  it("plays episodes of tool-call steps, pipelined", { skip: skipEcho }, async () => {
    const env = await EnvClient.connect<unknown, CallToolResponse>(ECHO!);
    try {
      await assert.rejects(env.step(echo("early")), FailedPrecondition);
      const first = await env.reset({ seed: 1 });
      assert.equal(first.metadata.message, "Echo environment ready!");
      const words = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"];
      const steps = await Promise.all(words.map((w) => env.step(echo(w)))); // pipelined
      assert.deepEqual(steps.map((s) => s.stepCount), [1, 2, 3, 4, 5, 6]);
      steps.forEach((s, i) => {
        assert.ok(isMessage(s.observation, CallToolResponseSchema));
        assert.equal(s.observation.name, "echo_message");
        const block = s.observation.result?.content[0]?.kind;
        assert.equal(block?.case, "text");
        assert.equal(block.value.text, words[i]);
        assert.ok(Math.abs(s.reward! - 0.1 * words[i]!.length) < 1e-9);
        assert.equal(s.episodeId, first.episodeId);
      });
      const st = await env.state();
      assert.equal(st.stepCount, 6);
      assert.deepEqual(st.state, { echoed: 6 });
    } finally {
      await env.close();
    }
  });
});

describe("TypeScript client, Python server requiring a token (RFC 0003)", () => {
  it("is refused UNAUTHENTICATED without the token or with another, and served with it", { skip: skipSecured }, async () => {
    for (const token of ["", "not-the-token"]) {
      await assert.rejects(EnvClient.connect(SECURED!, { token }), (e: unknown) => e instanceof Unauthenticated && e.fatal);
    }
    const env = await EnvClient.connect(SECURED!, { token: SECURED_TOKEN! });
    try {
      assert.equal(env.info.capabilities?.authRequired, true);
      await env.reset();
      assert.equal((await env.callTool("echo_message", { message: "x" })).structuredContent?.result, "x");
    } finally {
      await env.close();
    }
  });
});

describe("TypeScript client, Python gridworld", () => {
  it("decodes typed observations from the advertised descriptors and reaches the goal", { skip: skipGrid }, async () => {
    const env = await EnvClient.connect<Action, Observation>(GRID!);
    try {
      assert.equal(env.info.name, "gridworld");
      let ts = await env.reset({ seed: 7, options: { size: 11 } });
      assert.ok(isMessage(ts.observation, ObservationSchema));
      assert.equal(ts.observation.grid.length, 11);
      let total = 0;
      while (!ts.done) {
        ts = await env.step(create(ActionSchema, { move: bestMove(ts.observation!) }));
        total += ts.reward!;
      }
      assert.equal(ts.terminated, true);
      assert.ok(total > 1, `return ${total}`);
      const st = await env.state();
      assert.equal(st.status, EpisodeStatus.TERMINATED);
      await assert.rejects(env.step(create(ActionSchema, { move: Move.UP })), FailedPrecondition);
      await env.reset({ seed: 7 });
      await assert.rejects(env.step(create(ActionSchema, { move: Move.UNSPECIFIED })), InvalidArgument);
    } finally {
      await env.close();
    }
  });

  it("is deterministic per seed across sessions", { skip: skipGrid }, async () => {
    const run = async (): Promise<string[]> => {
      const env = await EnvClient.connect<Action, Observation>(GRID!);
      try {
        const frames: string[] = [];
        let ts = await env.reset({ seed: 99 });
        for (const m of [Move.UP, Move.LEFT, Move.DOWN, Move.RIGHT, Move.RIGHT]) {
          frames.push(`${ts.observation!.grid.join("/")}|${ts.reward}`);
          ts = await env.step(create(ActionSchema, { move: m }));
        }
        return frames;
      } finally {
        await env.close();
      }
    };
    const [a, b] = await Promise.all([run(), run()]);
    assert.deepEqual(a, b);
  });

  it("drives a vectorised session", { skip: skipGrid }, async () => {
    const env = await EnvClient.connect<Action, Observation>(GRID!, { numEnvs: 2 });
    try {
      const reset = await env.resetBatch({ seeds: [5, 6] });
      assert.deepEqual(reset.envIds, [0, 1]);
      const stepped = await env.stepBatch(reset.timeSteps.map((t) => create(ActionSchema, { move: bestMove(t.observation!) })));
      assert.deepEqual(stepped.timeSteps.map((t) => t.stepCount), [1, 1]);
    } finally {
      await env.close();
    }
  });
});
