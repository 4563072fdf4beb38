#!/usr/bin/env node
/**
 * `openenv-ts`: serve a TypeScript environment, describe a server, or play episodes.
 *
 *   openenv-ts serve gridworld --port 0 --ready-file /tmp/addr     (or: serve echo [--tools-only], serve tictactoe)
 *   openenv-ts serve ./my-env.js --export myEnv      (an ES module exporting a definition)
 *   openenv-ts serve gridworld --host 0.0.0.0 --token-file tokens.txt   (RFC 0003, docs/security.md)
 *   openenv-ts serve gridworld --tls-cert server.pem --tls-key server.key [--tls-client-ca ca.pem]
 *       (TLS, mutual TLS with a client CA; also $OPENENV_TLS_CERT, $OPENENV_TLS_KEY, $OPENENV_TLS_CLIENT_CA)
 *   openenv-ts serve gridworld --resume-grace 60 --max-pipelined-requests 256   (RFC 0006, RFC 0009)
 *   openenv-ts info grpc://127.0.0.1:50051 [--json] [--token T]   (also grpcs:// with --ca-file F
 *       [--client-cert F --client-key F], and ws://HOST:PORT/v1/session)
 *   openenv-ts play grpc://127.0.0.1:50051 --episodes 3 --seed 7 --max-steps 50 [--token T]
 *   openenv-ts play grpc://127.0.0.1:50051 --agent x        (a multi-agent world, acting for x: the
 *       join token goes to stderr as `join: TOKEN@URL`)
 *   openenv-ts play --join TOKEN@grpc://127.0.0.1:50051     (join that world for the free agents)
 *
 * `serve` accepts the bearer tokens of `--token` (repeatable), `--token-file` (one per
 * line) and `$OPENENV_TOKEN` (comma-separated); `info` and `play` send `--token`, else
 * `$OPENENV_TOKEN`.
 *
 * `play` drives any environment with the example actions it advertises (cycled in a
 * seeded order) and prints one JSON line per episode; it is a smoke test of the client. In a
 * multi-agent world (RFC 0012) it acts for its agents only (`--agent`, repeatable; or `--join` a
 * world with the ticket `TOKEN@URL` another `play` printed), waits for their turns with
 * `observe`, and plays random legal moves (a view's `action_mask` or `legal_actions`, else the
 * examples); each episode's line carries its agents' returns. Other sessions joining or leaving
 * the world (RFC 0016 seat events) are reported on stderr as `seat: joined o`,
 * `seat: left o (rejoin within 60 s)`, `seat: expired o`.
 */

import { renameSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import { toJson } from "@bufbuild/protobuf";
import { EnvClient, type ClientOptions } from "./client.js";
import { InvalidArgument } from "./errors.js";
import type { EnvironmentDefinition } from "./environment.js";
import { echo } from "./envs/echo.js";
import { gridworld, SplitMix64 } from "./envs/gridworld.js";
import { tictactoe } from "./envs/tictactoe.js";
import { EnvironmentInfoSchema } from "./gen/openenv/v1/environment_pb.js";
import { TokenSet } from "./auth.js";
import { serve } from "./server.js";

const BUILTIN: Record<string, EnvironmentDefinition<never, never, never>> = {
  gridworld: gridworld as unknown as EnvironmentDefinition<never, never, never>,
  echo: echo as unknown as EnvironmentDefinition<never, never, never>,
  tictactoe: tictactoe as unknown as EnvironmentDefinition<never, never, never>,
};

async function load(target: string, exportName: string): Promise<EnvironmentDefinition<never, never, never>> {
  const builtin = BUILTIN[target];
  if (builtin !== undefined) {
    return builtin;
  }
  const mod = (await import(pathToFileURL(resolve(target)).href)) as Record<string, unknown>;
  const def = mod[exportName];
  if (def === undefined || typeof def !== "object") {
    throw new Error(`${target} has no export '${exportName}' (an EnvironmentDefinition)`);
  }
  return def as EnvironmentDefinition<never, never, never>;
}

async function serveCommand(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args, allowPositionals: true,
    options: {
      host: { type: "string", default: process.env.OPENENV_HOST ?? "127.0.0.1" },
      port: { type: "string", default: process.env.OPENENV_GRPC_PORT ?? "50051" },
      "ready-file": { type: "string" },
      "max-sessions": { type: "string" },
      "max-num-envs": { type: "string" },
      "idle-timeout": { type: "string", default: "300" },
      "max-message-mb": { type: "string", default: "4" },
      grace: { type: "string", default: "10" },
      export: { type: "string", default: "default" },
      "tools-only": { type: "boolean", default: false },
      token: { type: "string", multiple: true, default: [] },
      "token-file": { type: "string" },
      "allow-anonymous": { type: "boolean", default: ["1", "true", "yes"].includes(process.env.OPENENV_ALLOW_ANONYMOUS ?? "") },
      "handshake-timeout": { type: "string", default: "10" },
      "resume-grace": { type: "string", default: "60" },
      "max-pipelined-requests": { type: "string", default: "256" },
      "tls-cert": { type: "string", default: process.env.OPENENV_TLS_CERT },
      "tls-key": { type: "string", default: process.env.OPENENV_TLS_KEY },
      "tls-client-ca": { type: "string", default: process.env.OPENENV_TLS_CLIENT_CA },
    },
  });
  const target = positionals[0];
  if (target === undefined) {
    throw new Error("usage: openenv-ts serve TARGET (gridworld, echo, or a path to an ES module)");
  }
  const tokens = TokenSet.load(values.token, values["token-file"]);
  const handshakeTimeout = Number(values["handshake-timeout"]);
  if (!(handshakeTimeout >= 0 && Number.isFinite(handshakeTimeout))) {
    throw new Error(`--handshake-timeout takes seconds >= 0 (0 disables), got ${values["handshake-timeout"]}`);
  }
  const resumeGrace = Number(values["resume-grace"]);
  if (!(resumeGrace >= 0 && Number.isFinite(resumeGrace))) {
    throw new Error(`--resume-grace takes seconds >= 0 (0 disables), got ${values["resume-grace"]}`);
  }
  const maxPipelined = Number(values["max-pipelined-requests"]);
  if (!(Number.isInteger(maxPipelined) && maxPipelined >= 0)) {
    throw new Error(`--max-pipelined-requests takes an integer >= 0 (0 disables), got ${values["max-pipelined-requests"]}`);
  }
  const [certFile, keyFile, clientCaFile] = [values["tls-cert"], values["tls-key"], values["tls-client-ca"]];
  if ((certFile === undefined) !== (keyFile === undefined) || (clientCaFile !== undefined && certFile === undefined)) {
    throw new Error("TLS needs --tls-cert and --tls-key together (and --tls-client-ca only with them)");
  }
  const tls = certFile === undefined ? undefined : { certFile, keyFile, clientCaFile };
  const def = await load(target, values.export!);
  const readyFile = values["ready-file"];
  await serve(def, {
    host: values.host, port: Number(values.port),
    maxSessions: values["max-sessions"] === undefined ? undefined : Number(values["max-sessions"]),
    maxNumEnvs: values["max-num-envs"] === undefined ? undefined : Number(values["max-num-envs"]),
    idleTimeoutMs: Number(values["idle-timeout"]) * 1000,
    maxMessageBytes: Math.floor(Number(values["max-message-mb"]) * 1024 * 1024),
    graceMs: Number(values.grace) * 1000,
    toolsOnly: values["tools-only"],
    tokens,
    allowAnonymous: values["allow-anonymous"],
    handshakeTimeoutMs: handshakeTimeout * 1000,
    resumeGraceMs: resumeGrace * 1000,
    maxPipelinedRequests: maxPipelined,
    tls,
    ready: (server) => {
      const auth = (tokens.size > 0 ? ` (bearer token required, ${tokens.size} accepted)` : "") +
        (tls?.clientCaFile !== undefined ? " (mutual TLS)" : "");
      process.stderr.write(`serving ${def.name} on ${server.address}${auth}\n`);
      if (readyFile !== undefined) {
        writeFileSync(readyFile + ".tmp", server.address);
        renameSync(readyFile + ".tmp", readyFile);
      }
    },
  });
}

/** The client's TLS flags (grpcs://, wss://): the CA to trust, a client certificate for mutual TLS. */
const TLS_FLAGS = {
  "ca-file": { type: "string" },
  "client-cert": { type: "string" },
  "client-key": { type: "string" },
} as const;

function tlsOptions(values: { "ca-file"?: string; "client-cert"?: string; "client-key"?: string }): ClientOptions {
  return { caFile: values["ca-file"], clientCertFile: values["client-cert"], clientKeyFile: values["client-key"] };
}

async function infoCommand(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args, allowPositionals: true, options: { json: { type: "boolean" }, token: { type: "string" }, ...TLS_FLAGS },
  });
  const env = await EnvClient.connect(positionals[0] ?? "", {
    clientName: "openenv-ts info", token: values.token, ...tlsOptions(values),
  });
  try {
    // The advertised descriptors resolve the `google.protobuf.Any` examples of typed environments.
    const info = toJson(EnvironmentInfoSchema, env.info, { useProtoFieldName: true, registry: env.registry }) as Record<
      string,
      unknown
    >;
    if (values.json) {
      process.stdout.write(JSON.stringify(info, null, 2) + "\n");
    } else {
      process.stdout.write(`${env.info.name} ${env.info.version} (protocol ${env.info.protocolVersion})\n`);
      process.stdout.write(`  capabilities ${JSON.stringify(info.capabilities)}\n`);
    }
  } finally {
    await env.close();
  }
}

async function playCommand(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args, allowPositionals: true,
    options: {
      episodes: { type: "string", default: "1" },
      seed: { type: "string", default: "0" },
      "max-steps": { type: "string", default: "50" },
      token: { type: "string" },
      agent: { type: "string", multiple: true },
      join: { type: "string" },
      ...TLS_FLAGS,
    },
  });
  let url = positionals[0] ?? "";
  let joinToken: string | undefined;
  if (values.join !== undefined) {  // a ticket: TOKEN@URL (FleetClient.ticket, `openenv play --join`)
    const at = values.join.indexOf("@");
    if (at <= 0) throw new Error(`--join takes TOKEN@URL, got ${JSON.stringify(values.join)}`);
    joinToken = values.join.slice(0, at);
    url = values.join.slice(at + 1);
  }
  const agentIds = values.agent ?? [];
  const env = await EnvClient.connect(url, {
    clientName: "openenv-ts play", token: values.token, ...tlsOptions(values),
    ...(agentIds.length > 0 ? { agentIds } : {}), ...(joinToken !== undefined ? { joinToken } : {}),
  });
  try {
    if (env.multiAgent !== undefined && (agentIds.length > 0 || joinToken !== undefined)) {
      await playWorld(env, url, values);
      return;
    }
    const examples = env.info.action?.examples ?? [];
    if (examples.length === 0) {
      throw new Error(`${env.info.name} advertises no example actions to play with`);
    }
    const rng = new SplitMix64(BigInt(values.seed!));
    for (let e = 0; e < Number(values.episodes); e++) {
      let ts = await env.reset({ seed: BigInt(values.seed!) + BigInt(e) });
      let ret = 0;
      while (!ts.done && ts.stepCount < Number(values["max-steps"])) {
        ts = await env.step(rng.choice(examples));
        ret += ts.reward ?? 0;
      }
      process.stdout.write(JSON.stringify({
        env: env.info.name, episode_id: ts.episodeId, steps: ts.stepCount, return: Math.round(ret * 1e6) / 1e6,
        terminated: ts.terminated, truncated: ts.truncated,
      }) + "\n");
    }
  } finally {
    await env.close();
  }
}

/** The legal moves a world's view lists: its `action_mask` (indices) or `legal_actions`. */
function legalMoves(view: unknown): unknown[] | undefined {
  if (view === null || typeof view !== "object" || Array.isArray(view)) return undefined;
  const v = view as Record<string, unknown>;
  if (Array.isArray(v.legal_actions)) return v.legal_actions;
  if (Array.isArray(v.action_mask)) {
    return v.action_mask.flatMap((m, i) => (m ? [i] : []));
  }
  return undefined;
}

/** `play` in a multi-agent world: act for this session's agents, wait for their turns. */
async function playWorld(
  env: EnvClient, url: string, values: { episodes?: string; seed?: string; "max-steps"?: string },
): Promise<void> {
  const mine = [...(env.world?.agentIds ?? [])];
  if (env.world?.owner && env.world.joinToken !== "") {
    process.stderr.write(`join: ${env.world.joinToken}@${url}\n`);
  }
  const examples = env.info.action?.examples ?? [];
  const rng = new SplitMix64(BigInt(values.seed!));
  for (let e = 0; e < Number(values.episodes); e++) {
    let ts = await env.reset({ seed: BigInt(values.seed!) + BigInt(e) });
    const returns: Record<string, number> = Object.fromEntries(mine.map((a) => [a, 0]));
    const add = (r: typeof ts) => {
      for (const [a, part] of Object.entries(r.agents)) returns[a] = (returns[a] ?? 0) + (part.reward ?? 0);
      for (const ev of r.seatEvents) {
        const within = ev.rejoinWithinMs === undefined ? "" : ` (rejoin within ${Math.round(ev.rejoinWithinMs / 1000)} s)`;
        process.stderr.write(`seat: ${ev.kind} ${ev.agentIds.join(" ")}${within}\n`);
      }
    };
    add(ts);
    while (!ts.done && ts.stepCount < Number(values["max-steps"])) {
      const agent = ts.toAct.find((a) => mine.includes(a));
      if (agent === undefined) {
        ts = await env.observe({ wait: true, seatEvents: true }); // also woken when a seat empties or fills
        add(ts);
        continue;
      }
      const legal = legalMoves(ts.agents[agent]?.observation);
      const options: unknown[] = [...(legal ?? examples)];
      let next: typeof ts | undefined;
      while (options.length > 0 && next === undefined) {
        const move = options.splice(Number(rng.below(options.length)), 1)[0];
        try {
          next = await env.step(move as never, { agentId: agent });
        } catch (err) {
          if (!(err instanceof InvalidArgument)) throw err;  // an illegal move: nothing changed, try another
        }
      }
      if (next === undefined) throw new Error(`no legal move for ${agent}`);
      ts = next;
      add(ts);
    }
    process.stdout.write(JSON.stringify({
      env: env.info.name, episode_id: ts.episodeId, steps: ts.stepCount, agents: mine,
      returns: Object.fromEntries(Object.entries(returns).map(([a, r]) => [a, Math.round(r * 1e6) / 1e6])),
      terminated: ts.terminated, truncated: ts.truncated,
    }) + "\n");
  }
}

const COMMANDS: Record<string, (args: string[]) => Promise<void>> = {
  serve: serveCommand, info: infoCommand, play: playCommand,
};

const [command, ...rest] = process.argv.slice(2);
const run = COMMANDS[command ?? ""];
if (run === undefined) {
  process.stderr.write("usage: openenv-ts {serve|info|play} ...\n");
  process.exit(2);
}
run(rest).catch((e: unknown) => {
  process.stderr.write(`openenv-ts ${command}: ${e instanceof Error ? e.toString() : String(e)}\n`);
  process.exit(1);
});
