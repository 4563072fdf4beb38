/**
 * The protocol's error table (docs/protocol.md §5.2) as TypeScript exceptions.
 *
 * One class per `openenv.v1.ErrorCode`, named after it, all subclasses of
 * {@link EnvError}, which carries the four fields of `openenv.v1.Status`: `code`,
 * `message`, `details` and `fatal`. Codes equal `google.rpc.Code` (and so gRPC status
 * codes), which is how stream-level statuses map to the same classes.
 */

import { create, fromJson, toJson, type JsonValue } from "@bufbuild/protobuf";
import { anyPack, anyUnpack, ValueSchema } from "@bufbuild/protobuf/wkt";
import { ErrorCode, StatusSchema, type Status } from "./gen/openenv/v1/error_pb.js";

export { ErrorCode };

/** Options of an error: machine-readable details and whether the session ended. */
export interface EnvErrorOptions {
  /** JSON-like details (sent as a packed `google.protobuf.Value`). */
  details?: JsonValue;
  /** True when the session ends with this error. */
  fatal?: boolean;
}

/** An error answer of the protocol. Branch on `code` or catch a subclass. */
export class EnvError extends Error {
  /** The error code (numbers equal google.rpc.Code). */
  readonly code: ErrorCode;
  /** Machine-readable details, when the server sent any. */
  details: JsonValue | undefined;
  /** True when the session ended with this error. */
  fatal: boolean;

  constructor(code: ErrorCode, message: string, options: EnvErrorOptions = {}) {
    super(message);
    this.name = new.target.name;
    this.code = code;
    this.details = options.details;
    this.fatal = options.fatal ?? false;
  }

  /**
   * True when the same request may succeed if sent again, later or to another server (in a new
   * session when this error ended the session): the error table's "Retryable" column
   * (docs/protocol.md §5.2): `RESOURCE_EXHAUSTED` (capacity), `ABORTED`, `UNAVAILABLE`.
   */
  get retryable(): boolean {
    return RETRYABLE.has(this.code);
  }

  /** The exception class matching `code` (unknown codes give a plain EnvError). */
  static fromCode(code: number, message: string, options: EnvErrorOptions = {}): EnvError {
    const cls = BY_CODE.get(code);
    if (cls === undefined) {
      return new EnvError(code as ErrorCode, `unknown error code ${code}: ${message}`, options);
    }
    return new cls(message, options);
  }

  override toString(): string {
    return `${ErrorCode[this.code] ?? this.code}: ${this.message}${this.fatal ? " (session ended)" : ""}`;
  }
}

/** The codes the error table marks retryable (tables.test.ts checks them against the table). */
export const RETRYABLE: ReadonlySet<ErrorCode> = new Set([
  ErrorCode.RESOURCE_EXHAUSTED,
  ErrorCode.ABORTED,
  ErrorCode.UNAVAILABLE,
]);

type ErrorClass = new (message?: string, options?: EnvErrorOptions) => EnvError;

function errorClass(code: ErrorCode): ErrorClass {
  return class extends EnvError {
    constructor(message = "", options: EnvErrorOptions = {}) {
      super(code, message, options);
    }
  };
}

/** The client cancelled the request. */
export class Cancelled extends errorClass(ErrorCode.CANCELLED) {}
/** The request or action is invalid whatever the state (schema, type, bytes). */
export class InvalidArgument extends errorClass(ErrorCode.INVALID_ARGUMENT) {}
/** Thrown by an environment's `step` for an action it rejects (INVALID_ARGUMENT, not fatal). */
export class InvalidAction extends InvalidArgument {}
/** A per-request timeout elapsed. */
export class DeadlineExceeded extends errorClass(ErrorCode.DEADLINE_EXCEEDED) {}
/**
 * This client's own timeout elapsed before the server answered (RFC 0016), as Python's
 * `ClientTimeout`: raised by the client, never sent by a server; `instanceof DeadlineExceeded`
 * still holds, so existing handlers catch it.
 */
export class ClientTimeout extends DeadlineExceeded {}
/** A named thing (e.g. a tool) does not exist. */
export class NotFound extends errorClass(ErrorCode.NOT_FOUND) {}
/** A capacity or size limit was hit. */
export class ResourceExhausted extends errorClass(ErrorCode.RESOURCE_EXHAUSTED) {}
/** The session's state does not allow the request (e.g. step before reset). */
export class FailedPrecondition extends errorClass(ErrorCode.FAILED_PRECONDITION) {}
/** The request kind or capability is not supported. */
export class Unimplemented extends errorClass(ErrorCode.UNIMPLEMENTED) {}
/** The session was lost: its resume token is unknown or its grace period passed (RFC 0006). */
export class Aborted extends errorClass(ErrorCode.ABORTED) {}
/** The environment threw; the message names the exception. */
export class Internal extends errorClass(ErrorCode.INTERNAL) {}
/** The server is shutting down or cannot serve. */
export class Unavailable extends errorClass(ErrorCode.UNAVAILABLE) {}
/** A token is required and the call carried none, or one the server does not accept (RFC 0003). */
export class Unauthenticated extends errorClass(ErrorCode.UNAUTHENTICATED) {}
/** The request is not allowed from where it came (RFC 0003). */
export class PermissionDenied extends errorClass(ErrorCode.PERMISSION_DENIED) {}

const BY_CODE: ReadonlyMap<number, ErrorClass> = new Map<number, ErrorClass>([
  [ErrorCode.CANCELLED, Cancelled],
  [ErrorCode.INVALID_ARGUMENT, InvalidArgument],
  [ErrorCode.DEADLINE_EXCEEDED, DeadlineExceeded],
  [ErrorCode.NOT_FOUND, NotFound],
  [ErrorCode.RESOURCE_EXHAUSTED, ResourceExhausted],
  [ErrorCode.FAILED_PRECONDITION, FailedPrecondition],
  [ErrorCode.ABORTED, Aborted],
  [ErrorCode.UNIMPLEMENTED, Unimplemented],
  [ErrorCode.INTERNAL, Internal],
  [ErrorCode.UNAVAILABLE, Unavailable],
  [ErrorCode.UNAUTHENTICATED, Unauthenticated],
  [ErrorCode.PERMISSION_DENIED, PermissionDenied],
]);

/** The wire form of an error (details packed as a `google.protobuf.Value`). */
export function statusOf(err: EnvError): Status {
  const st = create(StatusSchema, { code: err.code, message: err.message, fatal: err.fatal });
  if (err.details !== undefined) {
    st.details.push(anyPack(ValueSchema, fromJson(ValueSchema, err.details)));
  }
  return st;
}

/** The exception of an error answer. */
export function errorFromStatus(st: Status): EnvError {
  let details: JsonValue | undefined;
  if (st.details.length > 0) {
    const values: JsonValue[] = st.details.map((d) => {
      const v = anyUnpack(d, ValueSchema);
      return v === undefined ? { "@type": d.typeUrl } : toJson(ValueSchema, v);
    });
    details = values.length === 1 ? values[0] : values;
  }
  return EnvError.fromCode(st.code, st.message, { details, fatal: st.fatal });
}

/** An arbitrary thrown value as the INTERNAL error the protocol sends for it. */
export function internalError(e: unknown, prefix = ""): EnvError {
  if (e instanceof EnvError) {
    return e;
  }
  const text = e instanceof Error ? `${e.name}: ${e.message}` : `Error: ${String(e)}`;
  return new Internal(prefix + text);
}
