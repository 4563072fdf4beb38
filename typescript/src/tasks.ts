/**
 * Tasks and splits (RFC 0004, docs/protocol.md §3.11): the catalogue the server builds once
 * from an {@link EnvironmentDefinition}'s `taskSplits` / `listTasks`, as the Python runtime's
 * `openenv.runtime.tasks.TaskCatalog` does.
 *
 * A reset naming a task (`ResetRequest.task_id`) is checked against the catalogue and reaches
 * the environment's `reset` as `options.task_id`.
 */

import { create, type JsonObject } from "@bufbuild/protobuf";
import type { EnvironmentDefinition } from "./environment.js";
import { InvalidArgument, NotFound, Unimplemented } from "./errors.js";
import {
  TaskInfoSchema,
  TaskSplitSchema,
  type ListTasksRequest,
  type ListTasksResponse,
  ListTasksResponseSchema,
  type TaskInfo,
  type TaskSplit,
} from "./gen/openenv/v1/task_pb.js";

/** Most tasks one `list_tasks` answer carries. */
export const MAX_TASKS_PAGE = 1000;
/** The reset option under which the environment receives `ResetRequest.task_id`. */
export const TASK_OPTION = "task_id";

/** The tasks of one environment definition, read once. */
export class TaskCatalog {
  readonly splits = new Map<string, TaskInfo[]>();
  readonly index = new Map<string, TaskInfo>();

  private constructor(readonly descriptions: Record<string, string>) {}

  /** The catalogue of `def`, or undefined when it declares no task splits. */
  static async of(def: EnvironmentDefinition<unknown, unknown, unknown>): Promise<TaskCatalog | undefined> {
    const splits = def.taskSplits;
    if (splits === undefined || Object.keys(splits).length === 0) {
      return undefined;
    }
    if (def.listTasks === undefined) {
      throw new Error(`${def.name} declares taskSplits but no listTasks`);
    }
    const cat = new TaskCatalog({ ...splits });
    for (const name of Object.keys(splits)) {
      const tasks: TaskInfo[] = [];
      for (const t of await def.listTasks(name)) {
        const id = typeof t === "string" ? t : String(t.id);
        if (cat.index.has(id)) {
          throw new Error(`task id ${JSON.stringify(id)} is declared twice (task ids are unique across splits)`);
        }
        const info = create(TaskInfoSchema, {
          id, split: name,
          metadata: typeof t === "string" || t.metadata === undefined || Object.keys(t.metadata).length === 0
            ? undefined : t.metadata,
        });
        cat.index.set(id, info);
        tasks.push(info);
      }
      cat.splits.set(name, tasks);
    }
    return cat;
  }

  /** `EnvironmentInfo.task_splits`. */
  splitProtos(): TaskSplit[] {
    return [...this.splits].map(([name, tasks]) =>
      create(TaskSplitSchema, { name, size: BigInt(tasks.length), description: this.descriptions[name] ?? "" }));
  }

  /** One page of a split (empty: the default split); NOT_FOUND for an unknown split. */
  page(req: ListTasksRequest): ListTasksResponse {
    const name = req.split || [...this.splits.keys()][0]!;
    const tasks = this.splits.get(name);
    if (tasks === undefined) {
      throw new NotFound(`unknown task split ${JSON.stringify(name)}; known: ${[...this.splits.keys()].join(", ")}`);
    }
    const limit = req.limit <= 0 ? MAX_TASKS_PAGE : Math.min(req.limit, MAX_TASKS_PAGE);
    const offset = req.offset > BigInt(tasks.length) ? tasks.length : Number(req.offset);
    const chunk = tasks.slice(offset, offset + limit);
    return create(ListTasksResponseSchema, {
      tasks: chunk, total: BigInt(tasks.length),
      nextOffset: BigInt(chunk.length > 0 ? Math.min(offset + chunk.length, tasks.length) : tasks.length),
    });
  }

  /** The reset options carrying `taskId` to the environment (checked first). */
  resetOptions(taskId: string, options: JsonObject): JsonObject {
    if (!this.index.has(taskId)) {
      throw new NotFound(`unknown task ${JSON.stringify(taskId)}: list_tasks shows this environment's tasks`);
    }
    const given = options[TASK_OPTION];
    if (given !== undefined && String(given) !== taskId) {
      throw new InvalidArgument(`options[${JSON.stringify(TASK_OPTION)}] contradicts task_id ${JSON.stringify(taskId)}`);
    }
    return { ...options, [TASK_OPTION]: taskId };
  }
}

/** Reset options for a reset naming `taskId` (unchanged when it is empty). */
export function withTask(catalog: TaskCatalog | undefined, taskId: string, options: JsonObject): JsonObject {
  if (taskId === "") {
    return options;
  }
  if (catalog === undefined) {
    throw new Unimplemented("this environment declares no tasks (Capabilities.tasks is false)");
  }
  return catalog.resetOptions(taskId, options);
}

/** The task of each of `n` reset instances: none, one shared, or one each. */
export function perInstanceTasks(taskIds: readonly string[], n: number): string[] {
  if (taskIds.length === 0) {
    return new Array<string>(n).fill("");
  }
  if (taskIds.length === 1) {
    return new Array<string>(n).fill(taskIds[0]!);
  }
  if (taskIds.length === n) {
    return [...taskIds];
  }
  throw new InvalidArgument(`${taskIds.length} task ids for ${n} instances: give 0, 1 or one per instance`);
}
