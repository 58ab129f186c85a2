/**
 * Atomic steps shared by co-located components.
 *
 * A storage backend, a lease store and an audit log that keep their state in one place (one
 * embedded SQLite database, or one process's memory) share a TxDomain. The fencing core compares
 * the components' domains: when the backend's is also the lease store's, the lease check runs
 * inside the backend's atomic commit step; when it is also the audit log's, the audit record
 * commits in that same step. Components in different places use commit intents instead
 * (src/fence/commit.ts).
 */
export interface TxDomain {
  /**
   * Runs `step` as one atomic step of this domain: every change it makes happens, or none does.
   * Resolves with its value once the changes are durable; rejects with whatever it threw, and
   * then nothing changed. Steps never interleave. A step must not call `run` itself.
   */
  run<T>(step: () => T): Promise<T>;
}

/**
 * The domain of components kept in one process's memory. A step is a synchronous stretch of
 * JavaScript, so nothing interleaves with it; a step that throws is taken back through the undo
 * actions the components registered with `changed` while it ran.
 */
export class MemoryDomain implements TxDomain {
  private undo: Array<() => void> | null = null;

  run<T>(step: () => T): Promise<T> {
    if (this.undo) return Promise.reject(new Error("MemoryDomain.run called inside a step"));
    const undo: Array<() => void> = [];
    this.undo = undo;
    try {
      return Promise.resolve(step());
    } catch (e) {
      for (let i = undo.length - 1; i >= 0; i--) undo[i]!();
      return Promise.reject(e);
    } finally {
      this.undo = null;
    }
  }

  /**
   * Records how to take back a change just made. Outside a step (a component used on its own)
   * the change simply stands.
   */
  changed(undo: () => void): void {
    this.undo?.push(undo);
  }
}
