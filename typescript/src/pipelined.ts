/**
 * Pipelined requests coalesced into one message (RFC 0009, docs/protocol.md §4.1): the
 * server's rules in one place, as the Python runtime's `openenv.runtime.pipelined`.
 *
 * - refused as a whole, nothing applied, one non-fatal error under the enclosing id: no
 *   requests (INVALID_ARGUMENT), more than `max_pipelined_requests` (RESOURCE_EXHAUSTED), a
 *   server that does not offer it (UNIMPLEMENTED);
 * - refused in place, the others applied: a handshake (FAILED_PRECONDITION), a nested
 *   `pipelined` or a request without a kind (INVALID_ARGUMENT);
 * - a request that ends the session (close, a fatal error) stops the rest: each is answered
 *   FAILED_PRECONDITION (fatal), then the stream ends;
 * - answers that together exceed the message limit go out as separate messages, in order.
 */

import { create, toBinary } from "@bufbuild/protobuf";
import { EnvError, FailedPrecondition, InvalidArgument, ResourceExhausted, Unimplemented, statusOf } from "./errors.js";
import {
  SessionResponseSchema,
  type SessionRequest,
  type SessionResponse,
} from "./gen/openenv/v1/environment_pb.js";

/** Default of `Capabilities.max_pipelined_requests` (as the Python server). */
export const DEFAULT_MAX_PIPELINED_REQUESTS = 256;

/** True when the server ends the stream after sending `resp` (close, fatal error). */
export function endsSession(resp: SessionResponse): boolean {
  return resp.kind.case === "close" || (resp.kind.case === "error" && resp.kind.value.fatal);
}

function errorAnswer(rid: bigint, err: EnvError): SessionResponse {
  return create(SessionResponseSchema, { requestId: rid, kind: { case: "error", value: statusOf(err) } });
}

function refusal(n: number, maxRequests: number): EnvError | undefined {
  if (maxRequests <= 0) {
    return new Unimplemented("this server does not accept pipelined requests (Capabilities.pipelined_requests " +
      "is false): send them as separate messages");
  }
  if (n === 0) {
    return new InvalidArgument("pipelined carries no requests");
  }
  if (n > maxRequests) {
    return new ResourceExhausted(`pipelined carries ${n} requests; this server accepts at most ${maxRequests} ` +
      "(Capabilities.max_pipelined_requests): nothing in it was applied",
    { details: { requests: n, max_pipelined_requests: maxRequests } });
  }
  return undefined;
}

function itemRefusal(item: SessionRequest): EnvError | undefined {
  switch (item.kind.case) {
    case "pipelined":
      return new InvalidArgument("pipelined requests may not be nested: put the requests in one pipelined message");
    case "handshake":
      return new FailedPrecondition("a handshake may not be pipelined: it opens the session, as the first message");
    case undefined:
      return new InvalidArgument("request has no kind set");
    default:
      return undefined;
  }
}

/**
 * The messages answering the pipelined message `req`, to be written in order, and whether the
 * stream ends after them. `answerOne` answers one ordinary request (never rejects: it answers
 * with the error).
 */
export async function answerPipelined(
  req: SessionRequest,
  answerOne: (item: SessionRequest) => Promise<SessionResponse>,
  maxRequests: number,
  maxMessageBytes: number,
): Promise<[SessionResponse[], boolean]> {
  if (req.kind.case !== "pipelined") {
    throw new Error("not a pipelined message");
  }
  const items = req.kind.value.requests;
  const refused = refusal(items.length, maxRequests);
  if (refused !== undefined) {
    return [[errorAnswer(req.requestId, refused)], false];
  }
  const answers: SessionResponse[] = [];
  let endedBy: bigint | undefined;
  for (const item of items) {
    if (endedBy !== undefined) {
      answers.push(errorAnswer(item.requestId, new FailedPrecondition(
        `not applied: the session ended at request ${endedBy} of the same pipelined message`, { fatal: true })));
      continue;
    }
    const bad = itemRefusal(item);
    const resp = bad !== undefined ? errorAnswer(item.requestId, bad) : await answerOne(item);
    answers.push(resp);
    if (endsSession(resp)) {
      endedBy = item.requestId;
    }
  }
  const out = create(SessionResponseSchema, {
    requestId: req.requestId, kind: { case: "pipelined", value: { responses: answers } },
  });
  const ended = endedBy !== undefined;
  if (toBinary(SessionResponseSchema, out).length <= maxMessageBytes) {
    return [[out], ended];
  }
  return [answers, ended]; // too big together: each answer on its own (each bounded by the serializer)
}
