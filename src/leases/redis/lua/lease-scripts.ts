import { luaFiles } from "../../../core/lua-source.js";
import { INTENT_STEPS } from "../../redis-shared/lua/lease-scripts.js";
import { PRELUDE } from "../../redis-shared/lua/prelude.js";

const lua = luaFiles(import.meta.url);

/**
 * The scripts of one Redis that take a token from its counter (the others: ../../redis-shared/lua).
 * Finding the floor unknown, one answers {'epoch'} and changes nothing; the store installs a new
 * epoch and runs it again.
 */

/**
 * ARGV[3..9]: kind ('k' | 'p'), bucket, key or prefix, owner, ttl ms, the new lease's id, the
 * principal ('' = none); ARGV[10..]: the event context. Answers {'granted', lease, expired, seq},
 * {'held', lease}, {'fence', token, intents}, {'epoch'} or {'auditlost'}.
 */
export const ACQUIRE = lua("acquire.lua", { PRELUDE });

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

/**
 * Commit intents (src/fence/commit.ts): the check that a write's lease is current and the record
 * of the write, in one script, so that no grant can land between them.
 *
 * ARGV[3..8]: intent id, kind ('fenced' | 'unfenced'), bucket, key, lease id, token.
 * Answers {'ok', ceiling}, {'epoch'} while the floor is unknown, or
 * {'refused', now, lease, newer, covering} with the facts the refusal rests on (empty when
 * absent), from which the store builds the same error as every other store (judgeIntent).
 */
export const BEGIN_COMMIT = lua("begin-commit.lua", { PRELUDE, INTENT_STEPS });
