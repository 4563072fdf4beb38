/**
 * Run by protocol13.test.ts under `node --experimental-websocket`: the browser build
 * (src/browser.ts, the standard WebSocket API) at the URL given (and with the bearer token
 * given, offered as the subprotocol `bearer.<token>`): one gridworld episode, or one echo_env
 * tool call, and the server's load; prints a JSON report. Not a test file of its own.
 */

import { create } from "@bufbuild/protobuf";
import { WebClient } from "../src/browser.js";
import { ActionSchema, type Action, type Observation } from "../src/gen/gridworld/v1/gridworld_pb.js";
import { bestMove } from "./helpers.js";

const [url, token] = [process.argv[2]!, process.argv[3]];
const env = await WebClient.connect<Action, Observation>(url, { clientName: "browser-probe", token });
const report: Record<string, unknown> = { name: env.info.name };
if (env.info.name === "gridworld") {
  let ts = await env.reset({ seed: 9 });
  while (!ts.done) {
    ts = await env.step(create(ActionSchema, { move: bestMove(ts.observation!) }));
  }
  report.steps = ts.stepCount;
  report.terminated = ts.terminated;
} else {
  report.echoed = (await env.callTool("echo_message", { message: "from a browser" })).structuredContent;
}
const states = await Promise.all([env.state(), env.state(), env.state()]); // coalesced
report.states = states.length;
report.pipelined = env.sent.pipelined;
report.maxSessions = (await env.getLoad()).maxSessions;
process.stdout.write(JSON.stringify(report) + "\n");
await env.close();
