// Safety scenario 4 on the remote backends: kill -9 of a gateway whose backend is S3 (a second
// fencegate) or Azure (Azurite), under load, restarted several times. Besides everything the fs
// run checks (crash-restart-scenario.ts), the store's collector leaves nothing unreferenced.
import { describeCrashRestart } from "./crash-restart-scenario.js";
import { REMOTE_STORES } from "./remote-stores.js";

for (const remote of REMOTE_STORES) {
  describeCrashRestart(remote.name, { cycles: 2, store: remote.start });
}
