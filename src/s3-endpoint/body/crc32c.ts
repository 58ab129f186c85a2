/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78). Node has no native CRC32C and the
 * AWS implementation is not a dependency here, so it is computed with slicing-by-8 tables:
 * eight bytes per step keeps a pure-JS CRC from dominating upload time.
 */
type Tables = [
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
];

const TABLES = buildTables(0x82f63b78);

function buildTables(poly: number): Tables {
  const t0 = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ poly : c >>> 1;
    t0[n] = c >>> 0;
  }
  const tables = [t0];
  for (let k = 1; k < 8; k++) {
    const prev = tables[k - 1]!;
    const t = new Uint32Array(256);
    for (let n = 0; n < 256; n++) t[n] = (prev[n]! >>> 8) ^ t0[prev[n]! & 0xff]!;
    tables.push(t);
  }
  return tables as Tables;
}

/** Continues a CRC32C over data; pass the previous result to checksum a stream piecewise. */
export function crc32c(data: Uint8Array, previous = 0): number {
  const [t0, t1, t2, t3, t4, t5, t6, t7] = TABLES;
  let crc = ~previous;
  let i = 0;
  const fast = data.length - (data.length % 8);
  for (; i < fast; i += 8) {
    crc ^= data[i]! | (data[i + 1]! << 8) | (data[i + 2]! << 16) | (data[i + 3]! << 24);
    crc =
      t7[crc & 0xff]! ^
      t6[(crc >>> 8) & 0xff]! ^
      t5[(crc >>> 16) & 0xff]! ^
      t4[crc >>> 24]! ^
      t3[data[i + 4]!]! ^
      t2[data[i + 5]!]! ^
      t1[data[i + 6]!]! ^
      t0[data[i + 7]!]!;
  }
  for (; i < data.length; i++) crc = t0[(crc ^ data[i]!) & 0xff]! ^ (crc >>> 8);
  return ~crc >>> 0;
}
