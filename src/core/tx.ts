/**
 * Atomic steps shared by co-located components.
 *
 * A storage backend, a lease store and an audit log that keep their state in one place (one
 * embedded SQLite database) share a TxDomain. The fencing core compares the components' domains:
 * when the backend's is also the lease store's, the lease check runs inside the backend's atomic
 * commit step; when it is also the audit log's, the audit record commits in that same step.
 * Components in different places use commit intents instead (src/fence/commit.ts).
 */
export interface TxDomain {
  /**
   * Runs `step` as one atomic step of this domain: every change it makes happens, or none does.
   * Resolves with its value once the changes are durable; rejects with whatever it threw, and
   * then nothing changed. Steps never interleave. A step must not call `run` itself.
   */
  run<T>(step: () => T): Promise<T>;
}
