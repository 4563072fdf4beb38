/**
 * Strict protobuf decoding: bytes are accepted when protobuf's reference parser (upb, used
 * by the Python runtime and the conformance suite) accepts them, and refused otherwise.
 *
 * protobuf-es reads a known field whatever its wire type (`09 01`, field 1 as a truncated
 * fixed64, decodes as `move: 1`) and does not check UTF-8. The reference parser skips a
 * field of the wrong wire type as unknown — and so fails on a truncated one — and refuses
 * invalid UTF-8 in proto3 strings. {@link strictFromBinary} walks the bytes as the
 * reference parser does first, then decodes them without the mismatched fields.
 */

import { fromBinary, ScalarType, type DescField, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { BinaryReader, WireType } from "@bufbuild/protobuf/wire";

/** How deep messages may nest (the reference parser's default limit). */
const MAX_DEPTH = 100;

const utf8 = new TextDecoder("utf-8", { fatal: true });

function scalarWireType(t: ScalarType): WireType {
  switch (t) {
    case ScalarType.DOUBLE:
    case ScalarType.FIXED64:
    case ScalarType.SFIXED64:
      return WireType.Bit64;
    case ScalarType.FLOAT:
    case ScalarType.FIXED32:
    case ScalarType.SFIXED32:
      return WireType.Bit32;
    case ScalarType.STRING:
    case ScalarType.BYTES:
      return WireType.LengthDelimited;
    default:
      return WireType.Varint;
  }
}

/** What one field number holds: its wire types, and how to check a length-delimited value. */
interface Slot {
  wire: WireType[];
  check?: (bytes: Uint8Array, depth: number) => void;
}

function checkString(bytes: Uint8Array): void {
  try {
    utf8.decode(bytes);
  } catch {
    throw new Error("invalid UTF-8 in a string field");
  }
}

function slotOf(field: DescField): Slot {
  switch (field.fieldKind) {
    case "scalar": {
      const wt = scalarWireType(field.scalar);
      return { wire: [wt], check: field.scalar === ScalarType.STRING ? checkString : undefined };
    }
    case "enum":
      return { wire: [WireType.Varint] };
    case "message":
      return field.delimitedEncoding
        ? { wire: [WireType.StartGroup] }
        : { wire: [WireType.LengthDelimited], check: (b, d) => nested(field.message, b, d) };
    case "list":
      if (field.listKind === "message") {
        return field.delimitedEncoding
          ? { wire: [WireType.StartGroup] }
          : { wire: [WireType.LengthDelimited], check: (b, d) => nested(field.message, b, d) };
      }
      if (field.listKind === "enum") {
        return { wire: [WireType.Varint, WireType.LengthDelimited] }; // unpacked or packed
      }
      if (field.scalar === ScalarType.STRING || field.scalar === ScalarType.BYTES) {
        return { wire: [WireType.LengthDelimited], check: field.scalar === ScalarType.STRING ? checkString : undefined };
      }
      return { wire: [scalarWireType(field.scalar), WireType.LengthDelimited] };
    case "map": {
      const key = { wire: [scalarWireType(field.mapKey)], check: field.mapKey === ScalarType.STRING ? checkString : undefined };
      const value: Slot = field.mapKind === "message"
        ? { wire: [WireType.LengthDelimited], check: (b, d) => nested(field.message, b, d) }
        : field.mapKind === "enum"
          ? { wire: [WireType.Varint] }
          : { wire: [scalarWireType(field.scalar)], check: field.scalar === ScalarType.STRING ? checkString : undefined };
      const entry = new Map([[1, key], [2, value]]);
      return {
        wire: [WireType.LengthDelimited],
        check: (b, d) => {
          if (walkSlots(entry, b, d + 1).length > 0) {
            throw new Error(`an entry of map field ${field.name} has a field of the wrong wire type`);
          }
        },
      };
    }
  }
}

/** A nested message: a known field of another wire type refuses the bytes (see strictFromBinary). */
function nested(desc: DescMessage, bytes: Uint8Array, depth: number): void {
  const mismatched = walk(desc, bytes, depth + 1);
  if (mismatched.length > 0) {
    throw new Error(`field ${mismatched[0]!.split(":")[0]} of ${desc.typeName} has the wrong wire type`);
  }
}

const slotCache = new WeakMap<DescMessage, Map<number, Slot>>();

function slotsOf(desc: DescMessage): Map<number, Slot> {
  let slots = slotCache.get(desc);
  if (slots === undefined) {
    slots = new Map(desc.fields.map((f) => [f.number, slotOf(f)]));
    slotCache.set(desc, slots);
  }
  return slots;
}

function walk(desc: DescMessage, bytes: Uint8Array, depth: number): string[] {
  return walkSlots(slotsOf(desc), bytes, depth);
}

/**
 * Check `bytes` field by field; returns the known fields seen with another wire type than
 * theirs, as `"number:wiretype"` (the reference parser keeps them as unknown fields).
 */
function walkSlots(slots: Map<number, Slot>, bytes: Uint8Array, depth: number): string[] {
  if (depth > MAX_DEPTH) {
    throw new Error(`messages nested deeper than ${MAX_DEPTH} levels`);
  }
  const reader = new BinaryReader(bytes);
  const mismatched: string[] = [];
  while (reader.pos < reader.len) {
    const [no, wt] = reader.tag();
    if (no <= 0 || wt > WireType.Bit32) {
      throw new Error(`invalid tag (field ${no}, wire type ${wt})`);
    }
    if (wt === WireType.EndGroup) {
      throw new Error(`unmatched end-group tag (field ${no})`);
    }
    const slot = slots.get(no);
    if (slot !== undefined && wt === WireType.LengthDelimited && slot.wire.includes(wt) && slot.check !== undefined) {
      const value = reader.bytes(); // bounds-checked
      slot.check(value, depth);
      continue;
    }
    if (slot !== undefined && !slot.wire.includes(wt)) {
      mismatched.push(`${no}:${wt}`);
    }
    const start = reader.pos;
    reader.skip(wt, no); // bounds-checked; a varint over 10 bytes throws
    if (wt === WireType.Varint && reader.pos - start > 10) {
      throw new Error(`varint of field ${no} is longer than 10 bytes`);
    }
  }
  return mismatched;
}

/** The bytes without the fields in `drop` (`"number:wiretype"`, top level only). */
function withoutFields(bytes: Uint8Array, drop: ReadonlySet<string>): Uint8Array {
  const reader = new BinaryReader(bytes);
  const parts: Uint8Array[] = [];
  while (reader.pos < reader.len) {
    const start = reader.pos;
    const [no, wt] = reader.tag();
    reader.skip(wt, no);
    if (!drop.has(`${no}:${wt}`)) {
      parts.push(bytes.subarray(start, reader.pos));
    }
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/**
 * `fromBinary(desc, bytes)`, refusing (throwing) what the reference parser refuses:
 * truncated or malformed fields, invalid tags, unmatched groups, invalid UTF-8 in string
 * fields, nesting deeper than 100. Known fields of another wire type are dropped (the
 * reference parser keeps them as unknown fields) at the top level; nested, they refuse the
 * bytes (this strictness only ever turns a value protobuf-es would have misread into an error).
 */
export function strictFromBinary<Desc extends DescMessage>(desc: Desc, bytes: Uint8Array): MessageShape<Desc> {
  const mismatched = walk(desc, bytes, 0);
  return fromBinary(desc, mismatched.length === 0 ? bytes : withoutFields(bytes, new Set(mismatched)));
}
