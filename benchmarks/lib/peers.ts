import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { accessSync, constants, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Etcd3 } from "etcd3";
import { freePort, type RedisServer, startRedis } from "../../test/support/redis.js";
import { ROOT, type Server } from "./servers.js";

/**
 * What a user who needs a durable lease with a fencing token would pick instead of fencegate,
 * each in its own process on free ports with a temporary directory, durable before answering:
 * etcd (Debian's etcd-server, default durability: its WAL is fsync'ed before a write answers)
 * and Redis with an append-only file fsync'ed on every write (`appendfsync always`).
 */

export const ETCD = "/usr/bin/etcd";

/** Installs etcd-server (and redis-server) with apt when missing: scripts/bench-setup.sh. */
export function ensurePeers(): void {
  try {
    accessSync(ETCD, constants.X_OK);
    accessSync("/usr/bin/redis-server", constants.X_OK);
  } catch {
    execFileSync("bash", [join(ROOT, "scripts/bench-setup.sh")], { stdio: "inherit" });
  }
}

export type EtcdServer = Server & { client: Etcd3 };

/** An etcd of its own: one member, free client and peer ports, a temporary data directory. */
export async function startEtcd(): Promise<EtcdServer> {
  ensurePeers();
  const dir = mkdtempSync(join(tmpdir(), "fencegate-bench-etcd-"));
  const [clientPort, peerPort] = [await freePort(), await freePort()];
  const client = `http://127.0.0.1:${clientPort}`;
  const peer = `http://127.0.0.1:${peerPort}`;
  const child: ChildProcess = spawn(
    ETCD,
    [
      "--name",
      "bench",
      "--data-dir",
      join(dir, "data"),
      "--listen-client-urls",
      client,
      "--advertise-client-urls",
      client,
      "--listen-peer-urls",
      peer,
      "--initial-advertise-peer-urls",
      peer,
      "--initial-cluster",
      `bench=${peer}`,
      "--logger",
      "zap",
      "--log-level",
      "warn",
    ],
    { cwd: dir, stdio: ["ignore", "pipe", "pipe"] },
  );
  let out = "";
  child.stdout!.on("data", (d) => {
    out += d;
  });
  child.stderr!.on("data", (d) => {
    out += d;
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  const etcd = new Etcd3({ hosts: client });
  const stop = async () => {
    etcd.close();
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const force = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(force);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new Error(`etcd exited before it answered:\n${out}`);
    }
    try {
      await etcd.get("bench-ready").string();
      break;
    } catch (e) {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`etcd did not answer within 30 s (${(e as Error).message}):\n${out}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { name: "etcd", url: client, pid: child.pid!, client: etcd, stop };
}

/**
 * One etcd lease pair as a user of etcd would take a fenced lock: grant a lease, a transaction
 * that creates the key (only if absent) attached to the lease — its revision is the fencing
 * token — then revoke the lease, which deletes the key.
 */
export async function etcdPair(etcd: Etcd3, key: string): Promise<void> {
  const lease = etcd.lease(30, { autoKeepAlive: false });
  const id = await lease.grant();
  const txn = await etcd.if(key, "Create", "==", 0).then(etcd.put(key).value("bench").lease(id)).commit();
  if (!txn.succeeded) throw new Error(`etcd: ${key} still held`);
  if (!(Number(txn.header.revision) > 0)) throw new Error("etcd: no revision");
  await lease.revoke();
}

/** A Redis of its own (free port, temporary directory) with `appendfsync always`. */
export async function startDurableRedis(): Promise<RedisServer> {
  ensurePeers();
  return startRedis({ persistence: "aof" });
}

/** Acquire: SET NX PX the owner, and INCR the key's fence counter (the token), in one script. */
export const REDIS_ACQUIRE = `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return false`;

/** Release: delete the key only if it still holds this owner's value. */
export const REDIS_RELEASE = `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`;
