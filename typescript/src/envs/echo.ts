/**
 * The echo environment, written in TypeScript: a tool environment with `echo_message`
 * and `echo_with_length`, like the Python reference `echo_env.server:EchoEnvironment`.
 *
 * Every step is a tool call (an `openenv.v1.CallToolRequest` action, observed as a
 * `CallToolResponse`); the reward of a step is `0.1 * message length`. The tools are also
 * reachable as side calls (list_tools / call_tool), which count no step.
 */

import type { JsonObject } from "@bufbuild/protobuf";
import { create } from "@bufbuild/protobuf";
import { jsonType } from "../codec.js";
import {
  callToolAction,
  callToolObservation,
  type EnvStep,
  type Environment,
  type EnvironmentDefinition,
} from "../environment.js";
import {
  CallToolRequestSchema,
  CallToolResponseSchema,
  type CallToolRequest,
  type CallToolResponse,
} from "../gen/openenv/v1/tool_pb.js";

const MESSAGE_ARGS: JsonObject = {
  type: "object",
  properties: { message: { type: "string", description: "the text to echo." } },
  required: ["message"],
  additionalProperties: false,
};

/** One echo instance (one per session): counts the messages it echoed. */
export class Echo implements Environment<CallToolRequest, CallToolResponse, JsonObject> {
  echoed = 0;

  reset(): EnvStep<CallToolResponse> {
    this.echoed = 0;
    return { observation: create(CallToolResponseSchema), metadata: { message: "Echo environment ready!" } };
  }

  finishToolStep(action: CallToolRequest, observation: CallToolResponse): EnvStep<CallToolResponse> {
    const message = action.arguments?.message;
    return { observation, reward: 0.1 * (typeof message === "string" ? [...message].length : 0) }; // code points, as Python's len
  }

  state(): JsonObject {
    return { echoed: this.echoed };
  }

  snapshot(): Uint8Array {
    return new TextEncoder().encode(JSON.stringify({ echoed: this.echoed }));
  }

  restore(data: Uint8Array): void {
    this.echoed = (JSON.parse(new TextDecoder().decode(data)) as { echoed: number }).echoed;
  }
}

/** The TypeScript echo environment, ready for `serve()`. */
export const echo: EnvironmentDefinition<CallToolRequest, CallToolResponse, JsonObject, Echo> = {
  name: "echo_env_ts",
  version: "0.1.0",
  description: "Echoes messages back through two tools; reward is 0.1 per character. Served from Node.js.",
  action: callToolAction,
  observation: callToolObservation,
  state: jsonType<JsonObject>({
    type: "object", properties: { echoed: { type: "integer", minimum: 0 } }, required: ["echoed"],
  }),
  create: () => new Echo(),
  deterministic: true,
  snapshots: true,
  rewardRange: [0, 1e6],
  maxSessions: 1024,
  exampleActions: [
    create(CallToolRequestSchema, { name: "echo_message", arguments: { message: "hello" } }),
    create(CallToolRequestSchema, { name: "echo_with_length", arguments: { message: "hey" } }),
  ],
  metadata: { author: "openenv", implementation: "typescript", documentation_url: "typescript/README.md" },
  tools: [
    {
      name: "echo_message",
      description: "Echo a message back unchanged.",
      inputSchema: MESSAGE_ARGS,
      outputSchema: { type: "object", properties: { result: { type: "string" } }, required: ["result"] },
      call: (env, args) => {
        env.echoed += 1;
        return args.message as string;
      },
    },
    {
      name: "echo_with_length",
      description: "Echo a message back together with its length.",
      inputSchema: MESSAGE_ARGS,
      outputSchema: {
        type: "object",
        properties: { message: { type: "string" }, length: { type: "integer" } },
        required: ["message", "length"],
      },
      call: (env, args) => {
        env.echoed += 1;
        const message = args.message as string;
        return { message, length: [...message].length };
      },
    },
  ],
};
