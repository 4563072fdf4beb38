/**
 * The gridworld, written in TypeScript: walk a seeded maze to its goal, with the typed
 * `gridworld.v1` messages generated from envs/gridworld/proto (the same contract as the
 * Python reference environment, `gridworld.server:GridWorldEnvironment`).
 *
 * The rules are the Python environment's: a perfect maze carved by a randomized
 * depth-first search on an odd-sized grid; reward per step `-0.01 + 0.1 * (d_before -
 * d_after)` (d = breadth-first distance to the goal), plus `1.0` on reaching the goal,
 * which terminates the episode; truncation after 100 steps. Mazes are deterministic per
 * seed, drawn from a SplitMix64 generator (so not the same mazes as Python's Mersenne
 * Twister draws for the same seed).
 */

import { create, type JsonObject } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { messageType } from "../codec.js";
import type { EnvStep, Environment, EnvironmentDefinition, ResetArgs } from "../environment.js";
import { InvalidAction, InvalidArgument } from "../errors.js";
import {
  ActionSchema,
  Move,
  ObservationSchema,
  PositionSchema,
  StateSchema,
  type Action,
  type Observation,
  type Position,
  type State,
} from "../gen/gridworld/v1/gridworld_pb.js";

/** Added to every step's reward. */
export const STEP_PENALTY = -0.01;
/** Times the decrease of the breadth-first distance to the goal. */
export const SHAPING = 0.1;
/** Added on the step that reaches the goal. */
export const GOAL_REWARD = 1.0;
const DEFAULT_SIZE = 9;
const MIN_SIZE = 5;
const MAX_SIZE = 51;
const SIZE_KEYS = ["size", "height", "width"] as const;
const WALL = "#";
const FLOOR = ".";

type Cell = readonly [number, number];

const DELTAS: ReadonlyMap<Move, Cell> = new Map<Move, Cell>([
  [Move.UP, [-1, 0]], [Move.DOWN, [1, 0]], [Move.LEFT, [0, -1]], [Move.RIGHT, [0, 1]],
]);

/** SplitMix64: a small, fast, well-distributed 64-bit generator; same seed, same draws. */
export class SplitMix64 {
  private state: bigint;

  constructor(seed: bigint) {
    this.state = BigInt.asUintN(64, seed);
  }

  /** The next 64-bit output. */
  next64(): bigint {
    this.state = BigInt.asUintN(64, this.state + 0x9e3779b97f4a7c15n);
    let z = this.state;
    z = BigInt.asUintN(64, (z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
    z = BigInt.asUintN(64, (z ^ (z >> 27n)) * 0x94d049bb133111ebn);
    return z ^ (z >> 31n);
  }

  /** A uniform integer in [0, n), n <= 2^32 (rejection sampling: no modulo bias). */
  below(n: number): number {
    const limit = 2 ** 32 - (2 ** 32 % n);
    for (;;) {
      const x = Number(this.next64() >> 32n);
      if (x < limit) {
        return x % n;
      }
    }
  }

  /** A uniform element of `items` (non-empty). */
  choice<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }
}

/** A perfect maze of height x width cells (both odd, >= 3), as rows of '#' and '.'. */
export function generateMaze(rng: SplitMix64, height: number, width: number): string[] {
  const wall = Array.from({ length: height }, () => new Array<boolean>(width).fill(true));
  const start: Cell = [1 + 2 * rng.below((height - 1) / 2), 1 + 2 * rng.below((width - 1) / 2)];
  wall[start[0]]![start[1]] = false;
  const stack: Cell[] = [start];
  while (stack.length > 0) {
    const [r, c] = stack[stack.length - 1]!;
    const options = ([[-2, 0], [2, 0], [0, -2], [0, 2]] as const)
      .map(([dr, dc]): Cell => [r + dr, c + dc])
      .filter(([nr, nc]) => nr > 0 && nr < height - 1 && nc > 0 && nc < width - 1 && wall[nr]![nc]);
    if (options.length === 0) {
      stack.pop();
      continue;
    }
    const [nr, nc] = rng.choice(options);
    wall[(r + nr) / 2]![(c + nc) / 2] = false;
    wall[nr]![nc] = false;
    stack.push([nr, nc]);
  }
  return wall.map((row) => row.map((w) => (w ? WALL : FLOOR)).join(""));
}

const key = (c: Cell): string => `${c[0]},${c[1]}`;

/** Breadth-first distance (in moves) from `source` to every reachable floor cell. */
export function distances(grid: readonly string[], source: Cell): Map<string, number> {
  const dist = new Map<string, number>([[key(source), 0]]);
  const queue: Cell[] = [source];
  for (let i = 0; i < queue.length; i++) {
    const [r, c] = queue[i]!;
    for (const [dr, dc] of DELTAS.values()) {
      const next: Cell = [r + dr, c + dc];
      const row = grid[next[0]];
      if (!dist.has(key(next)) && row !== undefined && next[1] >= 0 && next[1] < row.length && row[next[1]] !== WALL) {
        dist.set(key(next), dist.get(key([r, c]))! + 1);
        queue.push(next);
      }
    }
  }
  return dist;
}

/** Draw (start, goal): two distinct rooms, the goal at least half the longest distance away. */
export function place(rng: SplitMix64, grid: readonly string[]): [Cell, Cell] {
  const rooms: Cell[] = [];
  for (let r = 1; r < grid.length; r += 2) {
    for (let c = 1; c < grid[0]!.length; c += 2) {
      rooms.push([r, c]);
    }
  }
  const start = rng.choice(rooms);
  const dist = distances(grid, start);
  const far = Math.max(...rooms.map((cell) => dist.get(key(cell))!));
  const goal = rng.choice(rooms.filter((cell) => key(cell) !== key(start) && dist.get(key(cell))! * 2 >= far));
  return [start, goal];
}

function mazeSize(options: JsonObject, fallback: [number, number]): [number, number] {
  const unknown = Object.keys(options).filter((k) => !(SIZE_KEYS as readonly string[]).includes(k)).sort();
  if (unknown.length > 0) {
    throw new InvalidArgument(`unknown gridworld option(s) ${unknown.join(", ")}; known: ${SIZE_KEYS.join(", ")}`);
  }
  for (const k of SIZE_KEYS) {
    const v = options[k];
    if (v !== undefined && v !== null
        && (typeof v !== "number" || !Number.isInteger(v) || v % 2 === 0 || v < MIN_SIZE || v > MAX_SIZE)) {
      throw new InvalidArgument(`option '${k}' must be an odd integer from ${MIN_SIZE} to ${MAX_SIZE}, got ${JSON.stringify(v)}`);
    }
  }
  let [height, width] = fallback;
  if (typeof options.size === "number") {
    height = width = options.size;
  }
  return [typeof options.height === "number" ? options.height : height,
    typeof options.width === "number" ? options.width : width];
}

const round6 = (x: number): number => Math.round(x * 1e6) / 1e6;
const pos = (c: Cell): Position => create(PositionSchema, { row: c[0], col: c[1] });

interface Episode {
  seed: bigint;
  walls: string[];
  toGoal: Map<string, number>;
  agent: Cell;
  goal: Cell;
  totalReward: number;
}

/** One gridworld instance (one per session). */
export class GridWorld implements Environment<Action, Observation, State> {
  private readonly size: [number, number];
  private episode: Episode | undefined;

  constructor(options: JsonObject = {}) {
    this.size = mazeSize(options, [DEFAULT_SIZE, DEFAULT_SIZE]);
  }

  reset({ seed, options }: ResetArgs): EnvStep<Observation> {
    const { task_id: task, ...rest } = options;
    const [height, width] = mazeSize(rest, this.size);
    // A task (RFC 0004) is a maze: "maze-N" is the maze the seed N builds.
    const taskSeed = typeof task === "string" ? mazeOfTask(task) : undefined;
    const s = taskSeed ?? seed ?? randomBytes(8).readBigUInt64LE();
    const rng = new SplitMix64(s);
    const walls = generateMaze(rng, height, width);
    const [start, goal] = place(rng, walls);
    this.episode = { seed: s, walls, toGoal: distances(walls, goal), agent: start, goal, totalReward: 0 };
    return { observation: this.observation(false), metadata: { distance_to_goal: this.episode.toGoal.get(key(start))! } };
  }

  step(action: Action): EnvStep<Observation> {
    const ep = this.episode;
    if (ep === undefined) {
      throw new InvalidArgument("step before reset");
    }
    const delta = DELTAS.get(action.move);
    if (delta === undefined) {
      throw new InvalidAction(`move must be MOVE_UP, MOVE_DOWN, MOVE_LEFT or MOVE_RIGHT, got ${
        Move[action.move] === undefined ? String(action.move) : `MOVE_${Move[action.move]}`}`);
    }
    const before = ep.toGoal.get(key(ep.agent))!;
    const target: Cell = [ep.agent[0] + delta[0], ep.agent[1] + delta[1]];
    const bumped = ep.walls[target[0]]![target[1]] === WALL; // the border is all wall: never out of range
    if (!bumped) {
      ep.agent = target;
    }
    const after = ep.toGoal.get(key(ep.agent))!;
    const terminated = key(ep.agent) === key(ep.goal);
    const reward = round6(STEP_PENALTY + SHAPING * (before - after) + (terminated ? GOAL_REWARD : 0));
    ep.totalReward = round6(ep.totalReward + reward);
    return { observation: this.observation(bumped), reward, terminated, metadata: { distance_to_goal: after } };
  }

  state(): State | undefined {
    const ep = this.episode;
    if (ep === undefined) {
      return undefined;
    }
    return create(StateSchema, {
      seed: ep.seed, height: ep.walls.length, width: ep.walls[0]!.length,
      agent: pos(ep.agent), goal: pos(ep.goal), totalReward: ep.totalReward,
    });
  }

  /** The episode as JSON (RFC 0006): the maze, the agent, the goal; distances are recomputed. */
  snapshot(): Uint8Array {
    const ep = this.episode;
    const doc = ep === undefined ? null : {
      seed: ep.seed.toString(), walls: ep.walls, agent: ep.agent, goal: ep.goal, totalReward: ep.totalReward,
    };
    return new TextEncoder().encode(JSON.stringify(doc));
  }

  restore(data: Uint8Array): void {
    const doc = JSON.parse(new TextDecoder().decode(data)) as
      { seed: string; walls: string[]; agent: Cell; goal: Cell; totalReward: number } | null;
    this.episode = doc === null ? undefined : {
      seed: BigInt(doc.seed), walls: doc.walls, toGoal: distances(doc.walls, doc.goal),
      agent: doc.agent, goal: doc.goal, totalReward: doc.totalReward,
    };
  }

  private observation(bumped: boolean): Observation {
    const ep = this.episode!;
    const rows = ep.walls.map((row) => [...row]);
    rows[ep.goal[0]]![ep.goal[1]] = "G";
    rows[ep.agent[0]]![ep.agent[1]] = "A"; // drawn last: on the goal, the agent shows
    return create(ObservationSchema, {
      agent: pos(ep.agent), goal: pos(ep.goal), grid: rows.map((r) => r.join("")), bumped,
    });
  }
}

/** Tasks (RFC 0004): "maze-N" for the maze of seed N; the splits' seeds. */
export const TASK_SPLITS: Record<string, [string, bigint, number]> = {
  train: ["the mazes of seeds 0-99", 0n, 100],
  test: ["the mazes of seeds 1000-1019, held out", 1000n, 20],
};

function mazeOfTask(task: string): bigint {
  const m = /^maze-([0-9]{1,19})$/.exec(task);
  if (m === null) {
    throw new InvalidArgument(`unknown gridworld task ${JSON.stringify(task)} (tasks are maze-N)`);
  }
  return BigInt(m[1]!);
}

/** The TypeScript gridworld, ready for `serve()`. */
export const gridworld: EnvironmentDefinition<Action, Observation, State> = {
  name: "gridworld_ts",
  version: "0.1.0",
  description: "A seeded maze on an odd-sized grid: move up, down, left or right to reach the goal. "
    + "Typed protobuf actions, observations and state (gridworld.v1), served from Node.js.",
  action: messageType(ActionSchema),
  observation: messageType(ObservationSchema),
  state: messageType(StateSchema),
  create: (options) => new GridWorld(options),
  deterministic: true,
  seeded: true, // the seed builds the maze, as in the Python gridworld
  snapshots: true,
  taskSplits: Object.fromEntries(Object.entries(TASK_SPLITS).map(([name, [description]]) => [name, description])),
  listTasks: (split) => {
    const [, first, n] = TASK_SPLITS[split]!;
    return Array.from({ length: n }, (_, i) => ({ id: `maze-${first + BigInt(i)}`, metadata: { seed: Number(first) + i } }));
  },
  maxEpisodeSteps: 100,
  rewardRange: [round6(STEP_PENALTY - SHAPING), round6(STEP_PENALTY + SHAPING + GOAL_REWARD)],
  maxSessions: 1024,
  exampleActions: [Move.UP, Move.DOWN, Move.LEFT, Move.RIGHT].map((move) => create(ActionSchema, { move })),
  metadata: { author: "openenv", implementation: "typescript", documentation_url: "typescript/README.md" },
};
