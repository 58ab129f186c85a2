import { luaFiles } from "../../../core/lua-source.js";
import { PRELUDE } from "./prelude.js";

const lua = luaFiles(import.meta.url);

// Scripts that make lease events take an event context after their own arguments (EVENT_ARGS in
// prelude.ts): with one, they append the events' audit records themselves, in the same step, and
// answer {'auditlost'} without changing anything while the audit log cannot take records; the
// last element of their answer is then the seq of the last record appended (0 for none).

/**
 * The lease scripts: each lease-store operation is one of these, run atomically by Redis. Each
 * starts with the prelude (key layout, clock, token floor, overlap lookups). A script that needs
 * a token and finds the floor unknown answers {'epoch'} and changes nothing; the store installs
 * a new epoch and runs it again.
 */

/**
 * ARGV[3..9]: kind ('k' | 'p'), bucket, key or prefix, owner, ttl ms, the new lease's id, the
 * principal ('' = none); ARGV[10..]: the event context. Answers {'granted', lease, expired, seq},
 * {'held', lease}, {'fence', token, intents}, {'epoch'} or {'auditlost'}.
 */
export const ACQUIRE = lua("acquire.lua", { PRELUDE });

/**
 * ARGV[3..4]: lease id, ttl ms; ARGV[5..]: the event context. Only the lease's id reaches it: no
 * resource lookup. Answers {'ok', lease, seq}, {'notfound'}, {'released'}, {'broken'}, {'expired', exp} or
 * {'auditlost'}.
 */
export const RENEW = lua("renew.lua", { PRELUDE });

/**
 * The release script's body, after the prelude and a `wake_ended(l, now)` function: the plain
 * release defines it to do nothing; the shared wait queue's release-and-wake (wait-scripts.ts)
 * tells the waiters first in line in the same script, so that a release is one call.
 */
export const RELEASE_BODY = lua("release-body.lua");

/**
 * ARGV[3]: lease id; ARGV[4..]: the event context. Answers {'released', lease, seq}, {'expired',
 * lease, seq} (it had expired unnoticed: its expiry is what gets reported), {'notfound'}
 * (unknown, or already seen to end) or {'auditlost'}.
 */
export const RELEASE = lua("release.lua", { PRELUDE, RELEASE_BODY });

/**
 * ARGV[3]: the most leases to report at once; ARGV[4..]: the event context. Answers {'ok',
 * leases, seq} or {'auditlost'}.
 */
export const COLLECT_EXPIRED = lua("collect-expired.lua", { PRELUDE });

/**
 * ARGV[3]: the most due leases to look at. Forgets leases that ended at least the retention ago,
 * in token order, each only once no older overlapping lease stays remembered (the rule of
 * selectForgettable in src/leases/embedded/retention.ts): findNewerOverlapping of a remembered
 * lease must never miss its successor.
 */
export const SWEEP = lua("sweep.lua", { PRELUDE });

/** ARGV[3]: lease id. */
export const GET = lua("get.lua", { PRELUDE });

/** ARGV[3..6]: bucket, '1' when the bucket filters, prefix, '1' when the prefix filters. */
export const LIST = lua("list.lua", { PRELUDE });

/** ARGV[3..4]: bucket, key. */
export const FIND_COVERING = lua("find-covering.lua", { PRELUDE });

/** ARGV[3..6]: kind ('k' | 'p'), bucket, key or prefix, token of the lease asked about. */
export const FIND_NEWER = lua("find-newer.lua", { PRELUDE });

/**
 * ARGV[3..4]: the epoch to install, the quarantine (ms) after a loss of data (0 = none). Installs
 * it when it is above the floor's epoch: the counter
 * starts over at epoch × 2^32, above every token of every earlier epoch. An equal or higher
 * epoch already installed in this server's lifetime is kept ('current'); one installed before a
 * restart is not enough ('stale': the caller must create a higher one).
 */
export const INSTALL_EPOCH = lua("install-epoch.lua", { PRELUDE });

/**
 * ARGV[3]: lease id; ARGV[4..]: the event context. An administrator's break: ends the lease
 * (released if active, its expiry reported if it had expired unnoticed) and, in the same step,
 * takes a fresh token and lists the intents under its resource, for the caller to fence at once.
 * Answers {'broken', lease, token, intents, seq}, {'notfound'}, {'epoch'} or {'auditlost'}.
 */
export const BREAK = lua("break.lua", { PRELUDE });
