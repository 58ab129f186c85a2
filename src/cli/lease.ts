import { CliError, clientFromEnv, EXIT, intOption, parse, printJson, withApiErrors } from "./shared.js";

export const DEFAULT_TTL_MS = 30_000;

export async function leaseCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  const client = clientFromEnv();
  switch (sub) {
    case "acquire": {
      const { values } = parse(rest, {
        bucket: { type: "string" },
        key: { type: "string" },
        prefix: { type: "string" },
        "ttl-ms": { type: "string" },
        "wait-ms": { type: "string" },
        owner: { type: "string" },
      });
      if (!values.bucket) throw new CliError("--bucket is required", EXIT.usage);
      if ((values.key === undefined) === (values.prefix === undefined)) {
        throw new CliError("give exactly one of --key or --prefix", EXIT.usage);
      }
      const lease = await withApiErrors(() =>
        client.acquire({
          bucket: values.bucket!,
          ...(values.key !== undefined ? { key: values.key } : { prefix: values.prefix }),
          ttlMs: intOption("ttl-ms", values["ttl-ms"], DEFAULT_TTL_MS)!,
          waitMs: intOption("wait-ms", values["wait-ms"], 0),
          owner: values.owner,
        }),
      );
      printJson(lease);
      return 0;
    }
    case "renew": {
      const { values, positionals } = parse(rest, { "ttl-ms": { type: "string" } }, true);
      const id = onlyId(positionals);
      printJson(await withApiErrors(() => client.renew(id, intOption("ttl-ms", values["ttl-ms"]))));
      return 0;
    }
    case "release": {
      const { positionals } = parse(rest, {}, true);
      const id = onlyId(positionals);
      await withApiErrors(() => client.release(id));
      process.stderr.write(`released ${id}\n`);
      return 0;
    }
    case "show": {
      const { positionals } = parse(rest, {}, true);
      printJson(await withApiErrors(() => client.show(onlyId(positionals))));
      return 0;
    }
    case "list": {
      const { values } = parse(rest, { bucket: { type: "string" }, prefix: { type: "string" } });
      printJson(await withApiErrors(() => client.list({ bucket: values.bucket, prefix: values.prefix })));
      return 0;
    }
    default:
      throw new CliError("usage: fencegate lease acquire|renew|release|show|list …", EXIT.usage);
  }
}

function onlyId(positionals: string[]): string {
  if (positionals.length !== 1) throw new CliError("give exactly one LEASE_ID", EXIT.usage);
  return positionals[0]!;
}
