/**
 * The Redis audit log's key layout and query indexes. Records are appended by `audit_append`
 * (src/core/redis/audit-append.ts), which the log's own scripts and the lease scripts share.
 *
 * Layout under the deployment's key prefix P (every key carries the same hash tag):
 * - `P:a`               the log: one stream entry per record, id `0-<seq>`, in commit order;
 * - `P:a:seq`           the last seq given out (INCR inside the appending script: one total
 *                       order for every replica, see below);
 * - `P:a:x:<f>:<value>` one index per filter value: streams with the log's ids and no payload
 *                       for b bucket, d decision, o op; sorted sets of seqs (score = member =
 *                       seq) for k key, p lease prefix, l lease, tx transaction. A filtered page
 *                       reads only its own index (the keys of a transaction, `ks`, have none);
 * - `P:a:n:k`, `P:a:n:p` every key and every lease prefix that has an index (sorted by bytes):
 *                       a prefix filter finds its indexes with one range read;
 * - `P:a:last`          the latest record time (ms), and `h` in each record: the latest time of
 *                       the log up to and including that record, which never decreases with seq;
 * - `P:a:lag`           how far (ms) any record's time was behind the latest time before it
 *                       (replicas' clocks differ): a record with time t has h - lag <= t <= h,
 *                       so a time window is a seq range found by binary search on h;
 * - `P:a:archived`, `P:a:seg`  the last seq moved to the archive, and the archive's segments by
 *                       their last seq (redis-archiver.ts).
 */

/** The query filter -> the index name (`P:a:x:<name>:<value>`). */
export const AUDIT_INDEXES = {
  bucket: "b",
  key: "k",
  leaseId: "l",
  decision: "d",
  op: "o",
  transactionId: "tx",
} as const;
