/**
 * S3 response XML. Handlers return plain objects; this one serializer writes them.
 * A value that is an array repeats its element; undefined/null values are left out; a key
 * starting with "@" is an attribute of the element holding it (`{"@xsi:type": "CanonicalUser"}`).
 */
export type XmlValue = string | number | boolean | Date | null | undefined | XmlNode | XmlValue[];
export type XmlNode = { [element: string]: XmlValue };

const S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/";

export function renderXml(root: string, body: XmlNode, { namespace = true } = {}): string {
  const ns = namespace ? ` xmlns="${S3_NS}"` : "";
  return `<?xml version="1.0" encoding="UTF-8"?>\n<${root}${ns}>${renderChildren(body)}</${root}>`;
}

function renderChildren(node: XmlNode): string {
  let out = "";
  for (const [name, value] of Object.entries(node)) {
    // `#text`: the element's own text (an element with text content, no children).
    if (name === "#text") out += value === undefined || value === null ? "" : escapeXml(String(value));
    else if (!name.startsWith("@")) out += renderElement(name, value);
  }
  return out;
}

function renderAttributes(node: XmlNode): string {
  let out = "";
  for (const [name, value] of Object.entries(node)) {
    if (name.startsWith("@") && value !== undefined && value !== null) {
      out += ` ${name.slice(1)}="${escapeXml(String(value))}"`;
    }
  }
  return out;
}

function renderElement(name: string, value: XmlValue): string {
  if (value === undefined || value === null) return "";
  if (Array.isArray(value)) return value.map((v) => renderElement(name, v)).join("");
  if (value instanceof Date) return `<${name}>${value.toISOString()}</${name}>`;
  if (typeof value === "object")
    return `<${name}${renderAttributes(value)}>${renderChildren(value)}</${name}>`;
  return `<${name}>${escapeXml(String(value))}</${name}>`;
}

function escapeXml(text: string): string {
  return (
    text
      .replace(/[&<>"']/g, (c) => ESCAPES[c]!)
      // A literal CR would reach the reader as LF (XML end-of-line handling); keys may hold one.
      .replace(/\r/g, "&#xD;")
      // XML 1.0 cannot carry these even as references; no key holds one, so they can only be
      // echoes of bad input (in an error message), which a replacement character stands for.
      .replace(/[\u0000-\u0008\u000B\u000C\u000E-\u001F\uFFFE\uFFFF]/g, "\uFFFD")
      .replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\uFFFD")
  );
}

const ESCAPES: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&apos;",
};
