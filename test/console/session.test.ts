/** Console sessions: random ids, a sliding idle deadline, an absolute one, and the cookie. */
import { describe, expect, it } from "vitest";
import { SessionStore, sameSecret, sessionIdFrom } from "../../src/console/session.js";

describe("console sessions", () => {
  it("end after the idle time without use, and at the absolute limit however busy", () => {
    let now = 1_000_000;
    const store = new SessionStore({ now: () => now, idleMs: 60_000, maxAgeMs: 150_000 });
    const s = store.create("alice");
    expect(s.id).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(store.create("alice").id).not.toBe(s.id);
    now += 59_000;
    expect(store.touch(s.id)?.principal).toBe("alice");
    now += 59_000; // 118 s after sign-in, 59 s after the last use
    expect(store.touch(s.id)?.principal).toBe("alice");
    now += 31_000; // 149 s: still within both
    expect(store.touch(s.id)).not.toBeNull();
    now += 2_000; // 151 s: past the absolute limit although used a moment ago
    expect(store.touch(s.id)).toBeNull();

    const idle = store.create("bob");
    now += 60_001;
    expect(store.touch(idle.id)).toBeNull();
    expect(store.touch(undefined)).toBeNull();
  });

  it("keep at most the configured number, dropping the oldest", () => {
    const store = new SessionStore({ now: () => 0, maxSessions: 2 });
    const a = store.create("a");
    const b = store.create("b");
    const c = store.create("c");
    expect(store.size).toBe(2);
    expect(store.touch(a.id)).toBeNull();
    expect(store.touch(b.id)?.principal).toBe("b");
    expect(store.touch(c.id)?.principal).toBe("c");
  });

  it("read only their own well-formed cookie", () => {
    const id = "A".repeat(43);
    expect(sessionIdFrom(`other=1; fencegate_console=${id}; x=y`)).toBe(id);
    expect(sessionIdFrom("fencegate_console=short")).toBeUndefined();
    expect(sessionIdFrom(`xfencegate_console=${id}`)).toBeUndefined();
    expect(sessionIdFrom(undefined)).toBeUndefined();
  });

  it("compare secrets by value", () => {
    expect(sameSecret("s3cret", "s3cret")).toBe(true);
    expect(sameSecret("s3cret", "s3cret ")).toBe(false);
    expect(sameSecret("", "x")).toBe(false);
  });
});
