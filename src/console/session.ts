import { createHash, randomBytes, timingSafeEqual } from "node:crypto";

/** The console's cookie: HttpOnly, SameSite=Strict, sent only to the gateway's own paths. */
const SESSION_COOKIE = "fencegate_console";
const COOKIE_PATH = "/_fence/";

export type Session = {
  id: string;
  principal: string;
  createdAt: number;
  /** Sliding: every authenticated call moves it to now + idle. */
  expiresAt: number;
};

type SessionOptions = {
  now: () => number;
  /** A session unused this long ends (default 30 min). */
  idleMs?: number;
  /** A session ends this long after sign-in however busy it is (default 12 h). */
  maxAgeMs?: number;
  /** Sessions kept at most; the oldest ends first (default 10,000). */
  maxSessions?: number;
};

/**
 * Console sessions, in this gateway's memory only: a random id (256 bits) in an HttpOnly cookie
 * stands for the access key that signed in. A restart, or another replica, signs everyone out.
 */
export class SessionStore {
  private readonly sessions = new Map<string, Session>();
  private readonly idleMs: number;
  private readonly maxAgeMs: number;
  private readonly maxSessions: number;

  constructor(private readonly opts: SessionOptions) {
    this.idleMs = opts.idleMs ?? 30 * 60_000;
    this.maxAgeMs = opts.maxAgeMs ?? 12 * 3_600_000;
    this.maxSessions = opts.maxSessions ?? 10_000;
  }

  create(principal: string): Session {
    this.sweep();
    while (this.sessions.size >= this.maxSessions) {
      const oldest = this.sessions.keys().next().value;
      if (oldest === undefined) break;
      this.sessions.delete(oldest);
    }
    const now = this.opts.now();
    const session: Session = {
      id: randomBytes(32).toString("base64url"),
      principal,
      createdAt: now,
      expiresAt: Math.min(now + this.idleMs, now + this.maxAgeMs),
    };
    this.sessions.set(session.id, session);
    return session;
  }

  /** The live session named by `id`, its idle deadline moved on; null when unknown or ended. */
  touch(id: string | undefined): Session | null {
    if (id === undefined) return null;
    const session = this.sessions.get(id);
    if (!session) return null;
    const now = this.opts.now();
    if (session.expiresAt <= now) {
      this.sessions.delete(id);
      return null;
    }
    session.expiresAt = Math.min(now + this.idleMs, session.createdAt + this.maxAgeMs);
    return session;
  }

  /** Whether the session is still live, without moving its deadline. */
  alive(session: Session): boolean {
    return this.sessions.get(session.id) === session && session.expiresAt > this.opts.now();
  }

  end(id: string | undefined): void {
    if (id !== undefined) this.sessions.delete(id);
  }

  get size(): number {
    return this.sessions.size;
  }

  /** The Set-Cookie value that hands `session` to the browser. */
  cookieFor(session: Session): string {
    const maxAge = Math.max(1, Math.floor((session.createdAt + this.maxAgeMs - this.opts.now()) / 1000));
    return `${SESSION_COOKIE}=${session.id}; Path=${COOKIE_PATH}; HttpOnly; SameSite=Strict; Max-Age=${maxAge}`;
  }

  private sweep(): void {
    const now = this.opts.now();
    for (const [id, s] of this.sessions) if (s.expiresAt <= now) this.sessions.delete(id);
  }
}

/** The Set-Cookie value that removes the console's cookie. */
export function clearedCookie(): string {
  return `${SESSION_COOKIE}=; Path=${COOKIE_PATH}; HttpOnly; SameSite=Strict; Max-Age=0`;
}

/** The session id a Cookie header carries, if any. */
export function sessionIdFrom(cookieHeader: string | undefined | null): string | undefined {
  if (!cookieHeader) return undefined;
  for (const part of cookieHeader.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === SESSION_COOKIE) {
      const value = part.slice(eq + 1).trim();
      return /^[A-Za-z0-9_-]{43}$/.test(value) ? value : undefined;
    }
  }
  return undefined;
}

/** Compares two secrets in time that does not depend on where they differ (or on their lengths). */
export function sameSecret(given: string, expected: string): boolean {
  const a = createHash("sha256").update(given, "utf8").digest();
  const b = createHash("sha256").update(expected, "utf8").digest();
  return timingSafeEqual(a, b);
}
