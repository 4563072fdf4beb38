/**
 * Payloads: how actions, observations and states travel as `openenv.v1.Payload`
 * (docs/protocol.md §2), plus the JSON and descriptor helpers both sides need.
 *
 * A declared type is a {@link PayloadCodec}: {@link messageType} for typed protobuf
 * messages (packed in `Any`, descriptors advertised), {@link jsonType} for JSON values,
 * {@link tensorType} for dense arrays and {@link anyType} for "not declared".
 */

import {
  clearField,
  clone,
  create,
  createFileRegistry,
  createRegistry,
  fromBinary,
  fromJson,
  isMessage,
  toJson,
  type DescField,
  type DescFile,
  type DescMessage,
  type JsonObject,
  type JsonValue,
  type Message,
  type MessageShape,
  type Registry,
} from "@bufbuild/protobuf";
import { ScalarType } from "@bufbuild/protobuf";
import { protoCamelCase } from "@bufbuild/protobuf/reflect";
import {
  AnySchema,
  FieldDescriptorProtoSchema,
  FileDescriptorProtoSchema,
  FileDescriptorSetSchema,
  ValueSchema,
  anyPack,
  file_google_protobuf_any,
  file_google_protobuf_descriptor,
  file_google_protobuf_duration,
  file_google_protobuf_struct,
  file_google_protobuf_timestamp,
  type Any,
  type DescriptorProto,
  type FieldDescriptorProto,
  type FileDescriptorProto,
  type FileDescriptorSet,
} from "@bufbuild/protobuf/wkt";
import { InvalidArgument } from "./errors.js";
import { SchemaValidator } from "./tools.js";
import { file_openenv_v1_environment } from "./gen/openenv/v1/environment_pb.js";
import { strictFromBinary } from "./wire.js";
import {
  DType,
  PayloadKind,
  PayloadSchema,
  TensorSchema,
  TensorSpecSchema,
  TypeSpecSchema,
  type Payload,
  type Tensor,
  type TypeSpec,
} from "./gen/openenv/v1/payload_pb.js";

export { DType, PayloadKind };

// ------------------------------------------------------------------------- JSON values

/** A JSON-like value as a `google.protobuf.Value`. */
export function toValue(value: JsonValue): MessageShape<typeof ValueSchema> {
  return fromJson(ValueSchema, value);
}

/** A `google.protobuf.Value` as plain JSON (numbers are doubles; integers stay exact up to 2^53). */
export function fromValue(value: MessageShape<typeof ValueSchema>): JsonValue {
  return toJson(ValueSchema, value);
}

// ------------------------------------------------------------------------- tensors

const ITEM_SIZE: ReadonlyMap<DType, number> = new Map([
  [DType.BOOL, 1], [DType.INT8, 1], [DType.UINT8, 1],
  [DType.INT16, 2], [DType.UINT16, 2], [DType.FLOAT16, 2],
  [DType.INT32, 4], [DType.UINT32, 4], [DType.FLOAT32, 4],
  [DType.INT64, 8], [DType.UINT64, 8], [DType.FLOAT64, 8],
]);

/** A decoded tensor: dtype, shape and the packed little-endian bytes (not copied). */
export interface TensorValue {
  dtype: DType;
  shape: number[];
  data: Uint8Array;
}

/** Bytes per element of `dtype` (undefined for D_TYPE_UNSPECIFIED or unknown values). */
export function itemSize(dtype: DType): number | undefined {
  return ITEM_SIZE.get(dtype);
}

/** Check a `Tensor`'s invariant (§2.3) and view it; INVALID_ARGUMENT when broken. */
export function tensorFromProto(t: Tensor): TensorValue {
  const size = ITEM_SIZE.get(t.dtype);
  if (size === undefined) {
    throw new InvalidArgument(`tensor has invalid dtype ${t.dtype}`);
  }
  const shape = t.shape.map((d) => Number(d));
  if (shape.some((d) => d < 0)) {
    throw new InvalidArgument(`tensor shape [${shape.join(", ")}] has a negative extent`);
  }
  const n = shape.reduce((a, b) => a * b, 1);
  if (t.data.length !== n * size) {
    throw new InvalidArgument(
      `tensor data is ${t.data.length} bytes, shape [${shape.join(", ")}] of ${DType[t.dtype]} needs ${n * size}`);
  }
  return { dtype: t.dtype, shape, data: t.data };
}

/** A `Tensor` message of a {@link TensorValue}. */
export function tensorToProto(v: TensorValue): Tensor {
  return create(TensorSchema, { dtype: v.dtype, shape: v.shape.map((d) => BigInt(d)), data: v.data });
}

/** A tensor payload, e.g. for `EnvClient.step`. */
export function tensorPayload(dtype: DType, shape: number[], data: Uint8Array): Payload {
  return create(PayloadSchema, { kind: { case: "tensor", value: tensorToProto({ dtype, shape, data }) } });
}

// ------------------------------------------------------------------------- descriptors

/** Files every binding knows: well-known types and the openenv.v1 contract. */
const KNOWN_FILES: readonly DescFile[] = [
  file_google_protobuf_any, file_google_protobuf_descriptor, file_google_protobuf_duration,
  file_google_protobuf_struct, file_google_protobuf_timestamp, file_openenv_v1_environment,
];

/**
 * The FileDescriptorProto of `file` as `protoc` writes it when it parses the .proto: a
 * copy without the `json_name`s that merely repeat the default (protobuf-es restores them
 * on load), so every binding advertises the same bytes for the same file.
 */
export function plainFileProto(file: DescFile): FileDescriptorProto {
  const out = clone(FileDescriptorProtoSchema, file.proto);
  const jsonName = FieldDescriptorProtoSchema.field.jsonName!;
  const strip = (fields: FieldDescriptorProto[]): void => {
    for (const f of fields) {
      if (f.jsonName === protoCamelCase(f.name)) {
        clearField(f, jsonName);
      }
    }
  };
  const visit = (messages: DescriptorProto[]): void => {
    for (const m of messages) {
      strip(m.field);
      strip(m.extension);
      visit(m.nestedType);
    }
  };
  visit(out.messageType);
  strip(out.extension);
  return out;
}

/**
 * A `FileDescriptorSet` with the files defining `messages` and all their dependencies,
 * dependencies first (so a descriptor pool can add them in order).
 */
export function descriptorSet(messages: Iterable<DescMessage>): FileDescriptorSet {
  const out = create(FileDescriptorSetSchema);
  const seen = new Set<string>();
  const visit = (f: DescFile): void => {
    if (seen.has(f.proto.name)) {
      return;
    }
    seen.add(f.proto.name);
    f.dependencies.forEach(visit);
    out.file.push(plainFileProto(f));
  };
  for (const m of messages) {
    visit(m.file);
  }
  return out;
}

/** Every file `files` needs, dependencies first, each once. */
export function withDependencies(files: Iterable<DescFile>): DescFile[] {
  const out: DescFile[] = [];
  const seen = new Set<string>();
  const visit = (f: DescFile): void => {
    if (seen.has(f.proto.name)) {
      return;
    }
    seen.add(f.proto.name);
    f.dependencies.forEach(visit);
    out.push(f);
  };
  for (const f of files) {
    visit(f);
  }
  return out;
}

/**
 * A registry of the message types of an advertised `FileDescriptorSet`, so typed
 * payloads decode with no precompiled stubs. Well-known types and openenv.v1 files the
 * set omits (or also holds) are taken from this package.
 */
export function registryOf(fds: FileDescriptorSet | undefined): Registry {
  const known = withDependencies(KNOWN_FILES);
  const knownByName = new Map(known.map((f) => [f.proto.name, f]));
  const advertised = new Map<string, FileDescriptorProto>();
  for (const f of fds?.file ?? []) {
    if (!knownByName.has(f.name)) {
      advertised.set(f.name, f);
    }
  }
  const resolve = (name: string): FileDescriptorProto | DescFile | undefined =>
    knownByName.get(name) ?? advertised.get(name);
  const registries = [...advertised.values()].map((p) => createFileRegistry(p, resolve));
  return createRegistry(...known, ...registries);
}

// ------------------------------------------------------------------------- JSON Schema

const INT32: JsonObject = { type: "integer", minimum: -(2 ** 31), maximum: 2 ** 31 - 1 };
const UINT32: JsonObject = { type: "integer", minimum: 0, maximum: 2 ** 32 - 1 };
const INT64: JsonObject = { anyOf: [{ type: "integer" }, { type: "string", pattern: "^-?\\d+$" }] };
const FLOATING: JsonObject = { anyOf: [{ type: "number" }, { enum: ["NaN", "Infinity", "-Infinity"] }] };
const SCALAR_SCHEMAS: Record<ScalarType, JsonObject> = {
  [ScalarType.DOUBLE]: FLOATING, [ScalarType.FLOAT]: FLOATING,
  [ScalarType.INT32]: INT32, [ScalarType.SINT32]: INT32, [ScalarType.SFIXED32]: INT32,
  [ScalarType.UINT32]: UINT32, [ScalarType.FIXED32]: UINT32,
  [ScalarType.INT64]: INT64, [ScalarType.SINT64]: INT64, [ScalarType.SFIXED64]: INT64,
  [ScalarType.UINT64]: INT64, [ScalarType.FIXED64]: INT64,
  [ScalarType.BOOL]: { type: "boolean" },
  [ScalarType.STRING]: { type: "string" },
  [ScalarType.BYTES]: { type: "string", contentEncoding: "base64" },
};
const WKT_SCHEMAS: Record<string, JsonObject> = {
  "google.protobuf.Struct": { type: "object" },
  "google.protobuf.Value": {},
  "google.protobuf.ListValue": { type: "array" },
  "google.protobuf.Timestamp": { type: "string", format: "date-time" },
  "google.protobuf.Duration": { type: "string", pattern: "^-?\\d+(\\.\\d+)?s$" },
  "google.protobuf.Any": { type: "object", required: ["@type"] },
  "google.protobuf.FieldMask": { type: "string" },
  "google.protobuf.Empty": { type: "object", additionalProperties: false },
};

/**
 * JSON Schema (draft 2020-12) of a message's canonical proto3 JSON mapping, recursive
 * types through `$defs`; the same shape the Python runtime advertises.
 */
export function messageJsonSchema(desc: DescMessage): JsonObject {
  const defs: Record<string, JsonObject> = {};
  const msgSchema = (d: DescMessage): JsonObject => {
    const wkt = WKT_SCHEMAS[d.typeName];
    if (wkt !== undefined) {
      return { ...wkt };
    }
    if (!(d.typeName in defs)) {
      defs[d.typeName] = {}; // placeholder breaks recursion
      const props: JsonObject = {};
      for (const f of d.fields) {
        props[f.jsonName] = fieldSchema(f);
      }
      defs[d.typeName] = { type: "object", properties: props, additionalProperties: false };
    }
    return { $ref: `#/$defs/${d.typeName}` };
  };
  const single = (f: { message?: DescMessage; enum?: { values: readonly { name: string; number: number }[] }; scalar?: ScalarType }): JsonObject => {
    if (f.message !== undefined) {
      return msgSchema(f.message);
    }
    if (f.enum !== undefined) {
      return { enum: [...f.enum.values.map((v) => v.name), ...f.enum.values.map((v) => v.number)] };
    }
    return { ...SCALAR_SCHEMAS[f.scalar as ScalarType] };
  };
  const fieldSchema = (f: DescField): JsonObject => {
    switch (f.fieldKind) {
      case "map":
        return { type: "object", additionalProperties: single(f) };
      case "list":
        return { type: "array", items: single(f) };
      default:
        return single(f);
    }
  };
  const root = msgSchema(desc);
  if (!("$ref" in root)) {
    return root;
  }
  return { $schema: "https://json-schema.org/draft/2020-12/schema", ...root, $defs: defs };
}

// ------------------------------------------------------------------------- codecs

/** How one declared type (action, observation or state) travels as a Payload. */
export interface PayloadCodec<T> {
  /** Which Payload encoding every value uses. */
  readonly kind: PayloadKind;
  /** The message types whose descriptors must be advertised. */
  readonly messages: readonly DescMessage[];
  /** The advertised TypeSpec, with `examples` encoded. */
  spec(examples?: readonly T[]): TypeSpec;
  /** Encode a value produced by the environment. */
  encode(value: T): Payload;
  /** Decode and validate a payload sent by a client; INVALID_ARGUMENT when invalid. */
  decode(payload: Payload | undefined): T;
}

function kindName(p: Payload | undefined): string {
  return p?.kind.case ?? "nothing";
}

/** A typed protobuf message packed in `Any` (PAYLOAD_KIND_MESSAGE). */
export function messageType<Desc extends DescMessage>(schema: Desc): PayloadCodec<MessageShape<Desc>> {
  const suffix = "/" + schema.typeName;
  const jsonSchema = messageJsonSchema(schema);
  return {
    kind: PayloadKind.MESSAGE,
    messages: [schema],
    spec(examples = []) {
      return create(TypeSpecSchema, {
        kind: PayloadKind.MESSAGE, messageType: schema.typeName, jsonSchema,
        examples: examples.map((e) => this.encode(e)),
      });
    },
    encode(value) {
      if (!isMessage(value, schema)) {
        throw new TypeError(`expected a ${schema.typeName}, got ${describe(value)}`);
      }
      return create(PayloadSchema, { kind: { case: "message", value: anyPack(schema, value) } });
    },
    decode(payload) {
      if (payload?.kind.case !== "message") {
        throw new InvalidArgument(`expected a ${schema.typeName} message payload, got ${kindName(payload)}`);
      }
      const any = payload.kind.value;
      if (!any.typeUrl.endsWith(suffix)) {
        throw new InvalidArgument(`expected type ${schema.typeName}, got ${any.typeUrl || "no type"}`);
      }
      try {
        return strictFromBinary(schema, any.value); // refuses what the reference parser refuses
      } catch (e) {
        throw new InvalidArgument(`undecodable ${schema.typeName} bytes: ${e instanceof Error ? e.message : String(e)}`);
      }
    },
  };
}

/**
 * JSON values (PAYLOAD_KIND_JSON) conforming to the JSON Schema `schema` (draft
 * 2020-12; advertised, and validated with Ajv: a violation is INVALID_ARGUMENT with the
 * violations in `details`). The empty schema accepts every JSON value.
 */
export function jsonType<T extends JsonValue = JsonValue>(schema: JsonObject = {}): PayloadCodec<T> {
  const validator = Object.keys(schema).length > 0 ? new SchemaValidator(schema) : undefined;
  return {
    kind: PayloadKind.JSON,
    messages: [],
    spec(examples = []) {
      return create(TypeSpecSchema, {
        kind: PayloadKind.JSON, jsonSchema: Object.keys(schema).length > 0 ? schema : undefined,
        examples: examples.map((e) => this.encode(e)),
      });
    },
    encode(value) {
      return create(PayloadSchema, { kind: { case: "json", value: toValue(value) } });
    },
    decode(payload) {
      if (payload?.kind.case !== "json") {
        throw new InvalidArgument(`expected a JSON payload, got ${kindName(payload)}`);
      }
      const value = fromValue(payload.kind.value);
      const errors = validator?.errors(value) ?? [];
      if (errors.length > 0) {
        const where = errors[0]!.loc.join(".");
        throw new InvalidArgument(`does not match schema${where ? ` at ${where}` : ""}: ${errors[0]!.msg}`,
          { details: errors as unknown as JsonValue });
      }
      return value as T;
    },
  };
}

/** The static description of a tensor-valued type; -1 marks a varying extent. */
export interface TensorSpecInit {
  dtype: DType;
  shape: number[];
  minimum?: number;
  maximum?: number;
}

/** Dense arrays (PAYLOAD_KIND_TENSOR) checked against `spec` (dtype, shape). */
export function tensorType(spec: TensorSpecInit): PayloadCodec<TensorValue> {
  return {
    kind: PayloadKind.TENSOR,
    messages: [],
    spec(examples = []) {
      return create(TypeSpecSchema, {
        kind: PayloadKind.TENSOR,
        jsonSchema: { type: "array", description: `${DType[spec.dtype]} tensor of shape [${spec.shape.join(", ")}]` },
        tensor: create(TensorSpecSchema, {
          dtype: spec.dtype, shape: spec.shape.map((d) => BigInt(d)), minimum: spec.minimum, maximum: spec.maximum,
        }),
        examples: examples.map((e) => this.encode(e)),
      });
    },
    encode(value) {
      return create(PayloadSchema, { kind: { case: "tensor", value: tensorToProto(value) } });
    },
    decode(payload) {
      if (payload?.kind.case !== "tensor") {
        throw new InvalidArgument(`expected a tensor payload, got ${kindName(payload)}`);
      }
      const t = tensorFromProto(payload.kind.value);
      if (t.dtype !== spec.dtype) {
        throw new InvalidArgument(`expected dtype ${DType[spec.dtype]}, got ${DType[t.dtype]}`);
      }
      if (t.shape.length !== spec.shape.length || spec.shape.some((w, i) => w !== -1 && w !== t.shape[i])) {
        throw new InvalidArgument(`expected shape [${spec.shape.join(", ")}], got [${t.shape.join(", ")}]`);
      }
      return t;
    },
  };
}

/** A value of an undeclared type: a decoded payload, as {@link decodePayload} gives it. */
export type AnyValue = JsonValue | TensorValue | Message | Any | undefined;

/** An undeclared type (PAYLOAD_KIND_UNSPECIFIED): any payload is accepted and passed through. */
export function anyType(): PayloadCodec<Payload> {
  return {
    kind: PayloadKind.UNSPECIFIED,
    messages: [],
    spec(examples = []) {
      return create(TypeSpecSchema, { kind: PayloadKind.UNSPECIFIED, examples: [...examples] });
    },
    encode(value) {
      return value;
    },
    decode(payload) {
      return payload ?? create(PayloadSchema);
    },
  };
}

/**
 * Decode any payload: JSON values as JSON, tensors as {@link TensorValue}, messages
 * through `registry` (the `Any` itself when its type is unknown), unset as undefined.
 */
export function decodePayload(payload: Payload | undefined, registry: Registry): AnyValue {
  switch (payload?.kind.case) {
    case "json":
      return fromValue(payload.kind.value);
    case "tensor":
      return tensorFromProto(payload.kind.value);
    case "message": {
      const any = payload.kind.value;
      const name = any.typeUrl.slice(any.typeUrl.lastIndexOf("/") + 1);
      const desc = registry.getMessage(name);
      return desc === undefined ? any : fromBinary(desc, any.value);
    }
    default:
      return undefined;
  }
}

/**
 * Encode a client's action: a Payload as is, a protobuf message packed in `Any` (its
 * schema looked up in `registry`), anything else as a JSON value.
 */
export function encodeValue(value: unknown, registry: Registry): Payload {
  if (isMessage(value, PayloadSchema)) {
    return value;
  }
  if (isMessage(value)) {
    const desc = registry.getMessage(value.$typeName);
    if (desc === undefined) {
      throw new TypeError(`unknown message type ${value.$typeName}: not in the environment's descriptors`);
    }
    return create(PayloadSchema, { kind: { case: "message", value: anyPack(desc, value) } });
  }
  return create(PayloadSchema, { kind: { case: "json", value: toValue(value as JsonValue) } });
}

function describe(value: unknown): string {
  if (isMessage(value)) {
    return value.$typeName;
  }
  return value === null ? "null" : typeof value;
}

export { AnySchema, type Any };
