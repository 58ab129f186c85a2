import { clientFromEnv, intOption, parse, printJson, withApiErrors } from "./shared.js";

export async function auditCommand(args: string[]): Promise<number> {
  const { values } = parse(args, {
    bucket: { type: "string" },
    key: { type: "string" },
    prefix: { type: "string" },
    "lease-id": { type: "string" },
    decision: { type: "string" },
    op: { type: "string" },
    since: { type: "string" },
    until: { type: "string" },
    limit: { type: "string" },
    cursor: { type: "string" },
    all: { type: "boolean" },
  });
  const client = clientFromEnv();
  const query = {
    bucket: values.bucket,
    key: values.key,
    prefix: values.prefix,
    leaseId: values["lease-id"],
    decision: values.decision,
    op: values.op,
    since: values.since,
    until: values.until,
    limit: intOption("limit", values.limit)?.toString(),
    cursor: values.cursor,
  };
  if (!values.all) {
    printJson(await withApiErrors(() => client.audit(query)));
    return 0;
  }
  // --all follows the cursor and prints one record per line (JSON Lines).
  let cursor = values.cursor;
  do {
    const page = await withApiErrors(() => client.audit({ ...query, cursor }));
    for (const r of page.records) process.stdout.write(`${JSON.stringify(r)}\n`);
    cursor = page.nextCursor ?? undefined;
  } while (cursor);
  return 0;
}
