import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fencedCommit } from "../../../src/fence/commit.js";
import { metadataOf, readAll, verifiedBody } from "../../support/bodies.js";
import { ROOT } from "../../support/gateway.js";
import { trackChild } from "../../support/processes.js";
import { waitFor } from "../../support/wait.js";
import { type S3Fixture, s3Fixture } from "./s3-fixture.js";

/**
 * kill -9 of a process holding an S3Backend in the middle of a commit: between storing the blob
 * and writing the record, right after writing the record (before the replaced blob is deleted),
 * and half-way through a body of several parts. Afterwards reads see the old object or the new
 * one, whole, never a mix; and collectGarbage (grace 0) leaves no unreferenced blob and no open
 * store upload behind.
 */

const KEY = "crash/object";
const OLD = "the old object, written before the crash";

describe("kill -9 in the middle of a commit", () => {
  let fx: S3Fixture;
  let bucket: string;

  beforeEach(async () => {
    fx = await s3Fixture();
    bucket = `fg-crash-${randomUUID().slice(0, 8)}`;
    await fx.backend.createBucket(bucket);
    await fx.backend.putObject(
      { bucket, key: KEY, body: verifiedBody(OLD), metadata: metadataOf({ writer: "parent" }) },
      fencedCommit(1),
    );
  });

  afterEach(async () => {
    await fx.cleanup();
  });

  /** Runs the child until it stops at `point`, then SIGKILLs it. */
  const crashAt = async (point: string, bodySize: number) => {
    const child = spawn(process.execPath, ["--import", "tsx", join(import.meta.dirname, "crash-child.ts")], {
      cwd: ROOT,
      env: {
        ...process.env,
        STORE_URL: fx.store.url,
        BUCKET: bucket,
        KEY,
        TOKEN: "2",
        BODY_SIZE: String(bodySize),
        CRASH_AT: point,
      },
      stdio: ["ignore", "pipe", "pipe"],
    });
    trackChild(child);
    let out = "";
    child.stdout.on("data", (d) => {
      out += d;
    });
    child.stderr.on("data", (d) => {
      out += d;
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once("exit", (_, signal) => resolve(signal)),
    );
    await waitFor(() => out.includes(`PAUSED ${point}`) || child.exitCode !== null, {
      what: `the child to reach ${point}`,
      timeoutMs: 30_000,
      details: () => out,
    });
    expect(out).toContain(`PAUSED ${point}`);
    child.kill("SIGKILL");
    expect(await exited).toBe("SIGKILL");
  };

  const content = async () => {
    const got = await fx.backend.getObject(bucket, KEY);
    const body = await readAll(got.body);
    expect(body.length).toBe(got.info.size);
    return { body, info: got.info, hct: await fx.backend.highestToken(bucket, KEY) };
  };

  const collectAll = async () => {
    const report = await fx.current().collectGarbage({ graceMs: 0 });
    expect(await fx.leftovers()).toEqual([]);
    return report;
  };

  it("before the record write: the old object stays whole; the orphaned blob is collected", async () => {
    await crashAt("before-record-put", 1000);
    const after = await content();
    expect(after.body.toString()).toBe(OLD);
    expect(after.info.userMetadata).toEqual({ writer: "parent" });
    expect(after.hct).toBe(1);
    expect(await fx.leftovers()).toHaveLength(1); // the child's blob, referenced by nothing
    expect(await collectAll()).toMatchObject({ blobs: 1 });
    // The key works as before: the crashed write's token is still acceptable, nothing changed.
    await fx.backend.putObject(
      { bucket, key: KEY, body: verifiedBody("after the crash"), metadata: metadataOf() },
      fencedCommit(2),
    );
    expect((await content()).body.toString()).toBe("after the crash");
  });

  it("after the record write: the new object is whole; the replaced blob is collected", async () => {
    await crashAt("after-record-put", 3 * 1024 * 1024 + 5);
    const after = await content();
    expect(after.body.equals(Buffer.alloc(3 * 1024 * 1024 + 5, 0x6e))).toBe(true);
    expect(after.info.userMetadata).toEqual({ writer: "child" });
    expect(after.hct).toBe(2);
    expect(await fx.leftovers()).toHaveLength(1); // the old version's blob
    expect(await collectAll()).toMatchObject({ blobs: 1 });
    expect((await content()).hct).toBe(2);
  });

  it("half-way through a body of several parts: the old object stays; the open upload is aborted", async () => {
    await crashAt("mid-body", 20 * 1024 * 1024);
    const after = await content();
    expect(after.body.toString()).toBe(OLD);
    expect(after.hct).toBe(1);
    expect((await fx.leftovers()).join("\n")).toContain("store upload");
    expect(await collectAll()).toMatchObject({ storeUploads: 1 });
  });
});
