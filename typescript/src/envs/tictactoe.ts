/**
 * Tic-tac-toe for two agents, written in TypeScript: the multi-agent authoring API
 * (world.ts, RFC 0012) at work, like the Python reference `openenv.games:TicTacToe`, view
 * for view and reward for reward.
 *
 * "x" then "o" take a free cell (0-8, row by row) in turn; three in a row wins (+1 / -1, a
 * draw 0 / 0: zero-sum). An agent's view is the board from its side (0 empty, 1 its own
 * mark, 2 the opponent's) and the cells it may take now. A taken cell is refused
 * (INVALID_ARGUMENT, nothing changes).
 */

import type { JsonObject } from "@bufbuild/protobuf";
import { jsonType } from "../codec.js";
import { InvalidAction } from "../errors.js";
import { multiAgent, type MultiAgentEnvironment, type WorldStep } from "../world.js";

const LINES = [[0, 1, 2], [3, 4, 5], [6, 7, 8], [0, 3, 6], [1, 4, 7], [2, 5, 8], [0, 4, 8], [2, 4, 6]];

/** One agent's view of the board. */
export interface TicTacToeView extends JsonObject {
  board: number[];
  action_mask: number[];
}

const cells = (max: number, title: string): JsonObject => ({
  type: "array", title, minItems: 9, maxItems: 9, items: { type: "integer", minimum: 0, maximum: max },
});

/** One world: a board and whose turn it is. */
export class TicTacToe implements MultiAgentEnvironment<number, TicTacToeView, JsonObject> {
  board: string[] = Array<string>(9).fill("");
  turn = 0;
  over = true;

  reset(): void {
    this.board = Array<string>(9).fill("");
    this.turn = 0;
    this.over = false;
  }

  toAct(): string[] {
    return this.over ? [] : ["xo"[this.turn]!];
  }

  observe(agent: string): TicTacToeView {
    const mine = this.toAct().includes(agent);
    return {
      board: this.board.map((c) => (c === "" ? 0 : c === agent ? 1 : 2)),
      action_mask: this.board.map((c) => (mine && c === "" ? 1 : 0)),
    };
  }

  step(actions: Record<string, number>): WorldStep | undefined {
    const [[agent, cell]] = Object.entries(actions) as [[string, number]];
    if (!(cell >= 0 && cell < 9) || this.board[cell] !== "") {
      const free = this.board.flatMap((c, i) => (c === "" ? [i] : []));
      throw new InvalidAction(`cell ${cell} is not free: choose one of [${free.join(", ")}]`);
    }
    this.board[cell] = agent;
    const other = agent === "x" ? "o" : "x";
    if (LINES.some((line) => line.every((i) => this.board[i] === agent))) {
      this.over = true;
      return { rewards: { [agent]: 1, [other]: -1 }, terminated: true, metadata: { winner: agent } };
    }
    if (this.board.every((c) => c !== "")) {
      this.over = true;
      return { rewards: { [agent]: 0, [other]: 0 }, terminated: true, metadata: { winner: "" } };
    }
    this.turn = 1 - this.turn;
    return undefined;
  }

  state(): JsonObject {
    return { board: [...this.board], turn: "xo"[this.turn]!, over: this.over };
  }
}

/** The definition: `serve(tictactoe)`, or `openenv-ts serve tictactoe`. */
export const tictactoe = multiAgent<number, TicTacToeView, JsonObject>({
  name: "tic_tac_toe_ts",
  description: 'Tic-tac-toe for two agents: "x" then "o" take a free cell (0-8) in turn; three in a row wins.',
  agents: { x: "first", o: "second" },
  agentDescriptions: { x: "moves first", o: "moves second" },
  action: jsonType<number>({ type: "integer", minimum: 0, maximum: 8 }),
  observation: jsonType<TicTacToeView>({
    type: "object",
    title: "TicTacToeView",
    description: "One agent's view of the board: 9 cells, row by row, 0 empty, 1 its own mark, 2 the\n" +
      "opponent's; ``action_mask`` 1 for each cell it may take now (all 0 when it is not to act).",
    properties: { board: cells(2, "Board"), action_mask: cells(1, "Action Mask") },
    required: ["board", "action_mask"],
    additionalProperties: false,
  }),
  state: jsonType<JsonObject>(),
  exampleActions: [4, 0],
  rewardSum: 0,
  rewardRange: [-1, 1],
  deterministic: true,
  maxEpisodeSteps: 9,
  // RFC 0016, as openenv.games:TicTacToe: an opponent gone past its rejoin deadline loses (the
  // leaver -1, the other +1: the runtime's default forfeit).
  rejoinTimeoutMs: 60_000,
  vacancy: "forfeit",
  create: () => new TicTacToe(),
});
