import { describe, expect, it } from "vitest";
import { createEmbeddedAuditLog } from "../../src/audit/embedded/embedded-audit-log.js";
import { createFsBackend } from "../../src/backends/fs/index.js";
import { fakeClock } from "../../src/core/clock.js";
import { makeKeyring, signFencingToken } from "../../src/fence/tokens.js";
import { WriteFencer } from "../../src/fence/write-fencer.js";
import { createEmbeddedLeaseStore } from "../../src/leases/embedded/embedded-lease-store.js";
import { openEmbeddedDb } from "../../src/sqlite/db.js";
import { verifiedBody } from "../support/bodies.js";
import { tempDir } from "../support/gateway.js";

/**
 * The commit path of a fenced PutObject on the embedded default, counted in the statements
 * SQLite runs: the object's row is read twice (the early refusal before the body, and the check
 * inside the commit transaction), each time in one statement joined with its bucket, the lease's
 * row twice (authorization, and the check inside the commit), and the lease check, its audit
 * record and the object row commit in one transaction.
 */
describe("the commit path of a fenced PutObject on the embedded default", () => {
  it("reads the object's row twice, joined with its bucket, and commits once", async () => {
    const dir = tempDir();
    const statements: string[] = [];
    let tracing = false;
    const db = openEmbeddedDb({ dataDir: dir.path, trace: (sql) => tracing && statements.push(sql) });
    try {
      const clock = fakeClock();
      const backend = await createFsBackend({ dataDir: dir.path, db, clock });
      const leases = createEmbeddedLeaseStore({ db, clock });
      const audit = createEmbeddedAuditLog({ db, gatewayId: "gw", clock });
      const keyring = makeKeyring([{ id: "k", secret: Buffer.alloc(32, 3) }]);
      const fencer = new WriteFencer({
        leases,
        audit,
        keyring,
        clock,
        policyFor: () => "required",
        writeState: (b, k) => backend.writeState(b, k),
        highestToken: (b, k) => backend.highestToken(b, k),
        domainOf: () => backend.domain,
      });
      await backend.createBucket("bkt");
      const granted = await leases.tryAcquire({
        resource: { bucket: "bkt", key: "k" },
        ttlMs: 60_000,
        owner: "o",
      });
      if (!granted.granted) throw new Error("no lease");
      const { lease } = granted;
      const tokenString = signFencingToken(
        { leaseId: lease.leaseId, token: lease.token, bucket: "bkt", key: "k" },
        keyring.active,
      );
      const put = () =>
        fencer.write(
          { op: "PutObject", bucket: "bkt", key: "k", tokenString, principal: "p", requestId: "r" },
          (c) =>
            backend.putObject(
              {
                bucket: "bkt",
                key: "k",
                body: verifiedBody("v"),
                metadata: { headers: {}, userMetadata: {} },
              },
              c,
            ),
        );
      await put(); // warm: statements prepared, the row exists
      tracing = true;
      await put();
      tracing = false;
      if (process.env.SHOW_SQL) console.log(statements.join("\n---\n"));

      const objectReads = statements.filter(
        (s) => /FROM fs_objects|JOIN fs_objects/.test(s) && /^\s*SELECT/i.test(s),
      );
      const bucketReads = statements.filter((s) => /FROM fs_buckets/.test(s));
      const commits = statements.filter((s) => /^\s*COMMIT/i.test(s));
      expect(objectReads).toHaveLength(2);
      expect(objectReads.every((s) => /JOIN fs_objects/.test(s))).toBe(true);
      expect(bucketReads).toHaveLength(2); // the same two statements: the row and its bucket in one read
      expect(commits).toHaveLength(1);
      // The lease row too: once for the authorization before the body, once inside the commit.
      expect(statements.filter((s) => /FROM lease_leases/.test(s) && /^\s*SELECT/i.test(s))).toHaveLength(2);
    } finally {
      db.close();
      dir.cleanup();
    }
  });
});
