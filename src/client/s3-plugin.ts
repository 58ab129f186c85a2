import type {
  BuildHandler,
  BuildHandlerArguments,
  BuildMiddleware,
  HandlerExecutionContext,
  MetadataBearer,
  MiddlewareStack,
  Pluggable,
} from "@smithy/types";

/** The S3 operations fencegate fences: each one carries the lease's token. */
export const FENCED_COMMANDS: readonly string[] = [
  "PutObject",
  "CopyObject",
  "DeleteObject",
  "DeleteObjects",
  "CreateMultipartUpload",
  "UploadPart",
  "UploadPartCopy",
  "CompleteMultipartUpload",
];

/** The request header a write carries its fencing token in (contract: "Carrying a fencing token"). */
export const FENCE_TOKEN_HEADER = "x-fence-token";

/** The request header that joins a write to a fenced transaction (contract: "Fenced transactions"). */
export const FENCE_TRANSACTION_HEADER = "x-fence-transaction";

/**
 * What holds a fencing token: a Lease handle, or anything shaped like one. `throwIfLost()` is
 * called before each write, so that a write after the lease was lost fails without being sent.
 */
export type TokenHolder = {
  readonly fencingToken: string;
  readonly leaseId?: string;
  readonly token?: number;
  /**
   * A fenced transaction's id (a Transaction handle): every write then also carries
   * `x-fence-transaction` and is staged in the transaction, and every read carries it while
   * `transactionOpen` is not false, so that it sees the transaction's staged state.
   */
  readonly transactionId?: string;
  readonly transactionOpen?: boolean;
  throwIfLost(): void;
};

/** Where a token comes from: a Lease handle, a token string, or a function. */
export type TokenSource = TokenHolder | string | (() => string | undefined);

/** The name of the middleware `fencingTokenPlugin` adds to a client's (or command's) stack. */
export const FENCING_TOKEN_PLUGIN_NAME = "fencegateFencingToken";
/**
 * The name of the middleware a bound command carries (`bindFencingToken`, `lease.bind`), and the
 * mark it sets in a request's context: the client's plugin then stays out.
 */
export const BOUND_FENCING_TOKEN_NAME = "fencegateBoundFencingToken";

const REUSED_HANDLER =
  "the handler the client resolved for a command bound to a fencing token is sending another " +
  "command, which would carry that token: the client was built with cacheMiddleware: true. Send " +
  "bound commands there with an options argument (client.send(command, {})), or through " +
  "lease.s3(client).";

const FENCED = new Set(FENCED_COMMANDS.map((c) => `${c}Command`));

/** A client's or a command's middleware stack, whatever its input and output types. */
type AnyStack = MiddlewareStack<object, MetadataBearer>;

/**
 * Something with its own middleware stack: an S3 command (or any AWS SDK v3 command). Each
 * command's stack is typed with its own input and output, so this takes any of them.
 */
export type CommandWithStack = { readonly middlewareStack: { use(pluggable: never): void } };

/** Something that sends commands: an S3Client (or any AWS SDK v3 client). */
export type CommandSender = { send: (...args: never[]) => unknown };

/**
 * The token source each fencegate middleware of a stack takes its token from, so that adding
 * the same source again is allowed and another source is refused.
 */
const sources = new WeakMap<object, TokenSource>();

/**
 * Thrown when a middleware stack would carry two different tokens: the second lease's writes
 * would go out with the first lease's token, or the other way round.
 */
export class FencingTokenConflictError extends Error {
  override readonly name = "FencingTokenConflictError";
}

function tokenOf(source: TokenSource): string | undefined {
  if (typeof source === "string") return source;
  if (typeof source === "function") return source();
  source.throwIfLost();
  return source.fencingToken;
}

/**
 * The transaction a request joins (writes, after tokenOf checked the holder) or reads from (reads,
 * while it is open): none for a plain token.
 */
function transactionOf(source: TokenSource, write: boolean): string | undefined {
  if (typeof source !== "object" || source.transactionId === undefined) return undefined;
  return write || source.transactionOpen !== false ? source.transactionId : undefined;
}

function sameSource(a: TokenSource | undefined, b: TokenSource): boolean {
  if (a === b) return true;
  if (a === undefined || typeof a !== "object" || typeof b !== "object") return false;
  // Two handles of one lease (attach() twice) carry one token; a transaction of the lease is
  // another source (its writes are staged, the lease's are not).
  return (
    a.leaseId !== undefined &&
    a.leaseId === b.leaseId &&
    a.fencingToken === b.fencingToken &&
    a.transactionId === b.transactionId
  );
}

/** A source named for an error message, never with the token string itself (it is a live credential). */
function describe(source: TokenSource | undefined): string {
  if (source === undefined) return "a token from another copy of fencegate/client";
  if (typeof source === "string") return "a token string";
  if (typeof source === "function") return "a token function";
  const token = source.token !== undefined ? ` (token ${source.token})` : "";
  const what = source.leaseId !== undefined ? `lease ${source.leaseId}${token}` : `a token holder${token}`;
  return source.transactionId !== undefined ? `transaction ${source.transactionId} of ${what}` : what;
}

function requestHeaders(args: BuildHandlerArguments<object>): Record<string, string> | undefined {
  return (args.request as { headers?: Record<string, string> } | undefined)?.headers;
}

/**
 * Puts the source's token on a write, and its transaction (if any) on any request; a write from
 * a lost lease or an ended transaction throws here, before anything is sent. True when it set
 * a header.
 */
function stamp(
  source: TokenSource,
  commandName: string | undefined,
  args: BuildHandlerArguments<object>,
): boolean {
  const write = commandName !== undefined && FENCED.has(commandName);
  const token = write ? tokenOf(source) : undefined;
  const transaction = commandName !== undefined ? transactionOf(source, write) : undefined;
  const headers = requestHeaders(args);
  if (!headers) return false;
  if (token !== undefined) headers[FENCE_TOKEN_HEADER] = token;
  if (transaction !== undefined && (token !== undefined || !write))
    headers[FENCE_TRANSACTION_HEADER] = transaction;
  return token !== undefined || transaction !== undefined;
}

/**
 * Adds `middleware` under `name` unless the stack already carries a fencegate token from another
 * source: one stack, one token. The same source again replaces the middleware (nothing changes).
 */
function addOnce(
  stack: AnyStack,
  source: TokenSource,
  opts: { name: string; priority: "high" | "normal"; middleware: BuildMiddleware<object, MetadataBearer> },
  conflict: (existing: TokenSource | undefined) => string,
): void {
  const present = stack.identify().some((entry) => entry.split(" ")[0] === opts.name);
  if (present && !sameSource(sources.get(stack), source)) {
    throw new FencingTokenConflictError(conflict(sources.get(stack)));
  }
  stack.add(opts.middleware, { step: "build", name: opts.name, priority: opts.priority, override: true });
  sources.set(stack, source);
}

/**
 * An AWS SDK v3 plugin that adds a fencing token to every write a client sends (PutObject,
 * CopyObject, DeleteObject, DeleteObjects, CreateMultipartUpload, UploadPart, UploadPartCopy,
 * CompleteMultipartUpload), as the `x-fence-token` header. It is added before signing, so the
 * header is signed with the request. Reads are sent unchanged.
 *
 * For a client that belongs to one lease only (made for it, dropped with it). A client that
 * several leases share, one after the other or at the same time, must not carry it: the
 * middleware stack is the client's, so every write would carry the one token on it. Send each
 * lease's writes through `lease.s3(client)` or `lease.bind(command)` instead. Adding the plugin
 * to a stack that carries it with another source throws a FencingTokenConflictError rather than
 * replace it (remove it first with `stack.remove("fencegateFencingToken")` to hand a client over).
 *
 * With a Lease handle, a write after the lease was lost or released fails at once with the
 * lease's error instead of being sent. A command bound to a token (`lease.bind`) keeps its own.
 *
 * With a Transaction handle (`tx.plugin()`), every write also carries `x-fence-transaction` and is
 * staged in the transaction, and every read carries it while the transaction is open (it then
 * sees the staged writes); a write after the transaction ended fails without being sent.
 *
 *     const s3 = new S3Client(config);
 *     s3.middlewareStack.use(fencingTokenPlugin(lease));
 */
export function fencingTokenPlugin(source: TokenSource): Pluggable<object, MetadataBearer> {
  const middleware: BuildMiddleware<object, MetadataBearer> =
    (next: BuildHandler<object, MetadataBearer>, context: HandlerExecutionContext) =>
    async (args: BuildHandlerArguments<object>) => {
      if (!context[BOUND_FENCING_TOKEN_NAME]) stamp(source, context.commandName, args);
      return next(args);
    };
  return {
    applyToStack(stack) {
      addOnce(
        stack,
        source,
        { name: FENCING_TOKEN_PLUGIN_NAME, priority: "normal", middleware },
        (existing) =>
          `fencingTokenPlugin: this middleware stack already carries the fencing token of ` +
          `${describe(existing)}; adding ${describe(source)} would send one lease's writes with the ` +
          `other's token. A client that several leases share must not carry the plugin: send each ` +
          `lease's writes through lease.s3(client) or lease.bind(command), or remove the plugin ` +
          `first (middlewareStack.remove("${FENCING_TOKEN_PLUGIN_NAME}")).`,
      );
    },
  };
}

/**
 * Binds a fencing token to one command: the command carries `x-fence-token` (if it is a write)
 * whatever client sends it, and no other command does. Returns the command.
 *
 *     await s3.send(bindFencingToken(new PutObjectCommand({ Bucket, Key, Body }), lease));
 *
 * A command binds to one source: binding it to another throws a FencingTokenConflictError.
 * Its token wins over a `fencingTokenPlugin` on the client that sends it. A client built with
 * `cacheMiddleware: true` ignores a command's own middleware when `send` gets no options
 * argument: send bound commands there with one (`s3.send(command, {})`), or use
 * `fencingTokenClient`, which always passes one.
 */
export function bindFencingToken<C extends CommandWithStack>(command: C, source: TokenSource): C {
  const middleware: BuildMiddleware<object, MetadataBearer> = (
    next: BuildHandler<object, MetadataBearer>,
    context: HandlerExecutionContext,
  ) => {
    // A client resolves a handler for each command it sends. One built with cacheMiddleware:
    // true keeps the handler of the first command of each class and sends the next ones through
    // it, this command's middleware and token included: refuse to send another command so. The
    // command a handler runs for is known by its stack, which the SDK's middleware pass along
    // in their arguments; without it, a handler resolved for this command runs only once (a
    // retry after a region redirect would be refused too, which fencegate never answers).
    let ran = false;
    return async (args: BuildHandlerArguments<object>) => {
      const carried = (args as { middlewareStack?: unknown }).middlewareStack;
      if (carried !== undefined ? carried !== command.middlewareStack : ran) {
        throw new FencingTokenConflictError(REUSED_HANDLER);
      }
      ran = true;
      if (stamp(source, context.commandName, args)) context[BOUND_FENCING_TOKEN_NAME] = true;
      return next(args);
    };
  };
  const plugin: Pluggable<object, MetadataBearer> = {
    applyToStack(stack) {
      addOnce(
        stack,
        source,
        // High priority: it runs before a client's plugin (normal priority), which then stays out.
        { name: BOUND_FENCING_TOKEN_NAME, priority: "high", middleware },
        (existing) =>
          `this command is bound to the fencing token of ${describe(existing)}; binding it to ` +
          `${describe(source)} as well would send it with one of the two. Make a new command for ` +
          `each lease.`,
      );
    },
  };
  (command.middlewareStack as Pick<AnyStack, "use">).use(plugin);
  return command;
}

/**
 * A view of `client` whose `send` binds the token to each command it sends
 * (`bindFencingToken`), and that leaves the client itself unchanged: its middleware stack, its
 * configuration and its connections stay shared, and other users of the client (other leases,
 * or code without a lease) send exactly as before. The view is an instance of the client's
 * class (its prototype is the client), so it goes wherever the client goes: `Upload` from
 * `@aws-sdk/lib-storage`, paginators, waiters. `destroy()` on the view does nothing (the
 * connections are the client's); `view.middlewareStack` is the client's own stack.
 *
 *     const s3 = new S3Client(config);   // one client for the whole process
 *     const fenced = fencingTokenClient(s3, lease);
 *     await fenced.send(new PutObjectCommand({ Bucket, Key, Body }));
 */
export function fencingTokenClient<C extends CommandSender>(client: C, source: TokenSource): C {
  const send = client.send as (command: CommandWithStack, options?: unknown, callback?: unknown) => unknown;
  const view = Object.create(client) as C;
  Object.defineProperties(view, {
    send: {
      value: (command: CommandWithStack, optionsOrCallback?: unknown, callback?: unknown) => {
        const bound = bindFencingToken(command, source);
        // Always an options argument: a client with cacheMiddleware reuses one handler per
        // command class without one, and that handler would not see this command's middleware.
        if (typeof optionsOrCallback === "function") return send.call(client, bound, {}, optionsOrCallback);
        return send.call(client, bound, optionsOrCallback ?? {}, callback);
      },
    },
    destroy: { value: () => undefined },
  });
  return view;
}
