import { open } from "node:fs/promises";

type DirState = { running?: Promise<void>; next?: Promise<void> };

/**
 * fsync of directories, shared by concurrent callers. A caller needs a sync that *starts* after
 * its rename; one already running may have started before it, so a caller that finds one
 * running waits for the next, and every caller that arrives meanwhile shares that next one.
 * Concurrent writers into one directory thus pay about two directory fsyncs between them,
 * whatever their number.
 */
export class DirSyncer {
  private readonly dirs = new Map<string, DirState>();
  /** Directory fsyncs issued, for tests. */
  issued = 0;

  sync(dir: string): Promise<void> {
    let state = this.dirs.get(dir);
    if (!state) {
      state = {};
      this.dirs.set(dir, state);
    }
    if (!state.running) return this.start(dir, state);
    if (!state.next) {
      const after = state.running.then(
        () => undefined,
        () => undefined,
      );
      state.next = after.then(() => {
        state.next = undefined;
        return this.start(dir, state);
      });
    }
    return state.next;
  }

  private start(dir: string, state: DirState): Promise<void> {
    this.issued++;
    const running = syncDir(dir).finally(() => {
      if (state.running === running) state.running = undefined;
      if (!state.running && !state.next) this.dirs.delete(dir);
    });
    state.running = running;
    return running;
  }
}

export async function syncDir(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
