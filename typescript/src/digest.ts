/**
 * The description's digest (RFC 0013): `sha256:` and the hex SHA-256 of the EnvironmentInfo's
 * deterministic serialization, the bytes the Python reference hashes
 * (`SerializeToString(deterministic=True)`): fields in number order (as protobuf-es writes
 * them) and map entries sorted by key (protobuf-es writes them in insertion order, which for
 * `google.protobuf.Struct` is the order an environment happened to build its JSON Schema in).
 */

import { createHash } from "node:crypto";
import { create, toBinary, type DescMessage, type MessageShape } from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { reflect, type ReflectMessage } from "@bufbuild/protobuf/reflect";
import { BinaryWriter, WireType } from "@bufbuild/protobuf/wire";

/** The bytes of `field` of `msg` alone, as protobuf-es encodes a message holding only it. */
function alone(msg: ReflectMessage, field: ReflectMessage["sortedFields"][number]): Uint8Array {
  const one = reflect(msg.desc, create(msg.desc));
  one.set(field, msg.get(field) as never);
  return toBinary(msg.desc, one.message);
}

function byUtf8(a: [unknown, unknown], b: [unknown, unknown]): number {
  return Buffer.compare(Buffer.from(String(a[0]), "utf8"), Buffer.from(String(b[0]), "utf8"));
}

function write(msg: ReflectMessage, w: BinaryWriter): void {
  for (const f of msg.sortedFields) {
    if (!msg.isSet(f)) {
      continue;
    }
    if (f.fieldKind === "message" && !f.delimitedEncoding) {
      w.tag(f.number, WireType.LengthDelimited).fork();
      write(msg.get(f), w);
      w.join();
    } else if (f.fieldKind === "list" && f.listKind === "message" && !f.delimitedEncoding) {
      for (const item of msg.get(f)) {
        w.tag(f.number, WireType.LengthDelimited).fork();
        write(item as ReflectMessage, w);
        w.join();
      }
    } else if (f.fieldKind === "map" && f.mapKey === ScalarType.STRING) {
      const entries = [...msg.get(f)].sort(byUtf8);
      for (const [key, value] of entries) {
        if (f.mapKind === "message") {
          w.tag(f.number, WireType.LengthDelimited).fork();
          w.tag(1, WireType.LengthDelimited).string(String(key));
          w.tag(2, WireType.LengthDelimited).fork();
          write(value as ReflectMessage, w);
          w.join();
          w.join();
        } else { // one entry, as protobuf-es writes it
          const one = reflect(msg.desc, create(msg.desc));
          one.get(f).set(key as never, value as never);
          w.raw(toBinary(msg.desc, one.message));
        }
      }
    } else { // scalars, enums, scalar lists; maps with integer keys (protobuf-es orders them numerically)
      w.raw(alone(msg, f));
    }
  }
}

/** The deterministic serialization of `message` (map entries sorted by key). */
export function deterministicBinary<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): Uint8Array {
  const w = new BinaryWriter();
  write(reflect(schema, message), w);
  return w.finish();
}

/** `sha256:` and the hex SHA-256 of the deterministic serialization of `message`. */
export function digestOf<Desc extends DescMessage>(schema: Desc, message: MessageShape<Desc>): string {
  return "sha256:" + createHash("sha256").update(deterministicBinary(schema, message)).digest("hex");
}
