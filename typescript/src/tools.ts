/**
 * Tools, shaped after MCP (docs/protocol.md §6, docs/tools.md): definitions, argument
 * validation against the advertised JSON Schema, and MCP-shaped results.
 *
 * A tool is a function of the session's environment instance. Its `inputSchema` is the
 * contract: calls are validated against it (JSON Schema draft 2020-12, with Ajv) before
 * the function runs, `INVALID_ARGUMENT` on a violation. A tool that throws returns a
 * result with `isError: true` (a result, not a protocol error), as MCP prescribes.
 */

import { create, type JsonObject, type JsonValue } from "@bufbuild/protobuf";
import { Ajv2020, type ErrorObject, type ValidateFunction } from "ajv/dist/2020.js";
import { InvalidArgument, NotFound } from "./errors.js";
import {
  ToolResultSchema,
  ToolSchema,
  type Tool,
  type ToolResult,
} from "./gen/openenv/v1/tool_pb.js";

/** Names that are never tools. */
export const RESERVED_TOOL_NAMES: ReadonlySet<string> = new Set(["reset", "step", "state", "close"]);

/** A tool of an environment whose instances are `E`. */
export interface ToolDefinition<E> {
  /** Unique within the environment; `[A-Za-z0-9_.-]{1,128}`, not a reserved name. */
  name: string;
  /** What the tool does, written for the agent. */
  description?: string;
  /** JSON Schema of the arguments object (default: an object with no declared properties). */
  inputSchema?: JsonObject;
  /** JSON Schema of the result's structured content, when declared. */
  outputSchema?: JsonObject;
  /** MCP tool annotations (`title`, `readOnlyHint`, ...). */
  annotations?: JsonObject;
  /** Upper bound of one call, in ms (a shorter CallToolRequest.timeout wins). */
  timeoutMs?: number;
  /**
   * Run the tool. The return value becomes the result: a string as text (and
   * `{result: text}`), an object as JSON text plus structured content, any other JSON
   * value as JSON text plus `{result: value}`, a `ToolResult` message as is.
   */
  call(env: E, args: JsonObject): unknown;
}

/** Validates JSON values against one JSON Schema (draft 2020-12). */
export class SchemaValidator {
  private static readonly ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false });
  private readonly fn: ValidateFunction;

  constructor(readonly schema: JsonObject) {
    // Validated as draft 2020-12; another draft's "$schema" is dropped rather than refused
    // (the keywords environments use mean the same in drafts 7 to 2020-12).
    const { $schema, ...rest } = schema;
    const compiled = typeof $schema === "string" && !$schema.includes("2020-12") ? rest : schema;
    this.fn = SchemaValidator.ajv.compile(compiled);
  }

  /** The violations of `value` (empty when valid), Python-runtime style: loc + msg. */
  errors(value: JsonValue): { loc: (string | number)[]; msg: string; type: string }[] {
    if (this.fn(value)) {
      return [];
    }
    return (this.fn.errors ?? []).slice(0, 20).map((e: ErrorObject) => {
      const loc: (string | number)[] = e.instancePath.split("/").slice(1)
        .map((p) => (/^\d+$/.test(p) ? Number(p) : p.replaceAll("~1", "/").replaceAll("~0", "~")));
      const params = e.params as { missingProperty?: string; additionalProperty?: string };
      const extra = params.missingProperty ?? params.additionalProperty;
      if (extra !== undefined) {
        loc.push(extra);
      }
      const msg = params.additionalProperty !== undefined
        ? `additional property '${params.additionalProperty}' is not allowed` : e.message ?? e.keyword;
      return { loc, msg, type: e.keyword };
    });
  }
}

/** The tools of one environment definition: descriptors and validators, built once. */
export class ToolSet<E> {
  private readonly byName = new Map<string, { def: ToolDefinition<E>; validator: SchemaValidator; descriptor: Tool }>();

  constructor(defs: readonly ToolDefinition<E>[]) {
    for (const def of defs) {
      if (RESERVED_TOOL_NAMES.has(def.name)) {
        throw new Error(`tool name '${def.name}' is reserved (${[...RESERVED_TOOL_NAMES].sort().join(", ")})`);
      }
      if (!/^[A-Za-z0-9_.-]{1,128}$/.test(def.name)) {
        throw new Error(`tool name '${def.name}' must match [A-Za-z0-9_.-]{1,128}`);
      }
      if (this.byName.has(def.name)) {
        throw new Error(`tool '${def.name}' is defined twice`);
      }
      const inputSchema = def.inputSchema ?? { type: "object", properties: {} };
      this.byName.set(def.name, {
        def,
        validator: new SchemaValidator(inputSchema),
        descriptor: create(ToolSchema, {
          name: def.name, description: def.description ?? "", inputSchema,
          outputSchema: def.outputSchema, annotations: def.annotations,
        }),
      });
    }
  }

  get size(): number {
    return this.byName.size;
  }

  /** Every tool's descriptor, in definition order. */
  descriptors(): Tool[] {
    return [...this.byName.values()].map((t) => t.descriptor);
  }

  /** The definition of `name` with `args` validated: NOT_FOUND, then INVALID_ARGUMENT. */
  resolve(name: string, args: JsonObject): ToolDefinition<E> {
    const t = this.byName.get(name);
    if (t === undefined) {
      throw new NotFound(`unknown tool '${name}'; known tools: ${[...this.byName.keys()].join(", ")}`);
    }
    const errors = t.validator.errors(args);
    if (errors.length > 0) {
      const where = errors[0]!.loc.join(".") || "arguments";
      throw new InvalidArgument(`tool '${name}': invalid argument ${where}: ${errors[0]!.msg}`,
        { details: errors as unknown as JsonValue });
    }
    return t.def;
  }
}

/** A tool's return value as an MCP-shaped result (see {@link ToolDefinition.call}). */
export function toolResult(value: unknown): ToolResult {
  if (typeof value === "object" && value !== null && (value as { $typeName?: string }).$typeName === ToolResultSchema.typeName) {
    return value as ToolResult;
  }
  if (typeof value === "string") {
    return textResult(value, { result: value });
  }
  const json = (value === undefined ? null : value) as JsonValue;
  const structured = typeof json === "object" && json !== null && !Array.isArray(json) ? json : { result: json };
  return textResult(JSON.stringify(json), structured);
}

/** A failed tool call: `isError` with the failure as text. */
export function errorResult(e: unknown): ToolResult {
  const text = e instanceof Error ? `${e.name}: ${e.message}` : `Error: ${String(e)}`;
  return create(ToolResultSchema, { content: [{ kind: { case: "text", value: { text } } }], isError: true });
}

function textResult(text: string, structured: JsonObject): ToolResult {
  return create(ToolResultSchema, {
    content: [{ kind: { case: "text", value: { text } } }],
    structuredContent: structured,
  });
}
