import { XMLParser } from "fast-xml-parser";
import { DomainError } from "../../core/errors.js";

/**
 * Request XML (DeleteObjects, CompleteMultipartUpload, ...). Documents with a DOCTYPE are
 * refused outright, so no entity can be declared or expanded; the parser itself expands
 * nothing, and the five predefined entities and character references are decoded here.
 */
const parser = new XMLParser({
  processEntities: false,
  parseTagValue: false,
  parseAttributeValue: false,
  ignoreAttributes: true,
  ignoreDeclaration: true,
  ignorePiTags: true,
  trimValues: false,
  removeNSPrefix: true,
});

export type XmlElement = { [name: string]: XmlContent };
export type XmlContent = string | XmlElement | XmlContent[];

export function parseXmlDocument(body: Buffer, root: string): XmlElement {
  const text = body.toString("utf8");
  if (/<!DOCTYPE|<!ENTITY/i.test(text)) throw malformed("DOCTYPE and ENTITY declarations are not allowed");
  let doc: Record<string, unknown>;
  try {
    doc = parser.parse(text, true) as Record<string, unknown>;
  } catch {
    throw malformed();
  }
  const top = doc[root];
  if (top === undefined || Object.keys(doc).length !== 1) {
    throw malformed(`the document's root element must be ${root}`);
  }
  if (top === "") return {};
  if (typeof top !== "object" || top === null || Array.isArray(top)) throw malformed();
  return top as XmlElement;
}

/** The children named `name`, always as a list. */
export function children(el: XmlElement, name: string): XmlElement[] {
  const v = el[name];
  if (v === undefined) return [];
  const list = Array.isArray(v) ? v : [v];
  return list.map((x) => (typeof x === "string" ? ({ "#text": x } as XmlElement) : (x as XmlElement)));
}

/** The text of child `name`, decoded; undefined when absent. */
export function text(el: XmlElement, name: string): string | undefined {
  const v = el[name];
  if (v === undefined) return undefined;
  if (Array.isArray(v)) throw malformed(`${name} may appear only once`);
  if (typeof v === "string") return decodeEntities(v);
  const inner = (v as XmlElement)["#text"];
  if (inner === undefined) return "";
  if (typeof inner !== "string") throw malformed();
  return decodeEntities(inner);
}

export function malformed(detail?: string): DomainError {
  return new DomainError(
    "MalformedXML",
    `The XML you provided was not well-formed or did not validate against our published schema${detail ? ` (${detail})` : ""}`,
  );
}

const NAMED: Record<string, string> = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function decodeEntities(s: string): string {
  if (!s.includes("&")) return s;
  return s.replace(/&(#x[0-9a-fA-F]+|#[0-9]+|[a-z]+);/g, (whole, ref: string) => {
    if (ref.startsWith("#x")) return fromCodePoint(Number.parseInt(ref.slice(2), 16), whole);
    if (ref.startsWith("#")) return fromCodePoint(Number.parseInt(ref.slice(1), 10), whole);
    const named = NAMED[ref];
    if (named === undefined) throw malformed(`unknown entity &${ref};`);
    return named;
  });
}

/** XML 1.0's Char production: a reference to anything else makes the document not well-formed. */
function isXmlChar(cp: number): boolean {
  return (
    cp === 0x9 ||
    cp === 0xa ||
    cp === 0xd ||
    (cp >= 0x20 && cp <= 0xd7ff) ||
    (cp >= 0xe000 && cp <= 0xfffd) ||
    (cp >= 0x10000 && cp <= 0x10ffff)
  );
}

function fromCodePoint(cp: number, whole: string): string {
  if (!Number.isFinite(cp) || !isXmlChar(cp))
    throw malformed(`invalid character reference ${whole.slice(0, 16)}`);
  return String.fromCodePoint(cp);
}
