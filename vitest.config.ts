import { defineConfig } from "vitest/config";

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // Checks every lease API response the tests receive against src/api/openapi.json.
    setupFiles: ["test/support/openapi-recorder.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Integration suites start processes and servers; two cores, so keep parallelism modest.
    maxWorkers: 2,
  },
});
