import { Database } from "../../../src/embedded/sqlite.js";
import { createEmbeddedLeaseStore } from "../../../src/leases/embedded/embedded-lease-store.js";
import { describeLeaseServiceContract } from "../lease-service.contract.js";
import { describeLeaseStoreContract } from "../lease-store.contract.js";

/**
 * The embedded lease store on an in-memory SQLite database (`:memory:`): the whole lease store
 * contract, as on a database file, except what needs a restart (nothing survives one). The same
 * store could stand in for the memory adapter (issue 21, item 1).
 */

describeLeaseStoreContract("embedded (in-memory SQLite)", async (clock) => {
  const db = new Database(":memory:");
  const store = createEmbeddedLeaseStore({ db, clock });
  return {
    store,
    async cleanup() {
      await store.close();
      if (db.open) db.close();
    },
  };
});

describeLeaseServiceContract("the embedded store on an in-memory SQLite database", async () => {
  const db = new Database(":memory:");
  const store = createEmbeddedLeaseStore({ db });
  return {
    store,
    async cleanup() {
      await store.close();
      if (db.open) db.close();
    },
  };
});
