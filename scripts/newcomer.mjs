#!/usr/bin/env node
// The newcomer's path, as the README tells it: a fresh copy of the repository, the quick start's
// first block (its last line, the gateway, runs in the background), then the second block's
// lines one after the other in one shell. Every line must succeed except those the README marks
// "# refused: CODE", which must fail naming CODE; and the block's audit command must list the
// refused stale write.
//
//   node scripts/newcomer.mjs                      # runs `npm ci` in the copy, as a newcomer does
//   node scripts/newcomer.mjs --reuse-node-modules # links this checkout's node_modules instead
//   node scripts/newcomer.mjs --keep               # leaves the copy and each line's output behind
//
// The one change made to the README's lines: port 9700 becomes a free port, so that the run does
// not depend on what else listens on the machine. Exit code 0 when the path works, 1 otherwise.
import { execFileSync, spawn } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";

const ROOT = resolve(import.meta.dirname, "..");
const args = new Set(process.argv.slice(2));
const reuse = args.has("--reuse-node-modules");
const keep = args.has("--keep");
for (const a of args) {
  if (!["--reuse-node-modules", "--keep"].includes(a)) {
    console.error(`newcomer: unknown option ${a}`);
    process.exit(2);
  }
}

/** The fenced `sh` blocks of the README's "## Quick start" section, each as its logical lines. */
function quickStartBlocks(readme) {
  const start = readme.indexOf("\n## Quick start\n");
  if (start < 0) throw new Error('README.md has no "## Quick start" section');
  const rest = readme.slice(start + 1);
  const end = rest.indexOf("\n## ", 3);
  const section = end < 0 ? rest : rest.slice(0, end);
  return [...section.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) =>
    m[1]
      .replace(/\\\n\s*/g, " ")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "" && !l.startsWith("#")),
  );
}

function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

async function waitForHealth(url, gateway, ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (gateway.exitCode !== null) throw new Error(`the gateway exited with ${gateway.exitCode}`);
    try {
      if ((await fetch(url)).status === 200) return;
    } catch {}
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`no answer from ${url} within ${ms} ms`);
}

/** The files a fresh clone has (tracked ones, and new ones git does not ignore), copied. */
function copyRepository(to) {
  const files = execFileSync("git", ["ls-files", "-z", "--cached", "--others", "--exclude-standard"], {
    cwd: ROOT,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  })
    .split("\0")
    .filter((f) => f && f !== "node_modules" && !f.startsWith("node_modules/") && !f.startsWith("data/"));
  for (const f of files) {
    if (!existsSync(join(ROOT, f))) continue; // deleted in the working tree
    mkdirSync(dirname(join(to, f)), { recursive: true });
    cpSync(join(ROOT, f), join(to, f), { verbatimSymlinks: true });
  }
  return files.length;
}

/** Environment of a new terminal: none of this shell's S3 or gateway settings. */
function freshEnv(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (!/^(AWS_|FENCEGATE_|FENCE_)/.test(k)) env[k] = v;
  }
  return { ...env, ...extra };
}

function run(cmd, cwd, env) {
  execFileSync("bash", ["-c", cmd], { cwd, env, stdio: ["ignore", "inherit", "inherit"] });
}

const REFUSED = /#\s*refused:\s*(\w+)/;

async function main() {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const blocks = quickStartBlocks(readme);
  if (blocks.length < 2) throw new Error(`the quick start has ${blocks.length} sh blocks, expected 2`);
  const [server, client] = blocks;
  const work = mkdtempSync(join(tmpdir(), "fencegate-newcomer-"));
  const repo = join(work, "fencegate");
  const out = join(work, "out");
  mkdirSync(out, { recursive: true });
  let gateway;
  const failures = [];
  try {
    const nodeOnPath = execFileSync("node", ["--version"], { encoding: "utf8" }).trim();
    console.log(`newcomer: node on PATH ${nodeOnPath} (this script runs on ${process.version})`);
    console.log(`newcomer: copying the repository (${copyRepository(repo)} files) to ${repo}`);
    const port = await freePort();
    const env = freshEnv({ FENCEGATE_PORT: String(port) });
    for (const line of server.slice(0, -1)) {
      if (reuse && line === "npm ci") {
        console.log("newcomer: $ npm ci   (--reuse-node-modules: this checkout's node_modules linked instead)");
        symlinkSync(join(ROOT, "node_modules"), join(repo, "node_modules"), "dir");
        continue;
      }
      console.log(`newcomer: $ ${line}`);
      const started = Date.now();
      run(line, repo, env);
      console.log(`newcomer: (${((Date.now() - started) / 1000).toFixed(1)} s)`);
    }
    const start = server.at(-1);
    console.log(`newcomer: $ ${start} &   (FENCEGATE_PORT=${port} in place of 9700)`);
    gateway = spawn("bash", ["-c", `exec ${start}`], {
      cwd: repo,
      env,
      detached: true,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let gatewayLog = "";
    gateway.stdout.on("data", (d) => (gatewayLog += d));
    gateway.stderr.on("data", (d) => (gatewayLog += d));
    try {
      await waitForHealth(`http://127.0.0.1:${port}/_fence/v1/health`, gateway, 120_000);
    } catch (e) {
      throw new Error(`${e.message}\n--- gateway output ---\n${gatewayLog}`);
    }

    const lines = client.map((l) => l.replaceAll("127.0.0.1:9700", `127.0.0.1:${port}`));
    const script = lines
      .map((l, i) => `{ ${l}\n} >${JSON.stringify(join(out, `${i}.out`))} 2>&1\necho $? >${JSON.stringify(join(out, `${i}.rc`))}`)
      .join("\n");
    writeFileSync(join(out, "quick-start.sh"), `${script}\n`);
    const clientEnv = freshEnv({});
    delete clientEnv.FENCEGATE_PORT;
    execFileSync("bash", ["--noprofile", "--norc", join(out, "quick-start.sh")], {
      cwd: repo,
      env: clientEnv,
      stdio: "inherit",
      timeout: 300_000,
    });

    let refusedSeen = 0;
    let auditChecked = false;
    lines.forEach((line, i) => {
      const rc = Number(readFileSync(join(out, `${i}.rc`), "utf8"));
      const output = readFileSync(join(out, `${i}.out`), "utf8");
      const refused = REFUSED.exec(line);
      console.log(`newcomer: $ ${line}\n  exit ${rc}${output.trim() ? `\n  ${output.trim().split("\n").slice(-3).join("\n  ")}` : ""}`);
      if (refused) {
        refusedSeen++;
        if (rc === 0) failures.push(`succeeded although the README says it is refused: ${line}`);
        if (!output.includes(refused[1])) failures.push(`its output does not name ${refused[1]}: ${line}`);
      } else if (rc !== 0) {
        failures.push(`exit ${rc}: ${line}\n${output}`);
      }
      if (/\bfencegate audit\b/.test(line) && rc === 0) {
        const { records } = JSON.parse(output);
        const stale = records.filter((r) => r.decision === "rejected" && r.reason === "StaleFencingToken");
        const accepted = records.filter((r) => r.decision === "accepted" && r.op === "PutObject");
        if (stale.length === 0) failures.push(`the audit log lists no refused stale write: ${output}`);
        if (accepted.length === 0) failures.push(`the audit log lists no accepted write: ${output}`);
        if (stale.length && accepted.length && !(stale[0].token < accepted[0].token)) {
          failures.push("the refused write's token is not below the accepted one's");
        }
        auditChecked = true;
      }
    });
    if (refusedSeen === 0) failures.push('the quick start has no line marked "# refused: CODE"');
    if (!auditChecked) failures.push("the quick start has no `fencegate audit` line that ran");
  } finally {
    if (gateway && gateway.exitCode === null) {
      try {
        process.kill(-gateway.pid, "SIGTERM");
      } catch {}
      await new Promise((r) => {
        const t = setTimeout(() => {
          try {
            process.kill(-gateway.pid, "SIGKILL");
          } catch {}
          r();
        }, 10_000);
        gateway.on("exit", () => {
          clearTimeout(t);
          r();
        });
      });
    }
    if (keep) console.log(`newcomer: kept ${work}`);
    else rmSync(work, { recursive: true, force: true });
  }
  if (failures.length) {
    console.error(`newcomer: FAILED\n- ${failures.join("\n- ")}`);
    process.exit(1);
  }
  console.log("newcomer: ok — the quick start runs as written; the stale write was refused and audited");
}

main().catch((e) => {
  console.error(`newcomer: FAILED: ${e.stack ?? e}`);
  process.exit(1);
});
