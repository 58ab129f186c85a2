import { luaFiles } from "../../../core/lua-source.js";
import { INTENT_STEPS } from "../../redis-shared/lua/lease-scripts.js";
import { PRELUDE } from "../../redis-shared/lua/prelude.js";

const lua = luaFiles(import.meta.url);

/**
 * The scripts only the Redlock store runs, on each instance of the quorum. They share the
 * one-Redis prelude (key layout, clock, overlap lookups, lease records); what differs is the
 * token: there is no single counter to bump, so the client proposes a token t (one above the
 * highest counter a majority reported) and each instance accepts it only when its own counter
 * is below t, then sets its counter to t. The floor hash `P:floor` keeps `last`, `epoch`, `runid`
 * and `q` (the end of the instance's quarantine) as on one Redis, and `ip` ('1' while the commit
 * intents of an instance that lost its data are not settled: it does not count until they are).
 */

/**
 * No arguments beyond the prelude's. Answers {'ok' | 'unknown', last, epoch, q, runid, ip}:
 * 'unknown' when the floor was never installed in this server's lifetime (a fresh or restarted
 * instance); ip '1' while its commit intents are not settled, '0' otherwise.
 */
export const READ_FLOOR = lua("read-floor.lua", { PRELUDE });

/**
 * Commit intents copied onto an instance that lost its data, from ARGV[from] on: six values each
 * (id, bucket, key, at, lease id, token; the last two '' for an unfenced write), as READ_INTENTS
 * lists them. Filed exactly as beginCommit files them; one already there is written again, the same.
 */
const RESTORE_INTENTS = lua("restore-intents.lua");

/**
 * ARGV[3..5]: epoch, the lowest `last` to install, the end of the quarantine (ms, 0 = none);
 * ARGV[6..]: the commit intents the other instances hold (RESTORE_INTENTS).
 * On an instance whose floor is known (same run): raises `last` and `epoch` to at least these
 * ('current'); its intents stay as they are. Otherwise (fresh or restarted): installs them, the
 * quarantine and the intents in one step ('installed'); after a loss (a quarantine), its intents
 * are marked unsettled ('ip'), so that it counts only once SETTLE_INTENTS has run at the end of
 * the quarantine.
 */
export const INSTALL_FLOOR = lua("install-floor.lua", { PRELUDE, INTENT_STEPS, RESTORE_INTENTS });

/**
 * ARGV[3]: a SCAN cursor ('0' to start), ARGV[4]: how many keys to look at. One page of the commit
 * intents this instance holds: {next cursor ('0' when done), {id, bucket, key, at, lease id, token,
 * ...}} (lease id and token '' for an unfenced write). A page is consistent; pages are not (an
 * intent recorded or forgotten meanwhile may or may not be listed).
 */
export const READ_INTENTS = lua("read-intents.lua", { PRELUDE });

/**
 * ARGV[3..]: the commit intents the other instances hold (RESTORE_INTENTS), read at or after the
 * end of this instance's quarantine. Copies them here and marks its intents settled: from now on
 * it counts. Answers {'settled'} (also when it already was: nothing is copied then), {'early', q}
 * while the quarantine runs, or {'unknown'} when its floor is unknown (it lost its data again).
 */
export const SETTLE_INTENTS = lua("settle-intents.lua", { PRELUDE, INTENT_STEPS, RESTORE_INTENTS });

/** Sets the counter to t when t is above it; nil when the floor is unknown, false when it is not below t. */
const TAKE_PROPOSED = lua("take-proposed.lua");

/**
 * ARGV[3..10]: kind ('k' | 'p'), bucket, key or prefix, owner, ttl ms, the new lease's id, the
 * principal ('' = none), the proposed token t. Answers {'granted', lease, expired},
 * {'held', lease}, {'fence', intents} (the counter is now t), {'stale', last} (the counter is
 * at or above t: another grant took it) or {'epoch'} (the floor is unknown).
 */
export const ACQUIRE_AT = lua("acquire-at.lua", { PRELUDE, TAKE_PROPOSED });

/**
 * ARGV[3]: lease id. Forgets a lease this instance granted in an acquire that did not win a
 * majority: out of every index, its record deleted, as if never granted here (the counter stays).
 */
export const DISCARD = lua("discard.lua", { PRELUDE });

/**
 * ARGV[3..4]: lease id, proposed token t. An administrator's break (BREAK on one Redis) with a
 * proposed token. Answers {'broken', lease, intents}, {'notfound'} (unknown or ended here; the
 * token taken all the same), {'stale', last} or {'epoch'}.
 */
export const BREAK_AT = lua("break-at.lua", { PRELUDE, TAKE_PROPOSED });

/**
 * ARGV[3..9]: intent id, kind ('fenced' | 'unfenced'), bucket, key, lease id, token, ceiling.
 * BEGIN_COMMIT of one Redis, except that an unfenced write's ceiling is the client's (the
 * highest counter of a majority) and the instance's counter is raised to it, so that any later
 * token read from a majority is above it. Answers {'ok', last}, {'epoch'} or {'refused', now, lease,
 * newer, covering}.
 */
export const BEGIN_COMMIT_AT = lua("begin-commit-at.lua", { PRELUDE, INTENT_STEPS });

/**
 * ARGV[3..]: a lease's fields (field, value, ...), as a majority holds it after a renewal.
 * Restores the lease on an instance that does not know it (one that lost its data and came
 * back): filed as open unless it is ended, so that this instance too stands in the way of an
 * overlapping grant. Answers 'restored', 'known' (it has the lease already) or 'conflict' (an
 * overlapping active lease is there: nothing changes).
 */
export const RESTORE = lua("restore.lua", { PRELUDE });
