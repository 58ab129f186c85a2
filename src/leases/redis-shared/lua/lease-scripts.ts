import { luaFiles } from "../../../core/lua-source.js";
import { PRELUDE } from "./prelude.js";

const lua = luaFiles(import.meta.url);

// Scripts that make lease events take an event context after their own arguments (EVENT_ARGS in
// prelude.ts): with one, they append the events' audit records themselves, in the same step, and
// answer {'auditlost'} without changing anything while the audit log cannot take records; the
// last element of their answer is then the seq of the last record appended (0 for none).

/**
 * The lease scripts one Redis (src/leases/redis) and each Redlock instance (src/leases/redlock)
 * both run as they are: each starts with the prelude (key layout, clock, token floor, overlap
 * lookups). The scripts that take a token differ between the two and live with each store.
 */

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
 * The two halves of a begin-commit script that one Redis and each Redlock instance share:
 * `intent_refusal` answers the refusal of a write (nil when it may go on: no active lease covers
 * an unfenced write's key, a fenced write's lease is current), `file_intent` records the intent by
 * object, so that a grant finds the intents under its resource without reading others.
 * `put_intent` is the record itself, also used by the Redlock repair to copy intents onto an
 * instance that lost them.
 */
export const INTENT_STEPS = lua("intent-steps.lua");

/** ARGV[3..5]: kind ('k' | 'p'), bucket, key or prefix. Answers (id, bucket, key) triples. */
export const INTENTS_UNDER = lua("intents-under.lua", { PRELUDE });

/** ARGV[3..]: intent ids; unknown ones are ignored (endCommit and clearIntents alike). */
export const FORGET_INTENTS = lua("forget-intents.lua", { PRELUDE });

/**
 * A lease's delegates (LeaseStore.addDelegate and friends): `P:dlg` every delegate by creation
 * order (a sequence from `P:dlgseq`), member `<lease id> <delegate id>`; `P:dlgl:<lease id>`
 * one lease's delegates, same order; `P:dlgr` the records (JSON) by member. Retention's sweep
 * forgets them with their lease (SWEEP calls forget_delegates).
 */

/** ARGV[3..6]: lease id, delegate id, created by, created at. Answers 'ok' or 'notfound'. */
export const ADD_DELEGATE = lua("add-delegate.lua", { PRELUDE });

/** ARGV[3]: lease id, '' for every lease. Answers the records (JSON) in creation order. */
export const LIST_DELEGATES = lua("list-delegates.lua", { PRELUDE });

/** ARGV[3..4]: lease id, delegate id. Answers 1 when removed, 0 when the lease had no such delegate. */
export const REMOVE_DELEGATE = lua("remove-delegate.lua", { PRELUDE });
