/**
 * Protocols 1.5 and 1.6 in the TypeScript binding, over real gRPC on loopback: wait deadlines
 * that travel with world requests (RFC 0016: `SessionRequest.wait_timeout`), seat events
 * (`TimeStep.seat_events`, `observe` woken by them, rejoin deadlines and the vacancy rule), and
 * a grading environment's feedback levels (RFC 0015).
 *
 * The world cases run against the TypeScript server in process and, with the URLs that
 * python/tests/test_typescript.py passes, against the Python reference servers:
 * OPENENV_RPS_URL (`openenv.games:RockPaperScissors`, simultaneous), OPENENV_TICTACTOE_URL
 * (`openenv.games:TicTacToe`) and OPENENV_MATH_URL (math_env, which grades `submit_answer`).
 * Without them those cases are skipped.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { create, isMessage, type JsonObject } from "@bufbuild/protobuf";
import { EnvClient } from "../src/client.js";
import { jsonType } from "../src/codec.js";
import { tictactoe } from "../src/envs/tictactoe.js";
import { Aborted, ClientTimeout, DeadlineExceeded, EnvError, FailedPrecondition, InvalidArgument } from "../src/errors.js";
import { CallToolRequestSchema, CallToolResponseSchema, type CallToolResponse } from "../src/gen/openenv/v1/tool_pb.js";
import { multiAgent, type WorldStep } from "../src/world.js";
import { WAIT_MS, withServer } from "./helpers.js";

const RPS = process.env.OPENENV_RPS_URL;
const TTT = process.env.OPENENV_TICTACTOE_URL;
const MATH = process.env.OPENENV_MATH_URL;
const unset = (name: string): string | false => (process.env[name] ? false : `${name} is not set (python/tests/test_typescript.py sets it)`);

type World = EnvClient<number, JsonObject, JsonObject>;
const connect = (url: string, opts = {}): Promise<World> =>
  EnvClient.connect<number, JsonObject, JsonObject>(url, { connectTimeoutMs: WAIT_MS, ...opts });

/** A server's DEADLINE_EXCEEDED (the wait ended there, not fatal), not the client giving up. */
async function serverDeadline(p: Promise<unknown>): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof DeadlineExceeded, `expected DeadlineExceeded, got ${String(e)}`);
    assert.ok(!(e instanceof ClientTimeout), "the client gave up: the server did not end the wait (wait_timeout)");
    assert.equal((e as EnvError).fatal, false);
    return true;
  });
}

/**
 * A simultaneous world (agents `p0`, `p1`: throws 0 rock, 1 paper, 2 scissors): a step that waits
 * for the other session ends DEADLINE_EXCEEDED on the server after the client's timeout, the
 * session answers its next request at once, the withdrawn action is never played; a joining
 * session's reset waiting for the owner ends the same way; a step waiting on a seat that leaves
 * ends ABORTED.
 */
async function waitDeadlines(url: string, [p0, p1]: [string, string]): Promise<void> {
  const a = await connect(url, { agentIds: [p0] });
  try {
    const caps = a.info.capabilities!;
    assert.ok(caps.worldWaitTimeouts && caps.seatEvents, "a 1.6 server of worlds advertises both");
    const b = await connect(url, { joinToken: a.world!.joinToken });
    try {
      const started = b.reset();
      await a.reset({ seed: 1 });
      await started;
      // Nobody else acts: the server ends the wait (its wait_timeout is the client's timeout).
      await serverDeadline(a.stepAgents({ [p0]: 2 }, { timeoutMs: 300 }));
      // The session answers at once (the server no longer holds it), nothing changed.
      const now = await a.observe({ timeoutMs: WAIT_MS });
      assert.deepEqual(now.toAct, [p0, p1]);
      assert.equal(now.stepCount, 0);
      // The withdrawn scissors (2) is not played: paper (1) against rock (0) wins.
      const [ra, rb] = await Promise.all([a.stepAgents({ [p0]: 1 }), b.stepAgents({ [p1]: 0 })]);
      assert.equal(ra.agents[p0]!.reward, 1);
      assert.equal(rb.agents[p1]!.reward, -1);
      assert.equal(ra.stepCount, 1);
      // b has seen this episode: its reset waits for the owner's next one, bounded on the server.
      await serverDeadline(b.reset({ timeoutMs: 300 }));
      assert.equal((await b.observe({ timeoutMs: WAIT_MS })).stepCount, 1);
      // A step waiting for an agent whose session leaves ends ABORTED, its action withdrawn.
      const aborted = assert.rejects(a.stepAgents({ [p0]: 0 }), (e: unknown) => e instanceof Aborted && !e.fatal);
      await b.close();
      await aborted;
    } finally {
      await b.close();
    }
  } finally {
    await a.close();
  }
}

/** Tic-tac-toe (x, o): a join and a leave reach the other session in its next time step, and
 *  an `observe` waiting with `seatEvents` is woken by the leave. */
async function seatEvents(url: string): Promise<void> {
  const alice = await connect(url, { agentIds: ["x"] });
  try {
    assert.deepEqual((await alice.observe()).seatEvents, []);
    const bob = await connect(url, { joinToken: alice.world!.joinToken });
    try {
      const joined = (await alice.observe()).seatEvents;
      assert.deepEqual(joined.map((e) => [e.kind, e.agentIds]), [["joined", ["o"]]]);
      assert.deepEqual((await alice.observe()).seatEvents, [], "each event is delivered once");
      const started = bob.reset();
      await alice.reset({ seed: 2 });
      assert.deepEqual((await started).seatEvents, [], "a session is not told of its own join");
      await alice.step(4); // o's turn: nothing wakes x's wait but a seat event
      const woken = alice.observe({ wait: true, seatEvents: true, timeoutMs: WAIT_MS });
      await bob.close();
      const left = (await woken).seatEvents;
      assert.deepEqual(left.map((e) => [e.kind, e.agentIds]), [["left", ["o"]]]);
      // Both games declare a rejoin deadline of 60 s: the seat is held, and the event says how long.
      assert.ok(left[0]!.rejoinWithinMs !== undefined && left[0]!.rejoinWithinMs > 0 && left[0]!.rejoinWithinMs <= 60_000);
    } finally {
      await bob.close();
    }
    const carol = await connect(url, { joinToken: alice.world!.joinToken });
    try {
      const r = await alice.observe();
      assert.deepEqual(r.seatEvents.map((e) => [e.kind, e.agentIds]), [["joined", ["o"]]]);
      assert.deepEqual(r.toAct, ["o"], "the held seat's episode goes on with the new session");
      assert.equal((await carol.step(0)).stepCount, 2);
    } finally {
      await carol.close();
    }
  } finally {
    await alice.close();
  }
}

/** Rock-paper-scissors, written here: simultaneous, three rounds (as openenv.games'); a seat
 *  left empty is held 50 ms, then the absent agent forfeits. */
class Rps {
  left = 0;
  reset(): void {
    this.left = 3;
  }
  toAct(): string[] {
    return this.left > 0 ? ["p0", "p1"] : [];
  }
  observe(): JsonObject {
    return { left: this.left };
  }
  step(actions: Record<string, number>): WorldStep {
    this.left -= 1;
    const score = (actions.p0! - actions.p1! + 3) % 3 === 1 ? 1 : actions.p0 === actions.p1 ? 0 : -1;
    return { rewards: { p0: score, p1: -score }, terminated: this.left === 0 };
  }
}
const rpsDef = {
  name: "rps16_ts",
  agents: ["p0", "p1"],
  simultaneous: true,
  rewardSum: 0,
  action: jsonType<number>({ type: "integer", minimum: 0, maximum: 2 }),
  observation: jsonType<JsonObject>({ type: "object" }),
  exampleActions: [0, 1],
  rejoinTimeoutMs: 50,
  vacancy: "forfeit" as const,
  create: () => new Rps(),
};
const rps = multiAgent<number, JsonObject>(rpsDef);
/** The same game where p1 may only throw rock or paper: a per-agent action type (RFC 0016). */
const lopsided = multiAgent<number, JsonObject>({
  ...rpsDef,
  name: "rps16_lopsided_ts",
  agentActions: { p1: jsonType<number>({ type: "integer", minimum: 0, maximum: 1 }) },
});

describe("protocol 1.6: the TypeScript client and server (in process)", () => {
  it("ends a world wait at the request's wait_timeout on the server, not fatal", () =>
    withServer(rps, {}, (s) => waitDeadlines(s.address, ["p0", "p1"])));
  it("announces seats that join and leave", () => withServer(tictactoe, {}, (s) => seatEvents(s.address)));
  it("applies the vacancy rule when a rejoin deadline passes", () => withServer(rps, {}, async (s) => {
    const a = await connect(s.address, { agentIds: ["p0"] });
    try {
      assert.equal(a.multiAgent?.rejoinTimeout?.nanos, 50_000_000);
      const b = await connect(s.address, { joinToken: a.world!.joinToken });
      const started = b.reset();
      await a.reset();
      await started;
      await b.close();
      const kinds: string[] = [];
      let r = await a.observe({ wait: true, seatEvents: true, timeoutMs: WAIT_MS });
      kinds.push(...r.seatEvents.map((e) => e.kind));
      while (!kinds.includes("expired")) {
        r = await a.observe({ wait: true, seatEvents: true, timeoutMs: WAIT_MS });
        kinds.push(...r.seatEvents.map((e) => e.kind));
      }
      assert.deepEqual(kinds, ["left", "expired"]);
      assert.ok(r.done && r.toAct.length === 0, "the episode ended by the rule");
      assert.equal(r.agents.p0!.reward, 1, "the absent agent forfeits (the default forfeit)");
    } finally {
      await a.close();
    }
  }));
  it("validates each agent's action against its own type", () => withServer(lopsided, {}, async (s) => {
    const env = await connect(s.address);
    try {
      const [p0, p1] = env.multiAgent!.agents;
      assert.equal(p0!.action, undefined, "p0 has the environment's type");
      assert.deepEqual(p1!.action?.jsonSchema, { type: "integer", minimum: 0, maximum: 1 });
      await env.reset();
      await assert.rejects(env.stepAgents({ p0: 0, p1: 2 }), (e: unknown) => e instanceof InvalidArgument && !e.fatal);
      const r = await env.stepAgents({ p0: 2, p1: 1 }); // nothing changed by the refusal: round 1
      assert.equal(r.stepCount, 1);
      assert.equal(r.agents.p1!.reward, -1); // p0's scissors (2) beats p1's paper (1)
    } finally {
      await env.close();
    }
  }));
  it("a client timeout travels only to a server that honours it", () => withServer(rps, {}, async (s) => {
    const a = await connect(s.address, { agentIds: ["p0"] });
    try {
      // The capability is what gates it (a 1.4 server would never see the field): without it the
      // client's timeout stays on this side.
      a.info.capabilities!.worldWaitTimeouts = false;
      const b = await connect(s.address, { joinToken: a.world!.joinToken });
      try {
        const started = b.reset();
        await a.reset();
        await started;
        await assert.rejects(a.stepAgents({ p0: 1 }, { timeoutMs: 200 }), ClientTimeout);
      } finally {
        await b.close();
      }
    } finally {
      await a.close();
    }
  }));
});

describe("protocol 1.6: the TypeScript client against the Python reference servers", () => {
  it("ends a wait of openenv.games:RockPaperScissors at the request's wait_timeout", { skip: unset("OPENENV_RPS_URL") },
    () => waitDeadlines(RPS!, ["player_0", "player_1"]));
  it("reads the seat events of openenv.games:TicTacToe", { skip: unset("OPENENV_TICTACTOE_URL") }, () => seatEvents(TTT!));
});

/** The text blocks of a tool step's observation (a strict graded step's is only "reward: R"). */
const gradedText = (obs: CallToolResponse): string[] =>
  (obs.result?.content ?? []).map((b) => (b.kind.case === "text" ? b.kind.value.text : `<${b.kind.case}>`));

const submit = (answer: string) => create(CallToolRequestSchema, { name: "submit_answer", arguments: { answer } });

describe("protocol 1.5: the TypeScript client against a Python grading environment (math_env)", () => {
  it("reads the grading declaration and asks for each feedback level", { skip: unset("OPENENV_MATH_URL") }, async () => {
    const env = await EnvClient.connect<unknown, CallToolResponse>(MATH!, { connectTimeoutMs: WAIT_MS });
    try {
      assert.deepEqual(env.grading, { grades: true, feedback: "strict", offered: ["strict", "rich"] });
      assert.equal(env.feedback, "strict");
      // Strict (the default): the graded step's observation is its reward, the breakdown its root.
      const first = await env.reset({ seed: 3 });
      assert.equal(first.feedback, "strict");
      const strict = await env.step(submit("12345"));
      assert.ok(strict.done && strict.feedback === "strict");
      assert.ok(isMessage(strict.observation, CallToolResponseSchema));
      assert.deepEqual(gradedText(strict.observation), [`reward: ${strict.reward}`]);
      assert.deepEqual(strict.rewardBreakdown?.children ?? [], []);
      // A grading tool is no side call in a strict episode.
      await env.reset({ seed: 3 });
      await assert.rejects(env.callTool("submit_answer", { answer: "1" }), (e: unknown) => e instanceof FailedPrecondition && !e.fatal);
      // Rich, asked for at reset: the environment's own result and the whole breakdown.
      const rich = await env.reset({ seed: 3, feedback: "rich" });
      assert.equal(rich.feedback, "rich");
      const graded = await env.step(submit("12345"));
      assert.equal(graded.feedback, "rich");
      assert.notDeepEqual(gradedText(graded.observation!), [`reward: ${graded.reward}`], "the tool's own result");
      assert.ok((graded.rewardBreakdown?.children.length ?? 0) > 0, "the rubric's children in a rich episode");
      // A level the environment does not offer starts no episode.
      await assert.rejects(env.reset({ options: { feedback: "verbose" } }), (e: unknown) => e instanceof InvalidArgument && !e.fatal);
      assert.equal(env.feedback, "rich", "a refused reset leaves the episode's level as it was");
    } finally {
      await env.close();
    }
  });

  it("reads no grading from an environment that does not grade", () => withServer(tictactoe, {}, async (s) => {
    const env = await connect(s.address);
    try {
      assert.deepEqual(env.grading, { grades: false, feedback: undefined, offered: [] });
      assert.equal((await env.reset()).feedback, undefined);
    } finally {
      await env.close();
    }
  }));
});
