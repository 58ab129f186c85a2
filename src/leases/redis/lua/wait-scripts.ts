import { luaFiles } from "../../../core/lua-source.js";
import { RELEASE_BODY } from "../../redis-shared/lua/lease-scripts.js";
import { PRELUDE } from "../../redis-shared/lua/prelude.js";

const lua = luaFiles(import.meta.url);

/**
 * The wait queue every gateway replica shares (redis-wait-queue.ts), and pool membership. Each
 * script starts with the lease prelude (KEYS[1] = P, ARGV[1..2] = clock, retention).
 *
 * Key layout under P:
 * - `P:wseq`   the arrival counter: each waiter's ticket takes the next number, in Redis;
 * - `P:wq:<b>` the bucket's waiter tickets by arrival number (a sorted set);
 * - `P:wt:<id>` hash: b, kd ('k' | 'p'), s (key or prefix), dl (deadline: refreshed by its
 *              gateway while it waits; a ticket past it is dropped, so a dead gateway's waiter
 *              is skipped), seq;
 * - `P:wl:<id>` a ticket left before its enqueue was seen (that enqueue's answer was lost, and the
 *              enqueue may still be on its way): an enqueue of it arriving later queues nothing;
 * - `P:pool:<name>` hash: worker → until (ms) (pool membership, every replica's workers).
 * Wake-ups are published on `P:wake` as JSON {m = 'ended' | 'left' | 'held', t = [ticket ids],
 * l = the holder (HGETALL), for 'held'}: the tickets now first in line for the resource concerned.
 */
const WAIT_LIB = lua("wait-lib.lua");

/**
 * ARGV[3..7]: ticket id, kind ('k' | 'p'), bucket, key or prefix, ticket TTL (ms). Takes the
 * next arrival number and queues the ticket. Answers 1 when no earlier live ticket overlaps it
 * (it may try at once), 0 otherwise (and 0, queuing nothing, for a ticket already left).
 */
export const ENQUEUE = lua("enqueue.lua", { PRELUDE, WAIT_LIB });

/** The acquire script without its prelude, run inside a script that has it (ACQUIRE_AS_HEAD). */
const ACQUIRE_BODY = lua("acquire.lua", { PRELUDE: "" });

/**
 * The acquire script (lease-scripts.ts), with the same arguments, for a queued waiter whose
 * ticket key is KEYS[2]: in the same atomic step, nothing is granted unless the ticket is live
 * and no earlier live ticket overlaps it. Answers {'gone'} (the ticket expired: queue again), {'behind'}, or what
 * the acquire script answers; a grant removes the ticket and publishes 'held' for the tickets
 * now first in line.
 */
export const ACQUIRE_AS_HEAD = lua("acquire-as-head.lua", { PRELUDE, WAIT_LIB, ACQUIRE_BODY });

/**
 * ARGV[3]: ticket TTL (ms); ARGV[4..]: ticket ids. Removes them; publishes 'left' for the tickets
 * now first in line. Idempotent: a ticket not queued (yet) is marked left, so that its enqueue,
 * should it still arrive, queues nothing. Answers how many were queued.
 */
export const LEAVE = lua("leave.lua", { PRELUDE, WAIT_LIB });

/**
 * ARGV[3..]: (kind, bucket, key or prefix) of each lease that ended. Publishes 'ended' for the
 * tickets first in line among those overlapping them.
 */
export const ENDED = lua("ended.lua", { PRELUDE, WAIT_LIB });

/** ARGV[3..]: (kind, bucket, key or prefix) triples. Answers the live tickets overlapping each. */
export const COUNT = lua("count.lua", { PRELUDE, WAIT_LIB });

/**
 * ARGV[3]: ticket TTL (ms); ARGV[4..]: ticket ids still waiting. Moves their deadlines on, and
 * answers those of them now first in line (a dead gateway's ticket ahead ran out meanwhile).
 */
export const REFRESH = lua("refresh.lua", { PRELUDE, WAIT_LIB });

/**
 * ARGV[3..5]: pool, worker, TTL (ms). The worker is a member until now + TTL; answers every
 * member whose time has not run out (expired ones are dropped).
 */
export const POOL_JOIN = lua("pool-join.lua", { PRELUDE });

/** ARGV[3]: a notice for every replica (JSON), published on the wake-up channel. */
export const ANNOUNCE = lua("announce.lua", { PRELUDE });

/** ARGV[3..4]: pool, worker. */
export const POOL_LEAVE = lua("pool-leave.lua", { PRELUDE });

/**
 * The release script (lease-scripts.ts), with the same arguments and answers, that also tells
 * the waiters now first in line for the ended lease's resource ('ended', as ENDED does) in the
 * same atomic step: a release is one call to Redis, not a release and a wake-up after it.
 */
export const RELEASE_AND_WAKE = lua("release-and-wake.lua", { PRELUDE, WAIT_LIB, RELEASE_BODY });
