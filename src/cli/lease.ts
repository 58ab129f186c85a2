import {
  ACQUIRE_OPTIONS,
  acquireRequest,
  CliError,
  clientFromEnv,
  EXIT,
  intOption,
  parse,
  printJson,
  withApiErrors,
} from "./shared.js";

export async function leaseCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  const client = clientFromEnv();
  switch (sub) {
    case "acquire": {
      const { values } = parse(rest, ACQUIRE_OPTIONS);
      const request = acquireRequest(values);
      const lease = await withApiErrors(() => client.acquire(request));
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
