/**
 * Run by protocol13.test.ts under `node --experimental-websocket`: the browser build
 * (src/browser.ts, the standard WebSocket API) plays one gridworld episode at the URL given
 * and prints a JSON report. Not a test file of its own.
 */

import { create } from "@bufbuild/protobuf";
import { WebClient } from "../src/browser.js";
import { ActionSchema, Move, type Action, type Observation } from "../src/gen/gridworld/v1/gridworld_pb.js";
import { bestMove } from "./helpers.js";

const url = process.argv[2]!;
const env = await WebClient.connect<Action, Observation>(url, { clientName: "browser-probe" });
let ts = await env.reset({ seed: 9 });
while (!ts.done) {
  ts = await env.step(create(ActionSchema, { move: bestMove(ts.observation!) }));
}
const states = await Promise.all([env.state(), env.state(), env.state()]); // coalesced
const load = await env.getLoad();
process.stdout.write(JSON.stringify({
  name: env.info.name, steps: ts.stepCount, terminated: ts.terminated, maxSessions: load.maxSessions,
  pipelined: env.sent.pipelined, states: states.length,
}) + "\n");
await env.close();
void Move;
