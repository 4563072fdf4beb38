/**
 * Protocol 1.4 in the TypeScript binding, both sides, over real gRPC on loopback:
 * multi-agent worlds (RFC 0012: self-play, create and join by token, turn order, private
 * views, observe with wait, simultaneous steps, leaving and ownership) and the description
 * by digest with per-worker loads (RFC 0013).
 *
 * Each case runs against the TypeScript tic-tac-toe in process and, with the URLs that
 * python/tests/test_typescript.py passes, against the Python reference servers:
 * OPENENV_TICTACTOE_URL (`openenv.games:TicTacToe`, one process) and OPENENV_WORKERS_URL (the
 * same served with `--workers 2`). Without them those cases are skipped.
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { JsonObject } from "@bufbuild/protobuf";
import { EnvClient } from "../src/client.js";
import { PROTOCOL_VERSION } from "../src/grpc.js";
import { jsonType } from "../src/codec.js";
import { tictactoe, type TicTacToeView } from "../src/envs/tictactoe.js";
import {
  DeadlineExceeded,
  EnvError,
  FailedPrecondition,
  InvalidArgument,
  NotFound,
  PermissionDenied,
  Unimplemented,
} from "../src/errors.js";
import { EpisodeStatus } from "../src/gen/openenv/v1/environment_pb.js";
import { TurnMode } from "../src/gen/openenv/v1/multiagent_pb.js";
import { multiAgent, type WorldStep } from "../src/world.js";
import { WAIT_MS, withServer } from "./helpers.js";

const TTT = process.env.OPENENV_TICTACTOE_URL;
const WORKERS = process.env.OPENENV_WORKERS_URL;
const unset = (name: string): string => `${name} is not set (python/tests/test_typescript.py sets it)`;

type Ttt = EnvClient<number, TicTacToeView, JsonObject>;
const connect = (url: string, opts = {}): Promise<Ttt> =>
  EnvClient.connect<number, TicTacToeView, JsonObject>(url, { connectTimeoutMs: WAIT_MS, ...opts });

const tsTtt = <T>(fn: (url: string) => Promise<T>): Promise<T> => withServer(tictactoe, {}, (s) => fn(s.address));

/** The first free cell of the acting agent's view (a deterministic policy). */
const firstFree = (view: TicTacToeView | undefined): number => {
  const cell = view?.action_mask.indexOf(1) ?? -1;
  assert.ok(cell >= 0, `no free cell in ${JSON.stringify(view)}`);
  return cell;
};

async function rejects(p: Promise<unknown>, cls: new (...a: never[]) => EnvError, fatal?: boolean): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof cls, `expected ${cls.name}, got ${String(e)}`);
    if (fatal !== undefined) {
      assert.equal((e as EnvError).fatal, fatal);
    }
    return true;
  });
}

/** Self-play: one session acts for both agents; the returns sum to 0 and the session reads the world's state. */
async function selfPlay(url: string): Promise<void> {
  const env = await connect(url);
  try {
    const spec = env.multiAgent!;
    assert.deepEqual(spec.agents.map((a) => [a.id, a.role]), [["x", "first"], ["o", "second"]]);
    assert.equal(spec.mode, TurnMode.TURN_BASED);
    assert.equal(spec.rewardSum, 0);
    assert.ok(spec.joinable && env.info.capabilities?.multiAgent);
    assert.deepEqual(env.world?.agentIds, ["x", "o"]);
    assert.ok(env.world?.owner);
    await rejects(env.step(4), FailedPrecondition, false); // before reset
    let r = await env.reset({ seed: 3 });
    assert.deepEqual(r.toAct, ["x"]);
    assert.deepEqual(Object.keys(r.agents).sort(), ["o", "x"]);
    const returns: Record<string, number> = { x: 0, o: 0 };
    while (!r.done) {
      await rejects(env.step(0, { agentId: r.toAct[0] === "x" ? "o" : "x" }), FailedPrecondition, false);
      await rejects(env.step(0, { agentId: "z" }), InvalidArgument, false);
      const agent = r.toAct[0]!;
      r = await env.step(firstFree(r.agents[agent]!.observation));
      for (const [a, part] of Object.entries(r.agents)) {
        returns[a]! += part.reward ?? 0;
      }
    }
    assert.deepEqual(r.toAct, []);
    assert.equal(returns.x! + returns.o!, 0);
    assert.deepEqual(r.metadata, { winner: "x" }); // first-free play: x takes 0, 2, 4, 6
    const st = await env.state();
    assert.equal(st.status, EpisodeStatus.TERMINATED);
    assert.equal(st.stepCount, r.stepCount);
    assert.ok(st.state !== undefined, "a session acting for every agent reads the world's state");
    await rejects(env.snapshot(), Unimplemented, false); // not offered for worlds in 1.4
  } finally {
    await env.close();
  }
}

/** Agent against agent: two sessions, one world; each sees only its own agent. */
async function twoSessions(url: string): Promise<void> {
  const alice = await connect(url, { agentIds: ["x"], clientName: "alice" });
  try {
    const world = alice.world!;
    assert.deepEqual(world.agentIds, ["x"]);
    assert.ok(world.owner && world.joinToken !== "" && world.worldId !== "");
    await rejects(connect(url, { joinToken: "no-such-world" }), NotFound, true);
    await rejects(connect(url, { joinToken: world.joinToken, agentIds: ["x"] }), FailedPrecondition, true);
    await rejects(connect(url, { joinToken: world.joinToken, agentIds: ["nobody"] }), InvalidArgument, true);
    const bob = await connect(url, { joinToken: world.joinToken, clientName: "bob" });
    try {
      assert.deepEqual(bob.world?.agentIds, ["o"]);
      assert.equal(bob.world?.owner, false);
      assert.equal(bob.world?.worldId, world.worldId);
      await rejects(connect(url, { joinToken: world.joinToken }), FailedPrecondition, true); // none left
      // The joined session's reset waits for the owner's episode.
      const waiting = bob.reset();
      const first = await alice.reset({ seed: 5 });
      const seen = await waiting;
      assert.equal(seen.episodeId, first.episodeId);
      assert.deepEqual(Object.keys(first.agents), ["x"]);
      assert.deepEqual(Object.keys(seen.agents), ["o"]);
      assert.deepEqual(seen.toAct, ["x"]);
      assert.equal((await bob.state()).state, undefined, "no world state for a session acting for some agents");
      await rejects(bob.step(0), FailedPrecondition, false); // not o's turn
      await rejects(bob.step(0, { agentId: "x" }), PermissionDenied, false);
      await rejects(bob.observe({ wait: true, waitTimeoutMs: 50 }), DeadlineExceeded, false);
      // Bob waits for his turn; Alice's move wakes him.
      const turn = bob.observe({ wait: true });
      const afterX = await alice.step(4);
      assert.deepEqual(afterX.toAct, ["o"]);
      const mine = await turn;
      assert.deepEqual(mine.toAct, ["o"]);
      assert.deepEqual(mine.agents.o!.observation!.board, [0, 0, 0, 0, 2, 0, 0, 0, 0]);
      assert.deepEqual(afterX.agents.x!.observation!.board, [0, 0, 0, 0, 1, 0, 0, 0, 0]);
      await rejects(bob.step(4), InvalidArgument, false); // taken: rejected, o still to act
      const afterO = await bob.step(0);
      assert.deepEqual(afterO.toAct, ["x"]);
      assert.equal(afterO.stepCount, 2);
    } finally {
      await bob.close();
    }
    // Bob left: his agent is free for another join, and the world outlives its owner.
    const carol = await connect(url, { joinToken: world.joinToken });
    try {
      assert.deepEqual(carol.world?.agentIds, ["o"]);
      await alice.close();
      const now = await carol.observe();
      assert.ok(now.episodeId !== "" && now.stepCount === 2);
      const fresh = await carol.reset({ seed: 6 }); // carol owns the world now
      assert.notEqual(fresh.episodeId, now.episodeId);
      assert.equal(fresh.stepCount, 0);
    } finally {
      await carol.close();
    }
  } finally {
    await alice.close();
  }
}

/** The description by digest: a second session on the same server gets it from this process's cache. */
async function digests(url: string, version: string): Promise<void> {
  const a = await connect(url);
  const b = await connect(url);
  try {
    assert.match(a.infoDigest, /^sha256:[0-9a-f]{64}$/);
    assert.equal(b.infoDigest, a.infoDigest);
    assert.ok(b.infoFromCache, "the server left the description out of the second handshake");
    assert.equal(b.info, a.info);
    assert.equal(b.info.protocolVersion, version);
    const c = await connect(url, { infoCache: false });
    try {
      assert.ok(!c.infoFromCache && c.info.name === a.info.name);
    } finally {
      await c.close();
    }
  } finally {
    await a.close();
    await b.close();
  }
}

/** Rock-paper-scissors, written here: a simultaneous world (one round). */
class Rps {
  throws: Record<string, number> = {};
  over = true;
  reset(): void {
    this.over = false;
    this.throws = {};
  }
  toAct(): string[] {
    return this.over ? [] : ["p0", "p1"];
  }
  observe(agent: string): JsonObject {
    const other = agent === "p0" ? "p1" : "p0";
    return { opponent: this.throws[other] ?? -1 };
  }
  step(actions: Record<string, number>): WorldStep {
    this.throws = { ...actions };
    this.over = true;
    const [a, b] = [actions.p0!, actions.p1!];
    const score = a === b ? 0 : (a - b + 3) % 3 === 1 ? 1 : -1;
    return { rewards: { p0: score, p1: -score }, terminated: true };
  }
}
const rps = multiAgent<number, JsonObject>({
  name: "rps_ts",
  agents: ["p0", "p1"],
  simultaneous: true,
  rewardSum: 0,
  action: jsonType<number>({ type: "integer", minimum: 0, maximum: 2 }),
  observation: jsonType<JsonObject>({ type: "object" }),
  exampleActions: [0, 1],
  create: () => new Rps(),
});

describe("protocol 1.4: the TypeScript client and server (in process)", () => {
  it("plays self-play tic-tac-toe", () => tsTtt(selfPlay));
  it("plays agent against agent across two sessions", () => tsTtt(twoSessions));
  it("names the description by digest", () => tsTtt((url) => digests(url, PROTOCOL_VERSION)));
  it("reports no workers for a server of one process", () => tsTtt(async (url) => {
    // Worlds are not resumable: a resume token is refused, never taken for a new world.
    await assert.rejects(connect(url, { resumeToken: "no-such-session" }), EnvError);
    const env = await connect(url);
    try {
      const report = await env.getLoadReport();
      assert.equal(report.workers.length, 0);
      assert.equal(report.load.sessionsOpen, 1);
    } finally {
      await env.close();
    }
  }));
  it("steps a simultaneous world once both sessions acted", () => withServer(rps, {}, async (server) => {
    const a = await EnvClient.connect<number, JsonObject>(server.address, { agentIds: ["p0"] });
    const b = await EnvClient.connect<number, JsonObject>(server.address, { joinToken: a.world!.joinToken });
    try {
      assert.equal(a.multiAgent?.mode, TurnMode.SIMULTANEOUS);
      const started = b.reset();
      await a.reset({ seed: 1 });
      assert.deepEqual((await started).toAct, ["p0", "p1"]);
      await rejects(a.step(1, { stepTimeoutMs: 50 }), DeadlineExceeded, false); // withdrawn: nobody else acted
      const [ra, rb] = await Promise.all([a.stepAgents({ p0: 1 }), b.step(0)]); // paper beats rock
      assert.equal(ra.agents.p0!.reward, 1);
      assert.equal(rb.agents.p1!.reward, -1);
      assert.deepEqual(ra.agents.p0!.observation, { opponent: 0 });
      assert.ok(ra.terminated && rb.terminated);
      // Self-play sends the whole joint action at once.
      const solo = await EnvClient.connect<number, JsonObject>(server.address);
      try {
        await solo.reset();
        const r = await solo.stepAgents({ p0: 2, p1: 2 });
        assert.deepEqual([r.agents.p0!.reward, r.agents.p1!.reward], [0, 0]);
        await solo.reset();
        await rejects(solo.stepAgents({ p0: 2 }), InvalidArgument, false); // p1's part is missing
      } finally {
        await solo.close();
      }
    } finally {
      await b.close();
      await a.close();
    }
  }));
});

describe("protocol 1.4: the TypeScript client against the Python reference servers", () => {
  const skip = TTT ? false : unset("OPENENV_TICTACTOE_URL");
  it("plays self-play on openenv.games:TicTacToe", { skip }, () => selfPlay(TTT!));
  it("joins a Python world and plays agent against agent", { skip }, () => twoSessions(TTT!));
  // The Python reference server speaks protocol 1.6, as this binding.
  it("names the Python server's description by digest", { skip }, () => digests(TTT!, "1.6"));
  it("reads each worker's load of a server of two workers", { skip: WORKERS ? false : unset("OPENENV_WORKERS_URL") },
    async () => {
      const env = await connect(WORKERS!);
      try {
        const report = await env.getLoadReport();
        assert.deepEqual(report.workers.map((w) => w.index), [0, 1]);
        assert.ok(report.workers.every((w) => w.up && w.pid > 0));
        assert.equal(report.load.maxSessions, report.workers.reduce((n, w) => n + (w.load?.maxSessions ?? 0), 0));
        assert.equal((await env.getLoad()).sessionsOpen, report.load.sessionsOpen);
      } finally {
        await env.close();
      }
    });
});
