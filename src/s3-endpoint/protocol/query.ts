import { DomainError } from "../../core/errors.js";
import { parseRawQuery } from "../../http/sigv4/query-string.js";

// Keys never hold these (src/core/key-rules.ts), and XML 1.0 cannot carry them even escaped.
const FORBIDDEN_CONTROL = /[\u0000-\u0008\u000b\u000c\u000e-\u001f]/;

/**
 * The query of an S3 request, decoded once. Every name and value must be valid percent-encoding
 * of UTF-8 ("+" is a space, as form encoders mean it): a parameter that does not decode is
 * refused instead of being read as something the client did not send (URLSearchParams would
 * turn it into U+FFFD replacement characters).
 */
export function parseS3Query(rawQuery: string): URLSearchParams {
  const out = new URLSearchParams();
  for (const [rawName, rawValue] of parseRawQuery(rawQuery)) {
    const name = decode(rawName);
    const value = decode(rawValue);
    // No S3 parameter carries them (keys cannot), and several are echoed into XML.
    if (FORBIDDEN_CONTROL.test(name) || FORBIDDEN_CONTROL.test(value)) {
      throw new DomainError("InvalidArgument", "A query parameter holds a control character.", {
        ArgumentName: name.replace(FORBIDDEN_CONTROL, "?").slice(0, 64),
      });
    }
    out.append(name, value);
  }
  return out;
}

function decode(raw: string): string {
  try {
    return decodeURIComponent(raw.replaceAll("+", " "));
  } catch {
    throw new DomainError("InvalidURI", "Couldn't parse the specified URI.", {
      reason: "the query string is not valid percent-encoded UTF-8",
    });
  }
}

/**
 * A text parameter of a listing (prefix, delimiter, markers): refused when it holds a control
 * character no key can hold, since the answer echoes it in XML that could not carry it.
 */
export function textParam(query: URLSearchParams, name: string): string | null {
  const value = query.get(name);
  if (value !== null && FORBIDDEN_CONTROL.test(value)) {
    throw new DomainError("InvalidArgument", `The ${name} parameter holds a control character.`, {
      ArgumentName: name,
    });
  }
  return value;
}
