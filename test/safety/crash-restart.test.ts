// Safety scenario 4 on the fs backend (the scenario: crash-restart-scenario.ts; on the remote
// backends: crash-restart-remote.test.ts). Also: a second gateway on a data directory in use
// refuses to start.
import { join } from "node:path";
import { CreateBucketCommand } from "@aws-sdk/client-s3";
import { afterEach, describe, expect, it } from "vitest";
import { type GatewayProcess, ROOT, s3Client, spawnGateway, tempDir } from "../support/gateway.js";
import { runToExit } from "../support/safety-helpers.js";
import { describeCrashRestart } from "./crash-restart-scenario.js";

describeCrashRestart("fs", { cycles: 4 });

describe("a second gateway on a data directory in use", () => {
  const dir = tempDir("fencegate-safety-lock-");
  let gateway: GatewayProcess | undefined;

  afterEach(async () => {
    await gateway?.kill("SIGKILL");
    dir.cleanup();
  });

  it("refuses to start and says the directory is in use; the first keeps serving", {
    timeout: 90_000,
  }, async () => {
    gateway = await spawnGateway(dir.path);
    const second = await runToExit(
      process.execPath,
      ["--import", "tsx", join(ROOT, "src/cli/main.ts"), "serve"],
      {
        cwd: ROOT,
        env: {
          ...process.env,
          FENCEGATE_PORT: "0",
          FENCEGATE_DATA_DIR: dir.path,
          FENCEGATE_LOG_LEVEL: "warn",
        },
        killOn: /listening on/,
      },
    );
    expect(second.output, "the second gateway started").not.toMatch(/listening on/);
    expect(second.signal, second.output).toBeNull();
    expect(second.code, second.output).not.toBe(0);
    expect(second.output).toMatch(/in use/);
    expect(second.output).toContain(String(gateway.child.pid));

    const health = await fetch(`${gateway.url}/_fence/v1/health`);
    expect(health.status).toBe(200);
    const s3 = s3Client(gateway.url);
    try {
      await s3.send(new CreateBucketCommand({ Bucket: "still-serving" }));
    } finally {
      s3.destroy();
    }
  });
});
