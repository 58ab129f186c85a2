import { randomBytes } from "node:crypto";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { type AccessPolicy, createAccessPolicy, type PrincipalGrants } from "../access/access-policy.js";
import { type Keyring, makeKeyring } from "../fence/tokens.js";
import { ConfigError } from "./load.js";
import type { Config } from "./schema.js";

export const DEV_ACCESS_KEY_ID = "fencegate";
export const DEV_SECRET_ACCESS_KEY = "fencegate-secret";

type Credentials = ReadonlyMap<string, string>;

type Secrets = {
  credentials: Credentials;
  /** What each access key may do (src/access/access-policy.ts). */
  access: AccessPolicy;
  keyring: Keyring;
  usesDevCredentials: boolean;
  usesGeneratedSigningKey: boolean;
};

/**
 * Access keys and token-signing keys. Without configured credentials the development pair is
 * used; without a configured signing key one is generated on first start and kept in the data
 * directory. Both defaults are refused unless the gateway listens on a loopback address only.
 */
export function resolveSecrets(config: Config): Secrets {
  // The root credential, and the development pair standing in for it, are administrators.
  const root = config.rootCredential ? [{ ...config.rootCredential, admin: true, allow: undefined }] : [];
  const list = [...root, ...(config.credentials ?? [])];
  const usesDevCredentials = list.length === 0;
  if (usesDevCredentials) {
    list.push({
      accessKeyId: DEV_ACCESS_KEY_ID,
      secretAccessKey: DEV_SECRET_ACCESS_KEY,
      admin: true,
      allow: undefined,
    });
  }
  const credentials = new Map(list.map((c) => [c.accessKeyId, c.secretAccessKey]));
  const grants = new Map<string, PrincipalGrants>();
  for (const c of list) {
    if (grants.has(c.accessKeyId)) continue; // the first mention (the root) wins
    grants.set(c.accessKeyId, { admin: c.admin, rules: c.allow ?? "all" });
  }
  const access = createAccessPolicy(grants);

  const configured = config.tokens.keys;
  const usesGeneratedSigningKey = !configured;
  const keys = configured
    ? configured.map((k) => ({ id: k.id, secret: Buffer.from(k.secret, "utf8") }))
    : [loadOrCreateSigningKey(config.dataDir)];
  let keyring: Keyring;
  try {
    keyring = makeKeyring(keys, config.tokens.activeKeyId);
  } catch (e) {
    throw new ConfigError(`tokens: ${(e as Error).message}`);
  }

  if (!isLoopback(config.server.host)) {
    if (usesDevCredentials) {
      throw new ConfigError(
        `refusing to listen on ${config.server.host} with the development credentials; ` +
          "set FENCEGATE_ACCESS_KEY_ID and FENCEGATE_SECRET_ACCESS_KEY (or credentials in the config file)",
      );
    }
    if (usesGeneratedSigningKey) {
      throw new ConfigError(
        `refusing to listen on ${config.server.host} with the default token-signing key; ` +
          "set FENCEGATE_TOKEN_SIGNING_KEY (or tokens.keys in the config file)",
      );
    }
  }
  return { credentials, access, keyring, usesDevCredentials, usesGeneratedSigningKey };
}

export function isLoopback(host: string): boolean {
  const h = host.replace(/^\[|\]$/g, "").toLowerCase();
  if (h === "localhost" || h === "::1") return true;
  return isIP(h) === 4 && h.startsWith("127.");
}

function loadOrCreateSigningKey(dataDir: string): { id: string; secret: Buffer } {
  const file = join(dataDir, "token-signing-key.json");
  try {
    const stored = JSON.parse(readFileSync(file, "utf8")) as { id: string; secret: string };
    return { id: stored.id, secret: Buffer.from(stored.secret, "base64") };
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== "ENOENT") {
      throw new ConfigError(`cannot read the token-signing key ${file}: ${(e as Error).message}`);
    }
  }
  mkdirSync(dataDir, { recursive: true });
  const key = { id: `k${Date.now().toString(36)}`, secret: randomBytes(32) };
  // wx: never overwrite a key another process wrote meanwhile; tokens signed with it stay valid.
  writeFileSync(file, JSON.stringify({ id: key.id, secret: key.secret.toString("base64") }), {
    mode: 0o600,
    flag: "wx",
  });
  return key;
}
