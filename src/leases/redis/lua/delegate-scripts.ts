import { PRELUDE } from "./prelude.js";

/**
 * A lease's delegates (LeaseStore.addDelegate and friends): `P:dlg` every delegate by creation
 * order (a sequence from `P:dlgseq`), member `<lease id> <delegate id>`; `P:dlgl:<lease id>`
 * one lease's delegates, same order; `P:dlgr` the records (JSON) by member. Retention's sweep
 * forgets them with their lease (SWEEP calls forget_delegates).
 */

/** ARGV[3..6]: lease id, delegate id, created by, created at. Answers 'ok' or 'notfound'. */
export const ADD_DELEGATE = `${PRELUDE}
local lid, did = ARGV[3], ARGV[4]
-- Only a lease the store still remembers can have delegates.
if redis.call('EXISTS', LEASE .. lid) == 0 then return 'notfound' end
local seq = redis.call('INCR', P .. ':dlgseq')
local member = lid .. ' ' .. did
redis.call('ZADD', P .. ':dlg', seq, member)
redis.call('ZADD', P .. ':dlgl:' .. lid, seq, did)
redis.call('HSET', P .. ':dlgr', member, cjson.encode({delegateId = did, leaseId = lid, createdBy = ARGV[5], createdAt = ARGV[6]}))
return 'ok'
`;

/** ARGV[3]: lease id, '' for every lease. Answers the records (JSON) in creation order. */
export const LIST_DELEGATES = `${PRELUDE}
local members
if ARGV[3] ~= '' then
  members = {}
  for i, did in ipairs(redis.call('ZRANGE', P .. ':dlgl:' .. ARGV[3], 0, -1)) do members[i] = ARGV[3] .. ' ' .. did end
else
  members = redis.call('ZRANGE', P .. ':dlg', 0, -1)
end
if #members == 0 then return {} end
return redis.call('HMGET', P .. ':dlgr', unpack(members))
`;

/** ARGV[3..4]: lease id, delegate id. Answers 1 when removed, 0 when the lease had no such delegate. */
export const REMOVE_DELEGATE = `${PRELUDE}
local lid, did = ARGV[3], ARGV[4]
if redis.call('ZREM', P .. ':dlgl:' .. lid, did) == 0 then return 0 end
redis.call('ZREM', P .. ':dlg', lid .. ' ' .. did)
redis.call('HDEL', P .. ':dlgr', lid .. ' ' .. did)
return 1
`;
