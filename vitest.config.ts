import { defineConfig } from "vitest/config";

/**
 * Two projects, by folder: `slow` holds the suites that start other programs or services (real
 * S3 clients, Redis, Redlock, Azurite, a second fencegate as an S3 store, the CLI's processes,
 * npm pack, the safety scenarios, the hostile corpus, a browser, the README's quick start);
 * `fast` is every other test file. `npm test` runs both, `npm run test:fast` / `test:slow` one.
 * The lease API's OpenAPI check is asked for by the test files that test that API
 * (`checkLeaseApiResponses()`, test/support/openapi-recorder.ts), not loaded everywhere.
 */
export const SLOW = [
  "test/clients/**",
  "test/safety/**",
  "test/backends/s3/**",
  "test/backends/azure/**",
  "test/backends/config-examples.test.ts",
  "test/epochs/**",
  "test/transactions/cas-*.test.ts",
  "test/leases/redis/**",
  "test/leases/redlock/**",
  "test/audit/redis/**",
  "test/cli/**",
  "test/client/package.test.ts",
  "test/client/client-package.test.ts",
  "test/s3-endpoint/hostile/**",
  "test/api/lease-delegates.test.ts",
  "test/console/console-browser.test.ts",
  "test/docs/newcomer.test.ts",
];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    pool: "forks",
    // Integration suites start processes and servers; two cores, so keep parallelism modest.
    maxWorkers: 2,
    projects: [
      {
        extends: true,
        test: {
          name: "fast",
          include: ["test/**/*.test.ts"],
          exclude: SLOW,
          // Test files share their workers (the AWS SDK loads once per worker, not once per
          // file), so a fast test file must not depend on module state another left behind.
          isolate: false,
        },
      },
      {
        extends: true,
        test: { name: "slow", include: SLOW.map((p) => (p.endsWith(".ts") ? p : `${p}/*.test.ts`)) },
      },
    ],
  },
});
