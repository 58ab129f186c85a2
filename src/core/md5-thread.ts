import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";

/**
 * MD5 of large bodies on worker threads. A body's ETag is its MD5, and MD5 runs at about
 * 600 MB/s: hashed on the event loop, a stream of a few hundred MB/s keeps the one JavaScript
 * thread busy for a third of its time. Here the event loop only copies the bytes into 256 KiB
 * batch buffers, which are transferred to a worker (not cloned), hashed there, and transferred
 * back to be filled again (a worker that allocates nothing would free them only at a rare GC).
 *
 * Memory stays bounded: a body has at most MAX_IN_FLIGHT bytes sent and not yet hashed; beyond
 * that `update` answers false and the caller awaits `drained()` before reading more.
 *
 * The worker is evaluated from source (no file of its own), so it runs the same under a
 * TypeScript loader, from the compiled package, and inside a test runner.
 */

const BATCH_BYTES = 256 * 1024;
const MAX_IN_FLIGHT = 1024 * 1024;

const WORKER_SOURCE = `
const { parentPort } = require("node:worker_threads");
const { createHash } = require("node:crypto");
const hashes = new Map();
parentPort.on("message", (m) => {
  let hash = hashes.get(m.id);
  if (m.cancel) {
    hashes.delete(m.id);
    return;
  }
  if (!hash) {
    hash = createHash("md5");
    hashes.set(m.id, hash);
  }
  if (m.bytes) {
    hash.update(new Uint8Array(m.bytes, 0, m.length));
    // The buffer goes back to be filled again: memory the worker would free only at its next GC.
    parentPort.postMessage({ id: m.id, hashed: m.length, bytes: m.bytes }, [m.bytes]);
  }
  if (m.end) {
    hashes.delete(m.id);
    parentPort.postMessage({ id: m.id, hex: hash.digest("hex") });
  }
});
`;

type Reply = { id: number; hashed?: number; bytes?: ArrayBuffer; hex?: string };

/** Batch buffers back from the workers, for the next batches (bounded). */
const spare: ArrayBuffer[] = [];
const MAX_SPARE = 64;

function batchBuffer(): Uint8Array {
  return new Uint8Array(spare.pop() ?? new ArrayBuffer(BATCH_BYTES));
}

/** One worker and the hashes it serves. */
class HashThread {
  private readonly worker: Worker;
  readonly open = new Map<number, Md5Thread>();
  failed: Error | null = null;

  constructor() {
    this.worker = new Worker(WORKER_SOURCE, { eval: true });
    this.worker.on("message", (reply: Reply) => {
      if (reply.bytes && spare.length < MAX_SPARE) spare.push(reply.bytes);
      this.open.get(reply.id)?.onReply(reply);
    });
    const fail = (error: Error) => {
      this.failed ??= error;
      for (const hash of this.open.values()) hash.onFailure(error);
      this.open.clear();
      this.worker.unref();
    };
    this.worker.on("error", fail);
    this.worker.on("exit", (code) => fail(new Error(`the MD5 worker thread exited (${code})`)));
    // An idle worker never keeps the process alive (unref after the listeners: adding one refs
    // it again); one with hashes open does, like any I/O in flight.
    this.worker.unref();
  }

  add(id: number, hash: Md5Thread): void {
    if (this.open.size === 0) this.worker.ref();
    this.open.set(id, hash);
  }

  /** False when the hash was no longer open. */
  remove(id: number): boolean {
    if (!this.open.delete(id)) return false;
    if (this.open.size === 0) this.worker.unref();
    return true;
  }

  post(message: { id: number; bytes?: ArrayBuffer; length?: number; end?: true; cancel?: true }): void {
    this.worker.postMessage(message, message.bytes ? [message.bytes] : []);
  }
}

let threads: HashThread[] = [];
let nextThread = 0;
let nextId = 1;

function thread(): HashThread {
  threads = threads.filter((t) => t.failed === null);
  if (threads.length === 0) {
    const count = Math.max(1, Math.min(4, availableParallelism()));
    threads = Array.from({ length: count }, () => new HashThread());
  }
  nextThread = (nextThread + 1) % threads.length;
  return threads[nextThread]!;
}

/** An MD5 computed on a worker thread; feed it with `update`, end it with `digest` or `cancel`. */
export class Md5Thread {
  private readonly id = nextId++;
  private readonly thread = thread();
  /** The batch being filled, and how much of it is. */
  private batch: Uint8Array | null = null;
  private filled = 0;
  private inFlight = 0;
  private waiting: { resolve: () => void; reject: (e: Error) => void } | null = null;
  private result: { resolve: (hex: string) => void; reject: (e: Error) => void } | null = null;
  private failure: Error | null = null;

  constructor() {
    this.thread.add(this.id, this);
  }

  /** Takes the bytes (copied before it returns); false when the caller should await drained(). */
  update(chunk: Uint8Array): boolean {
    for (let at = 0; at < chunk.length; ) {
      this.batch ??= batchBuffer();
      const n = Math.min(chunk.length - at, BATCH_BYTES - this.filled);
      this.batch.set(chunk.subarray(at, at + n), this.filled);
      this.filled += n;
      at += n;
      if (this.filled === BATCH_BYTES) this.send();
    }
    return this.inFlight < MAX_IN_FLIGHT;
  }

  /** Resolves once few enough bytes wait for the worker. */
  drained(): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.inFlight < MAX_IN_FLIGHT) return Promise.resolve();
    return new Promise((resolve, reject) => {
      this.waiting = { resolve, reject };
    });
  }

  /** The MD5 of every byte given, lower-case hex. */
  digest(): Promise<string> {
    if (this.failure) return Promise.reject(this.failure);
    this.send();
    return new Promise((resolve, reject) => {
      this.result = { resolve, reject };
      this.thread.post({ id: this.id, end: true });
    });
  }

  /** The body failed: the worker forgets it. */
  cancel(): void {
    if (!this.thread.remove(this.id)) return;
    this.batch = null;
    this.filled = 0;
    this.thread.post({ id: this.id, cancel: true });
  }

  private send(): void {
    if (this.batch === null || this.filled === 0) return;
    const bytes = this.batch.buffer as ArrayBuffer;
    const length = this.filled;
    this.inFlight += length;
    this.batch = null;
    this.filled = 0;
    this.thread.post({ id: this.id, bytes, length });
  }

  /** @internal */
  onReply(reply: Reply): void {
    if (reply.hashed !== undefined) {
      this.inFlight -= reply.hashed;
      if (this.waiting && this.inFlight < MAX_IN_FLIGHT) {
        const { resolve } = this.waiting;
        this.waiting = null;
        resolve();
      }
    }
    if (reply.hex !== undefined) {
      this.thread.remove(this.id);
      this.result?.resolve(reply.hex);
    }
  }

  /** @internal */
  onFailure(error: Error): void {
    this.failure = error;
    this.waiting?.reject(error);
    this.result?.reject(error);
    this.waiting = null;
    this.result = null;
  }
}
