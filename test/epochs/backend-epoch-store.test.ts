import { describe, expect, it } from "vitest";
import { createMemoryBackend } from "../../src/backends/memory/memory-backend.js";
import { createBackendEpochStore } from "../../src/epochs/backend-epoch-store.js";

describe("epochs in the storage backend", () => {
  it("creates each epoch once (conditional create) and finds the highest across pages of a listing", async () => {
    const backend = createMemoryBackend();
    await backend.createBucket("system");
    const epochs = createBackendEpochStore({ backend, bucket: "system" });
    expect(await epochs.highest()).toBe(-1);
    expect(await epochs.create(0)).toBe(true);
    expect(await epochs.create(0)).toBe(false);
    // Replicas racing for the same next epoch: exactly one wins.
    const race = await Promise.all(Array.from({ length: 8 }, () => epochs.create(1)));
    expect(race.filter(Boolean)).toHaveLength(1);
    for (let e = 2; e <= 1_205; e++) expect(await epochs.create(e)).toBe(true);
    expect(await epochs.create(9)).toBe(false);
    // Another replica's view of the same bucket.
    expect(await createBackendEpochStore({ backend, bucket: "system" }).highest()).toBe(1_205);
    // Other objects under the prefix or beside it do not count.
    expect(await createBackendEpochStore({ backend, bucket: "system", prefix: "other/" }).highest()).toBe(-1);
  });

  it("fails loudly when the bucket is missing", async () => {
    const epochs = createBackendEpochStore({ backend: createMemoryBackend(), bucket: "nope" });
    await expect(epochs.highest()).rejects.toMatchObject({ code: "NoSuchBucket" });
    await expect(epochs.create(0)).rejects.toMatchObject({ code: "NoSuchBucket" });
  });
});
