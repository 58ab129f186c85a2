import { Command, Option } from "commander";
import { VERSION } from "../core/version.js";
import { OUTPUT_MODES } from "./output.js";
import { DEFAULT_TTL_MS, EXIT_CODES_HELP } from "./shared.js";

/**
 * The command tree. Every command's module is imported when it runs, so `--help`, `--version`
 * and the client commands start without the server's modules (nor the SDK, for --help).
 */
export type Opts = Record<string, string | boolean | string[] | undefined>;

const ENV_HELP = `
Client commands read FENCEGATE_ENDPOINT (default http://127.0.0.1:9700), AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY (default: the development pair fencegate / fencegate-secret).
--output is table on a terminal and json when piped, unless given.

${EXIT_CODES_HELP}
`;

export const AUDIT_OPS = [
  "PutObject",
  "CopyObject",
  "CreateMultipartUpload",
  "UploadPart",
  "UploadPartCopy",
  "CompleteMultipartUpload",
  "AbortMultipartUpload",
  "DeleteObject",
  "DeleteObjects",
  "PostObject",
  "LeaseAcquired",
  "LeaseRenewed",
  "LeaseReleased",
  "LeaseExpired",
  "LeaseBroken",
  "LeaseDelegateAdded",
  "LeaseDelegateRemoved",
  "TransactionCommitted",
  "TransactionAborted",
] as const;

const outputOption = () =>
  new Option(
    "-o, --output <format>",
    "table, json or ndjson (default: table on a terminal, json when piped)",
  ).choices(OUTPUT_MODES);

function resourceOptions(cmd: Command): Command {
  return cmd
    .requiredOption("--bucket <bucket>", "the bucket")
    .option("--key <key>", "one key (give --key or --prefix)")
    .option("--prefix <prefix>", "every key under a prefix")
    .option("--ttl-ms <ms>", "lease time to live, renewed before it ends", String(DEFAULT_TTL_MS))
    .option("--wait-ms <ms>", "wait up to this long for an overlapping lease to end", "0")
    .option("--owner <name>", "a name for the holder (default: the access key id)");
}

function auditFilters(cmd: Command): Command {
  return cmd
    .option("--bucket <bucket>", "records of this bucket")
    .option("--key <key>", "records of this key")
    .option("--prefix <prefix>", "records whose key (or lease prefix) starts with this")
    .option("--lease-id <id>", "records of this lease")
    .option("--transaction-id <id>", "records of this fenced transaction (its writes, its commit or abort)")
    .addOption(
      new Option("--decision <decision>", "accepted, rejected or unknown").choices([
        "accepted",
        "rejected",
        "unknown",
      ]),
    )
    .addOption(
      new Option("--op <op>", `an operation or lease event: ${AUDIT_OPS.join(", ")}`).choices(AUDIT_OPS),
    )
    .option("--since <time>", "from this ISO 8601 time (inclusive)")
    .option("--until <time>", "before this ISO 8601 time (exclusive)");
}

/**
 * The actions of a command module, which is imported when one of them runs. Each keeps its
 * exit code (commander's actions return nothing).
 */
function actions<M>(load: () => Promise<M>) {
  return (name: keyof M) =>
    async (...args: unknown[]) => {
      // commander passes the positional arguments, then the options, then the Command itself.
      const run = (await load())[name] as (...args: unknown[]) => Promise<number>;
      const code = await run(...args.slice(0, -1));
      if (code !== -1) process.exitCode = code;
    };
}

const leaseAction = actions(() => import("./lease.js"));
const poolsAction = actions(() => import("./pools.js"));
const auditAction = actions(() => import("./audit.js"));
const transactionAction = actions(() => import("./transaction.js"));

export function buildProgram(): Command {
  const program = new Command("fencegate");
  program
    .description("fencegate: an S3 gateway that fences stale writes with lease tokens")
    .version(`fencegate ${VERSION}`, "-V, --version", "print the version")
    .helpOption("-h, --help", "show help")
    .exitOverride()
    .enablePositionalOptions()
    .showSuggestionAfterError(true)
    .configureOutput({
      writeErr: (s) => process.stderr.write(s),
      outputError: (s, writeErr) => writeErr(`fencegate: ${s.replace(/^error: /, "")}`),
    })
    .addHelpText("after", ENV_HELP)
    .helpCommand("help [command]", "show help for a command");

  program
    .command("version")
    .description("print the version")
    .action(() => {
      process.stdout.write(`fencegate ${VERSION}\n`);
    });

  program
    .command("serve")
    .description("run the gateway")
    .option("--config <file>", "the YAML configuration (else FENCEGATE_CONFIG)")
    .option("--host <host>", "the listen address (else FENCEGATE_HOST, default 127.0.0.1)")
    .option("--port <port>", "the listen port, 0 for any free one (else FENCEGATE_PORT, default 9700)")
    .option("--data-dir <dir>", "embedded state and filesystem backend root (else FENCEGATE_DATA_DIR)")
    .action(actions(() => import("./serve.js"))("serveCommand"));

  const lease = program.command("lease").description("acquire, inspect, renew, release and break leases");
  resourceOptions(
    lease.command("acquire").description("acquire a lease and print it (with its fencing token)"),
  )
    .addOption(outputOption())
    .action(leaseAction("acquire"));
  lease
    .command("list")
    .alias("ls")
    .description("list active leases (owner, token, expiry, waiters)")
    .option("--bucket <bucket>", "leases of this bucket")
    .option("--prefix <prefix>", "leases whose key or prefix starts with this")
    .addOption(outputOption())
    .action(leaseAction("list"));
  lease
    .command("show <lease-id>")
    .description("show one lease")
    .addOption(outputOption())
    .action(leaseAction("show"));
  lease
    .command("renew <lease-id>")
    .description("renew a lease (it keeps its token)")
    .option("--ttl-ms <ms>", "the new time to live (default: the lease's)")
    .addOption(outputOption())
    .action(leaseAction("renew"));
  lease
    .command("release <lease-id>")
    .description("release a lease")
    .addOption(outputOption())
    .action(leaseAction("release"));
  lease
    .command("break <lease-id>")
    .description("break a lease whoever holds it, and fence its holder's later writes (administrators)")
    .addOption(outputOption())
    .action(leaseAction("breakLease"));

  const delegates = lease
    .command("delegates")
    .description("credentials that renew a lease and write with its token, never release it");
  delegates
    .command("add <lease-id>")
    .description("create a delegate of a lease (its secret is shown only now)")
    .addOption(outputOption())
    .action(leaseAction("addDelegate"));
  delegates
    .command("list <lease-id>")
    .alias("ls")
    .description("list a lease's delegates")
    .addOption(outputOption())
    .action(leaseAction("listDelegates"));
  delegates
    .command("revoke <lease-id> <delegate-id>")
    .description("revoke a delegate: its credential stops working at once")
    .addOption(outputOption())
    .action(leaseAction("revokeDelegate"));

  const pools = program
    .command("pools")
    .description("ownership groups: claim a fair share of a pool's groups");
  pools
    .command("claim <pool>")
    .description("join a pool (or heartbeat): renew, hand back and take groups up to a fair share")
    .requiredOption("--owner <name>", "the worker's name")
    .option("--ttl-ms <ms>", "lease time to live of the groups", String(DEFAULT_TTL_MS))
    .addOption(outputOption())
    .action(poolsAction("claim"));
  pools
    .command("leave <pool> <owner>")
    .description("leave a pool: release the worker's groups")
    .addOption(outputOption())
    .action(poolsAction("leave"));

  const audit = auditFilters(
    program.command("audit").description("query the audit log (every write decision and lease event)"),
  )
    .option("--limit <n>", "records per page, 1 to 1000 (default 100)")
    .option("--cursor <cursor>", "the page after this one (nextCursor of a JSON answer)")
    .option("--all", "follow the cursor through every page")
    .option("-f, --follow", "keep printing new records as they are recorded (until interrupted)")
    .option("--interval-ms <ms>", "how often --follow asks for new records", "1000")
    .addOption(outputOption())
    .addHelpText(
      "after",
      "\n--output json prints the API's page ({records, nextCursor}); with --all every record in one page;\n" +
        "with --follow one record per line, as ndjson does.",
    )
    .action(auditAction("audit"));
  auditFilters(
    audit.command("export").description("write a time range of records for other tools (DuckDB, Athena)"),
  )
    .addOption(
      new Option("--format <format>", "ndjson, csv or parquet")
        .choices(["ndjson", "csv", "parquet"])
        .makeOptionMandatory(),
    )
    .option("--out <file>", "write to this file (default: stdout; parquet needs a file or a pipe)")
    .action(auditAction("exportRecords"));

  resourceOptions(
    program
      .command("run")
      .description("hold a lease while CMD runs (like flock(1) for shared storage)")
      .argument("<cmd...>", "the command and its arguments, after --")
      .passThroughOptions(),
  )
    .option(
      "--transaction",
      "run CMD inside a fenced transaction: commit its writes when it exits 0, abort them otherwise",
    )
    .addHelpText(
      "after",
      "\nCMD gets FENCE_TOKEN, FENCE_TOKEN_NUMBER, FENCE_LEASE_ID, FENCE_BUCKET and FENCE_KEY (or FENCE_PREFIX).\n" +
        "The lease is renewed while CMD runs; if it is lost CMD gets SIGTERM (SIGKILL 5 s later) and run\n" +
        "says why: 76 expired, 80 broken by an administrator, 81 released by someone else, 82 superseded\n" +
        "by a newer lease. Otherwise run exits with CMD's exit code.\n" +
        "\n" +
        "With --transaction, CMD also gets FENCE_TRANSACTION, the id of a transaction opened under the lease.\n" +
        "Its writes join it with the header x-fence-transaction (or the metadata fence-transaction, e.g.\n" +
        "aws s3api put-object --metadata fence-token=$FENCE_TOKEN,fence-transaction=$FENCE_TRANSACTION) and\n" +
        "stay invisible to others until CMD exits 0: then they are committed, all visible at once. A refused\n" +
        "commit exits 83 (nothing visible; the reason is printed), a commit whose outcome is unknown 84\n" +
        "(fencegate transaction commit ID commits again and tells). If CMD fails, the transaction is aborted\n" +
        "(nothing visible) and run exits with CMD's exit code.",
    )
    .action(actions(() => import("./run.js"))("runCommand"));

  const transaction = program
    .command("transaction")
    .description("fenced transactions: show, commit or abort one by its id");
  transaction
    .command("show <transaction-id>")
    .description("show a transaction: its state and objects")
    .addOption(outputOption())
    .action(transactionAction("show"));
  transaction
    .command("commit <transaction-id>")
    .description("commit a transaction: every write of it becomes visible at once (again: the same answer)")
    .addOption(outputOption())
    .addHelpText(
      "after",
      "\nExits 83 when the commit is refused (nothing of it is visible), 84 when its outcome is unknown\n" +
        "(committing again is safe and tells).",
    )
    .action(transactionAction("commit"));
  transaction
    .command("abort <transaction-id>")
    .description("abort a transaction: none of its writes becomes visible")
    .addOption(outputOption())
    .action(transactionAction("abort"));

  const backend = program.command("backend").description("check the configured storage backends");
  backend
    .command("verify")
    .description("check that each remote backend honours the conditional writes fencing relies on")
    .option("--config <file>", "the YAML configuration (else FENCEGATE_CONFIG)")
    .option("--bucket <bucket...>", "the buckets to check (default: those routed to it, and verifyBucket)")
    .action(actions(() => import("./backend.js"))("backendCommand"));

  // Every command's help points at the exit codes (listed in full by fencegate --help).
  const everyCommand = (c: Command): Command[] => c.commands.flatMap((sub) => [sub, ...everyCommand(sub)]);
  for (const c of everyCommand(program)) {
    if (c.name() !== "help")
      c.addHelpText("after", "\nExit codes: 0 ok, 1 failure, 2 usage; fencegate --help lists them all.");
  }
  // A group command without its subcommand (or fencegate alone) prints its usage on stderr; exit 2.
  return program;
}
