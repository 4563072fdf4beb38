/**
 * Sessions that survive their stream (RFC 0006, docs/protocol.md §3.10): resume tokens, the
 * request journal (exactly-once answers by request id) and forks, as the Python runtime's
 * `openenv.runtime.resume` does.
 *
 * A resumable session has a {@link Resumable} entry in the server's {@link Resumes}: a secret
 * token, the stream it is attached to, and a {@link Journal} of the answers it gave. When its
 * stream drops, the server *parks* the session instead of closing it; a new stream presenting
 * the token within the grace period takes it over, and requests it re-sends are answered from
 * the journal instead of being applied again. Forks are sessions opened from a snapshot and
 * parked at once, each with its own token: a client claims one by resuming it.
 */

import { createHash, randomBytes } from "node:crypto";
import { create, toBinary, type JsonObject } from "@bufbuild/protobuf";
import { Aborted, EnvError, InvalidArgument, ResourceExhausted, Unimplemented, statusOf } from "./errors.js";
import {
  SessionRequestSchema,
  SessionResponseSchema,
  type SessionRequest,
  type SessionResponse,
  type Snapshot,
} from "./gen/openenv/v1/environment_pb.js";
import type { Session, SessionManager } from "./session.js";

/** How many answers a journal keeps: a client re-sends only requests it has no answer to. */
export const JOURNAL_SIZE = 256;
/** Bound on waiting for a superseded stream to let go of its session. */
const TAKEOVER_MS = 30_000;
/** How long unclaimed forks wait when neither resumption nor the idle timeout bounds them. */
const DEFAULT_FORK_GRACE_MS = 60_000;
/** Default of `Capabilities.resume_grace` (as `openenv serve --resume-grace`): 60 s. */
export const DEFAULT_RESUME_GRACE_MS = 60_000;

/** The request without its id: what a replay must repeat exactly. */
function fingerprint(req: SessionRequest): string {
  const bare = create(SessionRequestSchema, { kind: req.kind });
  return createHash("sha256").update(toBinary(SessionRequestSchema, bare)).digest("hex");
}

/** Exactly-once answers by request id; requests apply one at a time, in arrival order. */
export class Journal {
  private readonly done = new Map<bigint, { fp: string; resp: SessionResponse }>();
  private readonly running = new Map<bigint, { fp: string; answer: Promise<SessionResponse> }>();
  private order: Promise<unknown> = Promise.resolve();
  /** Answers served from the record (for logs and tests). */
  replayed = 0;

  constructor(readonly keep = JOURNAL_SIZE) {}

  /**
   * The answer to `req`: `work()` run once for a new request id (never cancelled by a
   * dropped stream), the recorded answer for an id seen before, INVALID_ARGUMENT for an id
   * reused by a different request.
   */
  answer(req: SessionRequest, work: () => Promise<SessionResponse>): Promise<SessionResponse> {
    const rid = req.requestId;
    const fp = fingerprint(req);
    const known = this.done.get(rid) ?? this.running.get(rid);
    if (known !== undefined) {
      if (known.fp !== fp) {
        const err = new InvalidArgument(`request id ${rid} was already used for a different request in this ` +
          "session; ids of a resumable session must be unique");
        return Promise.resolve(create(SessionResponseSchema, { requestId: rid, kind: { case: "error", value: statusOf(err) } }));
      }
      this.replayed += 1;
      return "resp" in known ? Promise.resolve(known.resp) : known.answer;
    }
    const answer = this.order.then(work).finally(() => this.running.delete(rid));
    this.order = answer.catch(() => undefined);
    this.running.set(rid, { fp, answer });
    void answer.then((resp) => {
      this.done.set(rid, { fp, resp });
      while (this.done.size > this.keep) {
        this.done.delete(this.done.keys().next().value!);
      }
    }, () => undefined);
    return answer;
  }

  /** Wait for the requests still running (before the session closes). */
  async settle(): Promise<void> {
    await Promise.allSettled([...this.running.values()].map((r) => r.answer));
  }
}

/** One resumable session: its token, journal and attachment. */
export class Resumable<A, O, S> {
  readonly journal = new Journal();
  /** The stream serving it, when attached (any object identifying the stream). */
  owner: object | undefined;
  /** How the server ends the attached stream when another stream takes the session over. */
  onTakeover: (() => void) | undefined;
  expiry: NodeJS.Timeout | undefined;
  private detachedWaiters: (() => void)[] = [];

  constructor(readonly session: Session<A, O, S>, readonly token: string, owner: object | undefined) {
    this.owner = owner;
  }

  /** The attached stream let go of the session. */
  detach(): void {
    this.owner = undefined;
    const waiters = this.detachedWaiters;
    this.detachedWaiters = [];
    waiters.forEach((w) => w());
  }

  waitDetached(ms: number): Promise<boolean> {
    if (this.owner === undefined) {
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(false), ms);
      this.detachedWaiters.push(() => {
        clearTimeout(timer);
        resolve(true);
      });
    });
  }
}

/** The resumable sessions of one server (see the module docstring). */
export class Resumes<A, O, S> {
  private readonly byToken = new Map<string, Resumable<A, O, S>>();

  /** `graceMs`: how long a dropped session is kept (0: no resumption; forks then wait the idle timeout). */
  constructor(readonly manager: SessionManager<A, O, S>, readonly graceMs: number, readonly maxForks: number) {}

  /** How long a parked session waits: the resume grace, else the idle timeout. */
  get parkMs(): number {
    return this.graceMs || this.manager.runtime.idleTimeoutMs || DEFAULT_FORK_GRACE_MS;
  }

  /** Parked and attached resumable sessions (for tests and logs). */
  get size(): number {
    return this.byToken.size;
  }

  /** Make `session` resumable, attached to the stream `owner`. */
  register(session: Session<A, O, S>, owner: object | undefined): Resumable<A, O, S> {
    const entry = new Resumable(session, randomBytes(24).toString("base64url"), owner);
    this.byToken.set(entry.token, entry);
    return entry;
  }

  /**
   * Attach the session of `token` to the stream `owner`: ABORTED (fatal) when the token is
   * unknown or its session is gone. A stream still attached is ended first (its client saw the
   * drop before the server did) and the session taken over.
   */
  async take(token: string, owner: object): Promise<Resumable<A, O, S>> {
    const entry = this.byToken.get(token);
    const gone = (): Aborted => new Aborted("the session of this resume token is gone: it was closed, or its " +
      `resume grace period (${this.parkMs / 1000} s) passed; open a new session`, { fatal: true });
    if (entry === undefined || entry.session.closed) {
      throw gone();
    }
    if (entry.owner !== undefined && entry.owner !== owner) {
      entry.onTakeover?.();
      if (!(await entry.waitDetached(TAKEOVER_MS))) {
        throw new Aborted("the session's previous stream did not let go of it", { fatal: true });
      }
    }
    if (entry.session.closed || !this.byToken.has(token)) {
      throw gone();
    }
    clearTimeout(entry.expiry);
    entry.expiry = undefined;
    entry.owner = owner;
    entry.onTakeover = undefined;
    return entry;
  }

  /** The stream went away: keep the session for the grace period. */
  park(entry: Resumable<A, O, S>): void {
    entry.detach();
    // A drain or the idle reaper ends a parked session at once (no stream to tell).
    entry.session.setTerminate(() => this.expire(entry));
    if (entry.expiry === undefined) {
      entry.expiry = setTimeout(() => this.expire(entry), this.parkMs);
      entry.expiry.unref();
    }
  }

  /** The session ended: its token no longer resumes it. */
  forget(entry: Resumable<A, O, S>): void {
    this.byToken.delete(entry.token);
    clearTimeout(entry.expiry);
    entry.expiry = undefined;
    entry.detach();
  }

  private expire(entry: Resumable<A, O, S>): void {
    clearTimeout(entry.expiry);
    entry.expiry = undefined;
    if (entry.owner !== undefined || !this.byToken.has(entry.token)) { // reattached, or already ended
      return;
    }
    this.forget(entry);
    void entry.journal.settle().then(() => entry.session.close());
  }

  /** Close every parked session (server shutdown). */
  async closeParked(): Promise<void> {
    for (const entry of [...this.byToken.values()]) {
      if (entry.owner === undefined) {
        this.forget(entry);
        await entry.journal.settle();
        await entry.session.close();
      }
    }
  }

  /**
   * Open `count` sessions from `snapshot` (of `session` now, when undefined), parked for a
   * client to claim. All or none; errors are not fatal to `session`.
   */
  async fork(session: Session<A, O, S>, options: JsonObject, count: number,
             snapshot: Snapshot | undefined): Promise<Resumable<A, O, S>[]> {
    const rt = this.manager.runtime;
    if (!rt.def.snapshots) {
      throw new Unimplemented(`${rt.def.name} does not offer snapshots, so no forks`);
    }
    const n = count || 1;
    const opened: Session<A, O, S>[] = [];
    try {
      if (n > this.maxForks) {
        throw new ResourceExhausted(`fork count ${n} exceeds this server's max_forks ${this.maxForks}`);
      }
      const snap = snapshot ?? await session.snapshot();
      const max = rt.maxSessions;
      if (this.manager.active + n > max) {
        throw new ResourceExhausted(`server at capacity: ${this.manager.active}/${max} sessions active, ` +
          `${n} forks do not fit`, { details: { active_sessions: this.manager.active, max_sessions: max } });
      }
      for (let i = 0; i < n; i++) {
        const s = await this.manager.open(options, session.clientName);
        opened.push(s);
        await s.restore(snap);
      }
    } catch (e) {
      for (const s of opened) {
        await s.close();
      }
      if (e instanceof EnvError) {
        e.fatal = false; // the forking session goes on
      }
      throw e;
    }
    const entries = opened.map((s) => this.register(s, undefined));
    entries.forEach((e) => this.park(e));
    return entries;
  }
}
