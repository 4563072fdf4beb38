/**
 * Multi-agent worlds (RFC 0012, docs/multiagent.md), server side: the authoring API
 * ({@link MultiAgentEnvironment}, {@link multiAgent}) and the runtime of worlds and seats,
 * mirroring the Python reference (openenv.runtime.world).
 *
 * A {@link World} holds one environment instance (through an ordinary {@link Session}: one
 * capacity slot, reaped and drained like any other) and the world's episode: who is to act,
 * which agents are done, the rewards each agent has not been told yet, the actions of a
 * simultaneous step being gathered. A {@link Seat} is one stream's part of a world: the
 * agents it acts for. The owner's seat creates the world (a handshake without a join token);
 * others join with its join token ({@link Worlds}, one registry per server). The world
 * closes when its last seat leaves.
 *
 * Every call into the environment goes through the world's queue, whichever seat makes it,
 * so calls never overlap. Waiting (for one's turn, for the other agents of a simultaneous
 * step, for the owner's next episode) happens outside the queue, woken by every change.
 *
 * Worlds that behave (RFC 0016, protocol 1.6), as the Python runtime: every wait on other seats
 * may carry a deadline (`SessionRequest.wait_timeout`: `DEADLINE_EXCEEDED`, nothing changed, a
 * simultaneous step's actions withdrawn); a seat that joins or leaves is announced to every other
 * seat in its next time step (`TimeStep.seat_events`), and `observe` with `wait` and
 * `seat_events` answers for one; a simultaneous step waiting on an agent whose seat leaves ends
 * `ABORTED`. A definition declaring `rejoinTimeoutMs` holds a seat left empty in a running
 * episode that long, then applies its `vacancy` rule (truncate, or the environment's `forfeit`).
 */

import { randomBytes, randomUUID } from "node:crypto";
import { create, type JsonObject, type MessageInitShape } from "@bufbuild/protobuf";
import type { DurationSchema } from "@bufbuild/protobuf/wkt";
import type { PayloadCodec } from "./codec.js";
import type { EnvironmentDefinition, Environment, ResetArgs } from "./environment.js";
import {
  Aborted,
  DeadlineExceeded,
  EnvError,
  FailedPrecondition,
  Internal,
  InvalidArgument,
  NotFound,
  PermissionDenied,
} from "./errors.js";
import { EpisodeStatus, TimeStepSchema, type TimeStep } from "./gen/openenv/v1/environment_pb.js";
import {
  AgentTimeStepSchema,
  IllegalActionPolicy,
  MultiAgentSpecSchema,
  SeatEventKind,
  TurnMode,
  VacancyPolicy,
  WorldInfoSchema,
  type MultiAgentSpec,
  type WorldInfo,
} from "./gen/openenv/v1/multiagent_pb.js";
import type { RubricScore } from "./gen/openenv/v1/rubric_pb.js";
import type { Session, SessionManager, StateOutcome } from "./session.js";

type MaybePromise<T> = T | Promise<T>;

/** What a world's `reset` or `step` returns (undefined: no rewards, nobody done). */
export interface WorldStep {
  /** Agent id -> reward of this world step (left out: none, which is not 0). */
  rewards?: Record<string, number>;
  /** Every agent (a boolean) or agent id -> flag; a done agent stays done. */
  terminated?: boolean | Record<string, boolean>;
  truncated?: boolean | Record<string, boolean>;
  /** The world's metadata, sent to every session. */
  metadata?: JsonObject;
  /** Agent id -> metadata seen only by the session acting for that agent. */
  infos?: Record<string, JsonObject>;
  /** Agent id -> its reward's breakdown by the environment's rubric. */
  rewardBreakdowns?: Record<string, RubricScore>;
}

/** One world: the instance every seat of it shares (one per world). Calls never overlap. */
export interface MultiAgentEnvironment<A, O, S = undefined> {
  /** Start an episode (the owner's reset). */
  reset(args: ResetArgs): MaybePromise<WorldStep | undefined | void>;
  /** Who acts now, in the environment's order: at most one (turn-based); never a done agent. */
  toAct(): MaybePromise<readonly string[]>;
  /** What `agent` may see now, of the declared observation type; nothing more. */
  observe(agent: string): MaybePromise<O>;
  /** A world step: agent id -> decoded, validated action, for the agent(s) `toAct` named. */
  step(actions: Record<string, A>): MaybePromise<WorldStep | undefined | void>;
  /** The whole world's state; sent only to a session acting for every agent. */
  state?(): MaybePromise<S | undefined>;
  /** Release resources; called exactly once, when the world's last session leaves. */
  close?(): MaybePromise<void>;
  /**
   * RFC 0016, `vacancy: "forfeit"`: `absent` agents' rejoin deadline passed with nobody acting for
   * them; return the episode's outcome (its rewards are added to the episode's). The runtime then
   * truncates every agent not done; throwing truncates without rewards. Not defined: each absent
   * agent -1 and everyone terminated, the present sharing +1 per absent (zero-sum stays zero-sum).
   */
  forfeit?(absent: string[]): MaybePromise<WorldStep | undefined | void>;
}

/** What a multi-agent environment declares (RFC 0012): `serve(multiAgent(def))`. */
export interface MultiAgentDefinition<A, O, S = undefined> extends Omit<EnvironmentDefinition<A, O, S>,
  "create" | "tools" | "snapshots" | "taskSplits" | "listTasks" | "autoReset" | "rubric" | "multiAgent"> {
  /** Agent ids in order, or id -> role. */
  agents: readonly string[] | Record<string, string>;
  /** Agent id -> one line (AgentSpec.description). */
  agentDescriptions?: Record<string, string>;
  /** False (default): turn-based; true: every agent to act acts in the same world step. */
  simultaneous?: boolean;
  /** Every episode's per-agent returns sum to this (0: zero-sum); certified. */
  rewardSum?: number;
  /** What an illegal action does (default "reject": throw InvalidAction). */
  illegalActions?: "reject" | "penalize";
  /** Other sessions may join a world (default true). */
  joinable?: boolean;
  /** Agents' views differ (cards, private goals); certified. */
  hiddenInformation?: boolean;
  /**
   * RFC 0016: how long (ms) a seat left empty in a running episode (its session closed or
   * disconnected, some of its agents not done) is held for a session to join for its agents;
   * then `vacancy` ends the episode. Undefined (default): held as long as the world lives (1.4).
   */
  rejoinTimeoutMs?: number;
  /** What ends the episode when `rejoinTimeoutMs` passes: "truncate" (default) or "forfeit" (the environment's `forfeit`). */
  vacancy?: "truncate" | "forfeit";
  /**
   * RFC 0016, optional: agent id -> that agent's own action type, when agents act differently
   * (PettingZoo's per-agent spaces), narrower than or equal to `action`. Every action is decoded
   * with `action` first, then validated against its agent's own (`INVALID_ARGUMENT` otherwise,
   * nothing changed). Advertised as `AgentSpec.action`.
   */
  agentActions?: Record<string, PayloadCodec<A>>;
  /** RFC 0016, optional: agent id -> that agent's own view type (narrower than or equal to `observation`); `AgentSpec.observation`. */
  agentObservations?: Record<string, PayloadCodec<O>>;
  /** One world's instance, from the creating handshake's options. */
  create(options: JsonObject): MaybePromise<MultiAgentEnvironment<A, O, S>>;
}

/** The declarations of a multi-agent definition, as the runtime keeps them. */
export interface MultiAgentDeclaration {
  agents: string[];
  spec: MultiAgentSpec;
  simultaneous: boolean;
  joinable: boolean;
  /** RFC 0016: how long an empty seat is held in a running episode (undefined: as long as the world lives). */
  rejoinTimeoutMs?: number;
  vacancy: "truncate" | "forfeit";
  /** RFC 0016: each agent's own action and view types (only the agents that have one). */
  agentActions: Record<string, PayloadCodec<unknown>>;
  agentObservations: Record<string, PayloadCodec<unknown>>;
}

/** The definition `serve()` takes for a multi-agent environment. */
export function multiAgent<A, O, S = undefined>(def: MultiAgentDefinition<A, O, S>): EnvironmentDefinition<A, O, S> {
  const roles: Record<string, string> = Array.isArray(def.agents)
    ? Object.fromEntries((def.agents as readonly string[]).map((a) => [a, ""]))
    : { ...(def.agents as Record<string, string>) };
  const agents = Object.keys(roles);
  if (agents.length === 0) {
    throw new Error(`${def.name}: a multi-agent environment declares at least one agent`);
  }
  if (new Set(agents).size !== agents.length || agents.some((a) => a === "")) {
    throw new Error(`${def.name}: agent ids must be unique and not empty`);
  }
  for (const [what, table] of [["agentActions", def.agentActions], ["agentObservations", def.agentObservations]] as const) {
    const stray = Object.keys(table ?? {}).filter((a) => !agents.includes(a));
    if (stray.length > 0) {
      throw new Error(`${def.name}: ${what} names agents it does not declare: ${JSON.stringify(stray)}`);
    }
  }
  const spec = create(MultiAgentSpecSchema, {
    agents: agents.map((id) => ({
      id,
      role: roles[id] ?? "",
      description: def.agentDescriptions?.[id] ?? "",
      action: def.agentActions?.[id]?.spec(),
      observation: def.agentObservations?.[id]?.spec(),
    })),
    mode: def.simultaneous ? TurnMode.SIMULTANEOUS : TurnMode.TURN_BASED,
    rewardSum: def.rewardSum,
    illegalActions: def.illegalActions === "penalize" ? IllegalActionPolicy.PENALIZE : IllegalActionPolicy.REJECT,
    joinable: def.joinable ?? true,
    hiddenInformation: def.hiddenInformation ?? false,
    rejoinTimeout: def.rejoinTimeoutMs === undefined ? undefined : durationOf(def.rejoinTimeoutMs),
    vacancy: def.vacancy === "forfeit" ? VacancyPolicy.FORFEIT : VacancyPolicy.TRUNCATE,
  });
  if (def.rejoinTimeoutMs !== undefined && !(def.rejoinTimeoutMs >= 0)) {
    throw new Error(`${def.name}: rejoinTimeoutMs must be a duration >= 0 (ms)`);
  }
  const { create: make, rejoinTimeoutMs, vacancy, agentActions, agentObservations, ...rest } = def;
  return {
    ...rest,
    // The world's instance travels in a Session; only the world calls it (never Session.reset/step).
    create: async (options) => (await make(options)) as unknown as Environment<A, O, S>,
    multiAgent: {
      agents, spec, simultaneous: def.simultaneous ?? false, joinable: def.joinable ?? true,
      rejoinTimeoutMs, vacancy: vacancy ?? "truncate",
      agentActions: { ...(agentActions ?? {}) } as Record<string, PayloadCodec<unknown>>,
      agentObservations: { ...(agentObservations ?? {}) } as Record<string, PayloadCodec<unknown>>,
    },
  };
}

function durationOf(ms: number): MessageInitShape<typeof DurationSchema> {
  const whole = Math.floor(ms / 1000);
  return { seconds: BigInt(whole), nanos: Math.round((ms - whole * 1000) * 1e6) };
}

/** The outcome of a forfeit when the environment defines no `forfeit` (as the Python runtime's
 *  default): each absent agent -1 and every agent terminated; the agents present share +1 per
 *  absent agent, so a zero-sum game stays zero-sum. */
function defaultForfeit(agents: readonly string[], absent: readonly string[]): WorldStep {
  const present = agents.filter((a) => !absent.includes(a));
  const rewards: Record<string, number> = Object.fromEntries(absent.map((a) => [a, -1]));
  present.forEach((a) => { rewards[a] = absent.length / present.length; });
  return { rewards, terminated: true };
}

/** The earliest of two optional bounds (ms). */
export function earliest(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

/** A seat event not yet delivered: its kind, the seat's agents, the rejoin deadline (Date.now() ms) or undefined. */
interface PendingEvent {
  kind: SeatEventKind;
  agents: string[];
  deadline: number | undefined;
}

function flags(value: boolean | Record<string, boolean> | undefined, agents: readonly string[]): Record<string, boolean> {
  if (value === undefined) {
    return {};
  }
  if (typeof value === "boolean") {
    return Object.fromEntries(agents.map((a) => [a, value]));
  }
  return { ...value };
}

function uuidHex(): string {
  return randomUUID().replaceAll("-", "");
}

/** One multi-agent environment instance and its episode, shared by the seats in it. */
export class World<A, O, S> {
  readonly id: string;
  readonly joinToken: string;
  readonly agents: readonly string[];
  readonly seats: Seat<A, O, S>[] = [];
  readonly controller = new Map<string, Seat<A, O, S>>();
  /** +1 on every reset, world step and refused joint step. */
  version = 0;
  toAct: string[] = [];
  terminated: Record<string, boolean> = {};
  truncated: Record<string, boolean> = {};
  /** Rewards not yet told to the agent's session. */
  pendingRewards = new Map<string, number>();
  breakdowns = new Map<string, RubricScore>();
  infos = new Map<string, JsonObject>();
  metadata: JsonObject = {};
  lastActor: string | undefined;
  /** Simultaneous: the actions of the current world step so far. */
  gathered = new Map<string, A>();
  /** A joint step the environment refused: the version it was refused at, and the error. */
  stepError: [number, EnvError] | undefined;
  closed = false;
  /** RFC 0016: agents whose seat was left empty in a running episode -> their rejoin deadline (Date.now() ms). */
  readonly vacant = new Map<string, number>();
  private readonly expiries = new Set<NodeJS.Timeout>();
  private queue: Promise<unknown> = Promise.resolve();
  private wakers = new Set<() => void>();

  constructor(readonly worlds: Worlds<A, O, S>, readonly session: Session<A, O, S>) {
    const decl = session.runtime.def.multiAgent!;
    this.agents = decl.agents;
    this.id = session.id;
    this.joinToken = decl.joinable ? randomBytes(24).toString("base64url") : "";
    session.setTerminate((err) => {
      for (const seat of [...this.seats]) {
        const e = new (err.constructor as new (m: string) => EnvError)(err.message);
        e.fatal = true;
        seat.terminate?.(e);
      }
    });
  }

  get env(): MultiAgentEnvironment<A, O, S> {
    return this.session.env as unknown as MultiAgentEnvironment<A, O, S>;
  }

  get status(): EpisodeStatus {
    return this.session.status;
  }

  get simultaneous(): boolean {
    return this.session.runtime.def.multiAgent!.simultaneous;
  }

  /** Run `fn` when no other world call runs (the world's lock). */
  exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Wake every waiter (a change of the world, a join, a leave). */
  notify(): void {
    const wake = [...this.wakers];
    this.wakers.clear();
    wake.forEach((w) => w());
  }

  bump(): void {
    this.version += 1;
    this.notify();
  }

  /** Wait until `ready()` (outside the lock); false when `timeoutMs` passed first. */
  async until(ready: () => boolean, timeoutMs?: number): Promise<boolean> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + Math.max(timeoutMs, 0);
    while (!ready()) {
      const left = deadline === undefined ? undefined : deadline - Date.now();
      if (left !== undefined && left <= 0) {
        return false;
      }
      await new Promise<void>((resolve) => {
        let timer: NodeJS.Timeout | undefined;
        const wake = (): void => {
          clearTimeout(timer);
          this.wakers.delete(wake);
          resolve();
        };
        this.wakers.add(wake);
        if (left !== undefined) {
          timer = setTimeout(wake, left);
        }
      });
    }
    return true;
  }

  /** One call into the environment, as a session request (errors mapped, activity tracked). */
  call<T>(fn: () => MaybePromise<T>, what: string, timeoutMs?: number): Promise<T> {
    const s = this.session;
    return s.guard(() => s.call(fn, timeoutMs, what));
  }

  async whoActs(): Promise<string[]> {
    if (this.status !== EpisodeStatus.RUNNING) {
      return [];
    }
    const acting = (await this.call(() => this.env.toAct(), "toAct")).map(String);
    const unknown = acting.filter((a) => !this.agents.includes(a));
    if (unknown.length > 0) {
      throw new Internal(`toAct named unknown agents ${JSON.stringify(unknown)}`);
    }
    return acting;
  }

  /** Fold what reset or step returned into the world's per-agent state. */
  apply(out: WorldStep | undefined | void): void {
    const o: WorldStep = out ?? {};
    if (typeof o !== "object") {
      throw new Internal("reset and step return undefined or a WorldStep");
    }
    for (const [agent, r] of Object.entries(o.rewards ?? {})) {
      if (!this.agents.includes(agent)) {
        throw new Internal(`a reward for unknown agent ${JSON.stringify(agent)}`);
      }
      if (r === undefined || r === null) {
        continue;
      }
      if (typeof r !== "number") {
        throw new Internal(`the reward of ${agent} must be a number, got ${typeof r}`);
      }
      this.pendingRewards.set(agent, (this.pendingRewards.get(agent) ?? 0) + r);
    }
    for (const [target, given] of [[this.terminated, o.terminated], [this.truncated, o.truncated]] as const) {
      for (const [agent, flag] of Object.entries(flags(given, this.agents))) {
        if (!this.agents.includes(agent)) {
          throw new Internal(`an end flag for unknown agent ${JSON.stringify(agent)}`);
        }
        if (flag) {
          target[agent] = true;
        }
      }
    }
    for (const [agent, info] of Object.entries(o.infos ?? {})) {
      this.infos.set(agent, { ...info });
    }
    for (const [agent, bd] of Object.entries(o.rewardBreakdowns ?? {})) {
      this.breakdowns.set(agent, bd);
    }
    this.metadata = { ...(o.metadata ?? {}) };
  }

  done(agent: string): boolean {
    return (this.terminated[agent] ?? false) || (this.truncated[agent] ?? false);
  }

  settle(): void {
    const limit = this.session.runtime.def.maxEpisodeSteps;
    if (limit !== undefined && this.session.stepCount >= limit) {
      for (const a of this.agents) {
        if (!this.done(a)) {
          this.truncated[a] = true;
        }
      }
    }
    if (this.agents.every((a) => this.done(a))) {
      this.session.status = this.agents.every((a) => this.terminated[a] ?? false)
        ? EpisodeStatus.TERMINATED : EpisodeStatus.TRUNCATED;
    }
  }

  /** A new seat acting for `agentIds` (empty: every agent nobody acts for). */
  seat(agentIds: readonly string[], joining: boolean): Seat<A, O, S> {
    if (this.closed) {
      throw new NotFound("the world is closed", { fatal: true });
    }
    const unknown = agentIds.filter((a) => !this.agents.includes(a));
    if (unknown.length > 0) {
      throw new InvalidArgument(`unknown agents ${JSON.stringify(unknown)}: this world's agents are ` +
        JSON.stringify(this.agents), { fatal: true });
    }
    if (new Set(agentIds).size !== agentIds.length) {
      throw new InvalidArgument("agent ids must not repeat", { fatal: true });
    }
    const taken = agentIds.filter((a) => this.controller.has(a));
    if (taken.length > 0) {
      throw new FailedPrecondition(`another session acts for ${JSON.stringify(taken)}`, { fatal: true });
    }
    const chosen = agentIds.length > 0 ? agentIds : this.agents.filter((a) => !this.controller.has(a));
    if (chosen.length === 0) {
      throw new FailedPrecondition(
        `every agent of world ${this.id} has a session acting for it; none is left to join`, { fatal: true });
    }
    const seat = new Seat(this, this.agents.filter((a) => chosen.includes(a)));
    seat.agents.forEach((a) => {
      this.controller.set(a, seat);
      this.vacant.delete(a); // filled before its deadline: the rule no longer applies
    });
    this.seats.push(seat);
    if (joining) {
      this.announce(SeatEventKind.JOINED, seat.agents, undefined, seat);
      this.notify();
    }
    return seat;
  }

  /** Queue a seat event for every seat but `but` (delivered with its next time step). */
  announce(kind: SeatEventKind, agents: readonly string[], deadline: number | undefined, but?: Seat<A, O, S>): void {
    for (const other of this.seats) {
      if (other !== but) {
        other.events.push({ kind, agents: [...agents], deadline });
      }
    }
  }

  async leave(seat: Seat<A, O, S>): Promise<void> {
    const i = this.seats.indexOf(seat);
    if (i < 0) {
      return;
    }
    this.seats.splice(i, 1);
    for (const a of seat.agents) {
      if (this.controller.get(a) === seat) {
        this.controller.delete(a);
      }
      this.gathered.delete(a);
    }
    if (this.seats.length > 0) {
      let deadline: number | undefined;
      const decl = this.session.runtime.def.multiAgent!;
      const inPlay = seat.agents.filter((a) => !this.done(a));
      if (this.status === EpisodeStatus.RUNNING && inPlay.length > 0 && decl.rejoinTimeoutMs !== undefined) {
        const at = Date.now() + decl.rejoinTimeoutMs;
        deadline = at;
        inPlay.forEach((a) => this.vacant.set(a, at));
        const episode = this.session.episodeId;
        const timer = setTimeout(() => {
          this.expiries.delete(timer);
          void this.expire(inPlay, at, episode).catch(() => undefined);
        }, decl.rejoinTimeoutMs);
        timer.unref(); // a pending deadline never keeps the process alive
        this.expiries.add(timer);
      }
      this.announce(SeatEventKind.LEFT, seat.agents, deadline);
      this.notify();
      return;
    }
    this.notify();
    this.closed = true;
    this.expiries.forEach((t) => clearTimeout(t));
    this.expiries.clear();
    this.worlds.forget(this);
    await this.session.close();
  }

  /** At a rejoin deadline: if `agents` still have nobody acting for them in the same running
   *  episode, announce it and end the episode by the declared vacancy rule (RFC 0016). */
  private async expire(agents: readonly string[], deadline: number, episode: string): Promise<void> {
    await this.exclusive(async () => {
      const absent = agents.filter((a) => this.vacant.get(a) === deadline && !this.controller.has(a));
      if (this.closed || absent.length === 0 || this.session.episodeId !== episode || this.status !== EpisodeStatus.RUNNING) {
        return;
      }
      absent.forEach((a) => this.vacant.delete(a));
      this.announce(SeatEventKind.EXPIRED, absent, undefined);
      if (this.session.runtime.def.multiAgent!.vacancy === "forfeit") {
        const forfeit = this.env.forfeit;
        try {
          this.apply(forfeit !== undefined ? await this.call(() => forfeit.call(this.env, [...absent]), "forfeit")
            : defaultForfeit(this.agents, absent));
        } catch {
          // the rule still ends the episode: truncation, as if declared
        }
      }
      for (const a of this.agents) {
        if (!this.done(a)) {
          this.truncated[a] = true;
        }
      }
      this.gathered.clear();
      this.settle();
      this.toAct = [];
      this.bump();
    });
  }
}

/** One stream's part of a world: the agents it acts for (the server's session object for a
 *  multi-agent stream, as a VectorSession is for a vectorised one). */
export class Seat<A, O, S> {
  readonly id = uuidHex();
  seenVersion = -1;
  seenEpisode = "";
  closed = false;
  terminate: ((err: EnvError) => void) | undefined;
  /** RFC 0016: seat events not yet delivered to this seat, oldest first. */
  events: PendingEvent[] = [];

  constructor(readonly world: World<A, O, S>, readonly agents: readonly string[]) {}

  /** The seat whose reset starts the world's episodes (the first still in it). */
  get owner(): boolean {
    return this.world.seats[0] === this;
  }

  /** This seat acts for every agent (self-play): it may read the world's state. */
  get everyone(): boolean {
    return this.agents.length === this.world.agents.length;
  }

  setTerminate(callback: (err: EnvError) => void): void {
    this.terminate = callback;
  }

  /** What the handshake answers (HandshakeResponse.world). */
  info(): WorldInfo {
    return create(WorldInfoSchema, {
      worldId: this.world.id, joinToken: this.world.joinToken, agentIds: [...this.agents], owner: this.owner,
    });
  }

  /** Leave the world (its agents wait for another session); the last seat closes it. */
  async close(): Promise<void> {
    if (this.closed) {
      return;
    }
    this.closed = true;
    await this.world.leave(this);
  }

  /** This seat's time step now (under the world's lock): its agents' views, the rewards they
   *  have not been told yet (now told), their flags, and who is to act. */
  private async timeStep(): Promise<TimeStep> {
    const w = this.world;
    const codec: PayloadCodec<O> = w.session.runtime.observationCodec;
    const views = await w.call(async () => {
      const out: O[] = [];
      for (const a of this.agents) {
        out.push(await w.env.observe(a));
      }
      return out;
    }, "observe");
    const agents: Record<string, MessageInitShape<typeof AgentTimeStepSchema>> = {};
    const rewards = new Map<string, number | undefined>();
    this.agents.forEach((agent, k) => {
      const reward = w.pendingRewards.get(agent);
      w.pendingRewards.delete(agent);
      rewards.set(agent, reward);
      const info = w.infos.get(agent);
      w.infos.delete(agent);
      const bd = w.breakdowns.get(agent);
      w.breakdowns.delete(agent);
      agents[agent] = {
        observation: views[k] === undefined ? undefined : codec.encode(views[k]),
        reward,
        terminated: w.terminated[agent] ?? false,
        truncated: w.truncated[agent] ?? false,
        metadata: info !== undefined && Object.keys(info).length > 0 ? info : undefined,
        rewardBreakdown: bd,
      };
    });
    const mine = w.toAct.filter((a) => this.agents.includes(a));
    const summary = mine[0] ?? this.agents[0]!;
    const s = w.session;
    const ts = create(TimeStepSchema, {
      observation: agents[summary]?.observation,
      reward: w.lastActor !== undefined && this.agents.includes(w.lastActor) ? rewards.get(w.lastActor) : undefined,
      terminated: w.status === EpisodeStatus.TERMINATED,
      truncated: w.status === EpisodeStatus.TRUNCATED,
      metadata: Object.keys(w.metadata).length > 0 ? w.metadata : undefined,
      episodeId: s.episodeId,
      stepCount: BigInt(s.stepCount),
      agents,
      toAct: [...w.toAct],
      seatEvents: this.events.map((e) => ({
        kind: e.kind,
        agentIds: e.agents,
        rejoinWithin: e.deadline === undefined ? undefined : durationOf(Math.max(e.deadline - Date.now(), 0)),
      })),
    });
    this.events = [];
    this.seenVersion = w.version;
    this.seenEpisode = s.episodeId;
    return ts;
  }

  /** The owner's reset starts a new episode; another seat's waits for the first episode it
   *  has not seen (the owner's next reset, or the current one), at most `waitTimeoutMs`
   *  (RFC 0016: then `DEADLINE_EXCEEDED`, nothing changed). */
  async reset(seed: bigint | undefined, episodeId: string | undefined, options: JsonObject,
              waitTimeoutMs?: number): Promise<TimeStep> {
    const w = this.world;
    const deadline = waitTimeoutMs === undefined ? undefined : Date.now() + waitTimeoutMs;
    for (;;) {
      if (!this.owner) {
        const left = deadline === undefined ? undefined : deadline - Date.now();
        const started = await w.until(
          () => this.closed || this.owner || (w.session.episodeId !== "" && w.session.episodeId !== this.seenEpisode), left);
        if (!started) {
          throw new DeadlineExceeded(`the world's owner started no episode within the request's wait_timeout ` +
            `(${(waitTimeoutMs ?? 0) / 1000} s)`);
        }
      }
      const out = await w.exclusive(async () => {
        if (this.closed) {
          throw new FailedPrecondition("the session has left the world");
        }
        if (!this.owner) {
          if (w.session.episodeId === "" || w.session.episodeId === this.seenEpisode) {
            return undefined; // changed again while queued: wait once more
          }
          return await this.timeStep();
        }
        const s = w.session;
        const eid = episodeId || uuidHex();
        const got = await w.call(() => w.env.reset({ seed, episodeId: eid, options }), "reset");
        s.episodeId = eid;
        s.stepCount = 0;
        s.status = EpisodeStatus.RUNNING;
        w.terminated = {};
        w.truncated = {};
        w.pendingRewards.clear();
        w.breakdowns.clear();
        w.infos.clear();
        w.gathered.clear();
        w.lastActor = undefined;
        w.stepError = undefined;
        w.apply(got);
        w.settle();
        w.toAct = await w.whoActs();
        w.bump();
        return await this.timeStep();
      });
      if (out !== undefined) {
        return out;
      }
    }
  }

  private oneAgent(agentId: string): string {
    const w = this.world;
    if (agentId !== "") {
      if (!w.agents.includes(agentId)) {
        throw new InvalidArgument(`unknown agent ${JSON.stringify(agentId)}: this world's agents are ${JSON.stringify(w.agents)}`);
      }
      if (!this.agents.includes(agentId)) {
        throw new PermissionDenied(`this session does not act for ${JSON.stringify(agentId)} (it acts for ` +
          `${JSON.stringify(this.agents)})`);
      }
      return agentId;
    }
    const mine = w.toAct.filter((a) => this.agents.includes(a));
    if (mine.length === 1) {
      return mine[0]!;
    }
    if (mine.length === 0) {
      throw new FailedPrecondition(`none of this session's agents ${JSON.stringify(this.agents)} is to act ` +
        `(to act: ${JSON.stringify(w.toAct)}); observe with wait waits for its turn`);
    }
    throw new InvalidArgument(`several of this session's agents are to act (${JSON.stringify(mine)}): name one with agent_id`);
  }

  /** `action` validated against `agent`'s own action type, when it has one (RFC 0016);
   *  `INVALID_ARGUMENT` otherwise. */
  private narrowed(agent: string, action: A): A {
    const codec = this.world.session.runtime.def.multiAgent!.agentActions[agent] as PayloadCodec<A> | undefined;
    if (codec === undefined) {
      return action;
    }
    try {
      return codec.decode(codec.encode(action));
    } catch (e) {
      const why = e instanceof EnvError ? e.message : String(e);
      throw new InvalidArgument(`${JSON.stringify(agent)}'s action is not of its declared type: ${why}`);
    }
  }

  private requireRunning(): void {
    const s = this.world.session;
    if (s.status === EpisodeStatus.NOT_STARTED) {
      throw new FailedPrecondition("step before reset: call reset first");
    }
    if (s.status !== EpisodeStatus.RUNNING) {
      throw new FailedPrecondition(`the episode is over (${EpisodeStatus[s.status].toLowerCase()}): call reset first`);
    }
  }

  /** One action (turn-based, or one agent's part of a simultaneous step), or this seat's part
   *  of a joint action (`actions`). A simultaneous step waits for the other seats' actions at
   *  most `timeoutMs` and `waitTimeoutMs` (`DEADLINE_EXCEEDED`, this seat's actions withdrawn);
   *  a seat of an agent to act that leaves meanwhile ends the wait `ABORTED` (RFC 0016). */
  async step(action: A | undefined, agentId: string, actions: Map<string, A>, timeoutMs: number | undefined,
             waitTimeoutMs?: number): Promise<TimeStep> {
    const w = this.world;
    if (actions.size > 0 && action !== undefined) {
      throw new InvalidArgument("set either action or actions, not both");
    }
    let waitFor: { version: number; episode: string; given: string[]; seated: string[] } | undefined;
    const first = await w.exclusive(async () => {
      this.requireRunning();
      let given: Map<string, A>;
      if (actions.size > 0) {
        for (const a of actions.keys()) {
          if (!w.agents.includes(a)) {
            throw new InvalidArgument(`unknown agent ${JSON.stringify(a)}: this world's agents are ${JSON.stringify(w.agents)}`);
          }
          if (!this.agents.includes(a)) {
            throw new PermissionDenied(`this session does not act for ${JSON.stringify(a)} (it acts for ${JSON.stringify(this.agents)})`);
          }
        }
        given = new Map(actions);
      } else {
        if (action === undefined) {
          throw new InvalidArgument("a step needs an action (or actions)");
        }
        given = new Map([[this.oneAgent(agentId), action]]);
      }
      const notToAct = [...given.keys()].filter((a) => !w.toAct.includes(a));
      if (notToAct.length > 0) {
        throw new FailedPrecondition(`${JSON.stringify(notToAct[0])} is not to act now (to act: ${JSON.stringify(w.toAct)})`);
      }
      given = new Map([...given].map(([a, x]) => [a, this.narrowed(a, x)] as const));
      if (!w.simultaneous) {
        if (given.size !== 1) {
          throw new InvalidArgument("a turn-based world takes one action per step");
        }
        return await this.worldStep(given, timeoutMs);
      }
      const missing = w.toAct.filter((a) => this.agents.includes(a) && !given.has(a) && !w.gathered.has(a));
      if (missing.length > 0) {
        throw new InvalidArgument(`a simultaneous step needs an action for each of this session's agents to act: ` +
          `missing ${JSON.stringify(missing)}`);
      }
      const again = [...given.keys()].filter((a) => w.gathered.has(a));
      if (again.length > 0) {
        throw new FailedPrecondition(`${JSON.stringify(again)} already have an action for this world step`);
      }
      given.forEach((v, k) => w.gathered.set(k, v));
      if (w.toAct.every((a) => w.gathered.has(a))) {
        const joint = new Map(w.toAct.map((a) => [a, w.gathered.get(a)!] as const));
        w.gathered.clear();
        try {
          return await this.worldStep(joint, timeoutMs);
        } catch (e) {
          if (e instanceof EnvError) {
            w.stepError = [w.version, e]; // the others' parts are refused with it
            w.bump();
          }
          throw e;
        }
      }
      const seated = w.toAct.filter((a) => w.controller.has(a) && !this.agents.includes(a));
      waitFor = { version: w.version, episode: w.session.episodeId, given: [...given.keys()], seated };
      return undefined;
    });
    if (first !== undefined) {
      return first;
    }
    // Wait for the other sessions' agents; the world steps in the last one's request.
    const { version, episode, given, seated } = waitFor!;
    const gone = (): string[] => seated.filter((a) => !w.controller.has(a)); // agents to act whose seat left
    const bound = earliest(timeoutMs, waitTimeoutMs);
    const stepped = await w.until(() => w.version !== version || this.closed || gone().length > 0, bound);
    return await w.exclusive(async () => {
      if (!stepped && w.version === version) {
        given.forEach((a) => w.gathered.delete(a));
        throw new DeadlineExceeded(`the other agents did not act within ${(bound ?? 0) / 1000} s; ` +
          "this session's actions were withdrawn");
      }
      if (w.version === version && gone().length > 0) {
        given.forEach((a) => w.gathered.delete(a));
        const left = gone();
        const deadlines = left.map((a) => w.vacant.get(a)).filter((d): d is number => d !== undefined);
        const within = deadlines.length === 0 ? ""
          : ` (a session may join for them within ${Math.round((Math.min(...deadlines) - Date.now()) / 1000)} s)`;
        throw new Aborted(`the session acting for ${JSON.stringify(left)} left the world${within}; ` +
          "this session's actions were withdrawn");
      }
      if (w.stepError !== undefined && w.stepError[0] === version) {
        const err = w.stepError[1];
        throw new (err.constructor as new (m: string) => EnvError)(`the joint action was refused: ${err.message}`);
      }
      if (w.session.episodeId !== episode) {
        throw new Aborted("the world's owner started a new episode before the joint action was complete");
      }
      return await this.timeStep();
    });
  }

  private async worldStep(joint: Map<string, A>, timeoutMs: number | undefined): Promise<TimeStep> {
    const w = this.world;
    const s = w.session;
    let out: WorldStep | undefined | void;
    try {
      out = await w.call(() => w.env.step(Object.fromEntries(joint)), "step", timeoutMs);
    } catch (e) {
      if (e instanceof DeadlineExceeded) { // the environment's state is unknown: the episode is aborted
        s.status = EpisodeStatus.ABORTED;
        w.toAct = [];
        w.bump();
      }
      throw e;
    }
    w.apply(out);
    s.stepCount += 1;
    w.lastActor = joint.size === 1 ? [...joint.keys()][0] : undefined;
    w.settle();
    w.toAct = await w.whoActs();
    w.bump();
    return await this.timeStep();
  }

  /** This seat's time step now, or (`wait`) once one of its agents is to act with no action
   *  pending, the episode ended, a new episode started, or (`seatEvents`) a seat event happened
   *  (RFC 0016), that this seat has not seen; at most `timeoutMs` and `waitTimeoutMs` (then
   *  `DEADLINE_EXCEEDED`, nothing changed). */
  async observe(wait: boolean, timeoutMs: number | undefined, waitTimeoutMs?: number, seatEvents = false):
    Promise<TimeStep> {
    const w = this.world;
    const ready = (): boolean => {
      if (this.closed || (seatEvents && this.events.length > 0)) {
        return true;
      }
      if (w.status === EpisodeStatus.NOT_STARTED) {
        return false;
      }
      if (w.session.episodeId !== this.seenEpisode) {
        return w.session.episodeId !== "";
      }
      if (w.status === EpisodeStatus.RUNNING) {
        return w.toAct.some((a) => this.agents.includes(a) && !w.gathered.has(a));
      }
      return w.version !== this.seenVersion;
    };
    const bound = earliest(timeoutMs, waitTimeoutMs);
    if (wait && !(await w.until(ready, bound))) {
      throw new DeadlineExceeded(`nothing for this session's agents within ${(bound ?? 0) / 1000} s`);
    }
    return await w.exclusive(() => this.timeStep());
  }

  /** The runtime's part of the world's state; the environment's (the whole world) only for a
   *  seat acting for every agent. */
  async state(): Promise<StateOutcome<S>> {
    const w = this.world;
    return await w.exclusive(async () => {
      const s = w.session;
      const stateFn = w.env.state;
      const st = this.everyone && stateFn !== undefined ? await w.call(() => stateFn.call(w.env), "state") : undefined;
      return { episodeId: s.episodeId, stepCount: s.stepCount, status: s.status, state: st };
    });
  }
}

/** The worlds of one server, by join token. */
export class Worlds<A, O, S> {
  private readonly byToken = new Map<string, World<A, O, S>>();

  constructor(readonly manager: SessionManager<A, O, S>) {}

  /** A new world (a session slot) and its owner's seat. */
  async create(options: JsonObject, clientName: string, agentIds: readonly string[]): Promise<Seat<A, O, S>> {
    const decl = this.manager.runtime.def.multiAgent!;
    if (agentIds.length > 0 && !decl.joinable && !decl.agents.every((a) => agentIds.includes(a))) {
      throw new FailedPrecondition(
        `${this.manager.runtime.def.name} worlds are not joinable: a session acts for every agent (self-play)`,
        { fatal: true });
    }
    const session = await this.manager.open(options, clientName);
    const world = new World(this, session);
    let seat: Seat<A, O, S>;
    try {
      seat = world.seat(agentIds, false);
    } catch (e) {
      await session.close();
      throw e;
    }
    if (world.joinToken !== "") {
      this.byToken.set(world.joinToken, world);
    }
    return seat;
  }

  /** A seat in the world of `token`. */
  join(token: string, agentIds: readonly string[]): Seat<A, O, S> {
    const world = this.byToken.get(token);
    if (world === undefined || world.closed) {
      throw new NotFound("no world on this server has this join token (it may have closed)", { fatal: true });
    }
    return world.seat(agentIds, true);
  }

  forget(world: World<A, O, S>): void {
    this.byToken.delete(world.joinToken);
  }
}
