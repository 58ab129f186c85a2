/**
 * With the fs backend (one gateway), epochs live in the data directory; an older configuration's
 * leaseStore.epochs still counts the epoch objects it left in a bucket, so the first new epoch is
 * above them. New epochs are files, never objects.
 */
import { readdirSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { legacyObjectFloor, withFloors } from "../../src/epochs/epoch-floors.js";
import { unfencedCommit } from "../../src/fence/commit.js";
import { createFileEpochStore } from "../../src/leases/redis-shared/file-epoch-store.js";
import { fsFixture } from "../backends/fs/fs-fixture.js";
import { verifiedBody } from "../support/bodies.js";
import { tempDir } from "../support/temp.js";

describe("epochs in the data directory, above the epoch objects an older version left", () => {
  it("counts the live legacy objects under the prefix, creates files only", async () => {
    const store = await fsFixture();
    const dir = tempDir("fencegate-fs-epochs-");
    try {
      const { backend } = store;
      await backend.createBucket("old");
      for (const key of ["epochs/0000004", "epochs/0000009", "epochs/notes", "other/0000042"]) {
        await backend.putObject(
          { bucket: "old", key, body: verifiedBody("{}"), metadata: { headers: {}, userMetadata: {} } },
          unfencedCommit(),
        );
      }
      const files = createFileEpochStore(dir.path);
      const epochs = withFloors(files, [legacyObjectFloor(backend, "old", "epochs/")]);
      expect(await files.highest()).toBe(-1);
      expect(await epochs.highest()).toBe(9);
      expect(await epochs.create(10)).toBe(true);
      expect(readdirSync(dir.path)).toEqual(["10"]);
      expect(await epochs.highest()).toBe(10);
      // A bucket that is gone holds no epochs.
      expect(await legacyObjectFloor(backend, "missing", "epochs/")()).toBe(-1);
    } finally {
      dir.cleanup();
      await store.cleanup();
    }
  });
});
