import type { ChildProcess } from "node:child_process";

/** Children still running when this test process exits are killed with it. */
const liveChildren = new Set<ChildProcess>();
let hooked = false;

/**
 * Kills the child (SIGKILL) if it is still running when this test process exits: tests stop
 * their servers, but a test that failed half-way may not. Tracked until it exits.
 */
export function trackChild(child: ChildProcess): void {
  if (!hooked) {
    hooked = true;
    process.once("exit", () => {
      for (const c of liveChildren) c.kill("SIGKILL");
    });
  }
  liveChildren.add(child);
  child.once("exit", () => liveChildren.delete(child));
}

/** Whether the child has exited (or was killed by a signal). */
export const hasExited = (child: ChildProcess): boolean =>
  child.exitCode !== null || child.signalCode !== null;
