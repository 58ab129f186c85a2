import { fakeClock } from "../../../src/core/clock.js";
import { describeMultipartContract } from "../multipart.contract.js";
import { describeStorageBackendContract } from "../storage-backend.contract.js";
import { s3Fixture } from "./s3-fixture.js";

// Both conformance suites against the S3 backend, on a fencegate gateway (fs backend) as the
// store. reopen: a new S3Backend on the same store. leftovers: blobs no record or part manifest
// references, and multipart uploads left open in the store, read directly from the store.
describeStorageBackendContract("s3", () => s3Fixture());

describeMultipartContract("s3", () => s3Fixture({ clock: fakeClock() }));
