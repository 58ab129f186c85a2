import { fakeClock } from "../../../src/core/clock.js";
import { describeMultipartContract, MULTIPART_MAX_AGE_MS } from "../multipart.contract.js";
import { describeStorageBackendContract } from "../storage-backend.contract.js";
import { azureFixture, useAzurite } from "./azure-fixture.js";

// Both conformance suites against the Azure backend on a private Azurite; reopen is a new
// AzureBackend on the same account, as after a gateway restart.
const azurite = useAzurite();

describeStorageBackendContract("azure (Azurite)", async () => azureFixture(await azurite()));

describeMultipartContract("azure (Azurite)", async () =>
  azureFixture(await azurite(), { clock: fakeClock(), multipartMaxAgeMs: MULTIPART_MAX_AGE_MS }),
);
