import type {
  BuildHandler,
  BuildHandlerArguments,
  BuildMiddleware,
  HandlerExecutionContext,
  MetadataBearer,
  Pluggable,
} from "@smithy/types";
import type { Lease } from "./lease.js";

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

/** Where the plugin takes the token from: a Lease handle, a token string, or a function. */
export type TokenSource = Lease | string | (() => string | undefined);

const FENCED = new Set(FENCED_COMMANDS.map((c) => `${c}Command`));

/**
 * An AWS SDK v3 plugin that adds a lease's fencing token to every write an S3Client sends
 * (PutObject, CopyObject, DeleteObject, DeleteObjects, CreateMultipartUpload, UploadPart,
 * UploadPartCopy, CompleteMultipartUpload), as the `x-fence-token` header. It is added before
 * signing, so the header is signed with the request. Reads are sent unchanged.
 *
 * With a Lease handle, a write after the lease was lost or released fails at once with the
 * lease's error instead of being sent.
 *
 *     s3.middlewareStack.use(fencingTokenPlugin(lease));
 *     // or for one command: s3.send(command) after command.middlewareStack.use(...)
 */
export function fencingTokenPlugin(source: TokenSource): Pluggable<object, MetadataBearer> {
  const tokenOf = (): string | undefined => {
    if (typeof source === "string") return source;
    if (typeof source === "function") return source();
    source.throwIfLost();
    return source.fencingToken;
  };
  const middleware: BuildMiddleware<object, MetadataBearer> =
    (next: BuildHandler<object, MetadataBearer>, context: HandlerExecutionContext) =>
    async (args: BuildHandlerArguments<object>) => {
      if (context.commandName && FENCED.has(context.commandName)) {
        const token = tokenOf();
        const request = args.request as { headers?: Record<string, string> } | undefined;
        if (token !== undefined && request?.headers) request.headers[FENCE_TOKEN_HEADER] = token;
      }
      return next(args);
    };
  return {
    applyToStack(stack) {
      stack.add(middleware, { step: "build", name: "fencegateFencingToken", override: true });
    },
  };
}
