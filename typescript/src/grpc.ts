/**
 * gRPC plumbing shared by the client and the server: @grpc/grpc-js service
 * definitions derived from the protobuf-es service descriptors generated from
 * proto/ (no second code generator), the project's channel arguments
 * (docs/protocol.md §8 and §9), and environment URLs.
 */

import { fromBinary, toBinary, type DescMessage, type DescService, type MessageShape } from "@bufbuild/protobuf";
import type { ChannelOptions, ServiceDefinition } from "@grpc/grpc-js";
import { FileDescriptorProtoSchema } from "@bufbuild/protobuf/wkt";
import { EnvironmentService } from "./gen/openenv/v1/environment_pb.js";
import { plainFileProto, withDependencies } from "./codec.js";

/** The protocol version this binding speaks (docs/protocol.md §10). */
export const PROTOCOL_VERSION = "1.6";
/** Default of `Capabilities.max_message_bytes`: 4 MiB, as the Python server (docs/security.md, "What one message may cost"). */
export const DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;
/** Default session idle timeout: 300 s. */
export const DEFAULT_IDLE_TIMEOUT_MS = 300_000;
/** Full name of the environment service. */
export const SERVICE_NAME = EnvironmentService.typeName;

function codec<Desc extends DescMessage>(schema: Desc): {
  serialize: (m: MessageShape<Desc> | Uint8Array) => Buffer;
  deserialize: (b: Buffer) => MessageShape<Desc>;
} {
  return {
    // Messages may arrive pre-serialized (the client checks sizes before sending).
    serialize: (m) => Buffer.from(m instanceof Uint8Array ? m : toBinary(schema, m)),
    deserialize: (b) => fromBinary(schema, b),
  };
}

/**
 * A grpc-js service definition for a generated protobuf-es service: method paths,
 * streaming kinds and (de)serializers all come from the descriptor.
 */
export function serviceDefinition(service: DescService): ServiceDefinition {
  const def: Record<string, ServiceDefinition[string]> = {};
  for (const m of service.methods) {
    const input = codec(m.input);
    const output = codec(m.output);
    def[m.name] = {
      path: `/${service.typeName}/${m.name}`,
      requestStream: m.methodKind === "client_streaming" || m.methodKind === "bidi_streaming",
      responseStream: m.methodKind === "server_streaming" || m.methodKind === "bidi_streaming",
      requestSerialize: input.serialize,
      requestDeserialize: input.deserialize,
      responseSerialize: output.serialize,
      responseDeserialize: output.deserialize,
      originalName: m.localName,
    };
  }
  return def as ServiceDefinition;
}

/** The grpc-js definition of `openenv.v1.EnvironmentService`. */
export const environmentServiceDefinition = serviceDefinition(EnvironmentService);

/** Serialized FileDescriptorProtos of a service's file and its imports (for reflection). */
export function fileDescriptorProtos(service: DescService): Buffer[] {
  return withDependencies([service.file]).map((f) => Buffer.from(toBinary(FileDescriptorProtoSchema, plainFileProto(f))));
}

/**
 * Server channel arguments: message limits and keepalive policy of the protocol, and the
 * stream bound of RFC 0003 (as the Python server): every session holds one stream, so a
 * connection may open `maxSessions + 16` (at least 128); silent ones end at the handshake
 * deadline. Dead peers are found by the server's own keepalive pings.
 */
export function serverOptions(maxMessageBytes: number, maxSessions = 0): ChannelOptions {
  return {
    "grpc.max_receive_message_length": maxMessageBytes,
    "grpc.max_send_message_length": maxMessageBytes,
    "grpc.keepalive_permit_without_calls": 1,
    "grpc.keepalive_time_ms": 60_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.max_concurrent_streams": Math.max(128, maxSessions + 16),
  };
}

/** Client channel arguments: receive limit and the 30 s keepalive of §9. */
export function clientOptions(maxMessageBytes: number, keepaliveMs: number): ChannelOptions {
  return {
    "grpc.max_receive_message_length": maxMessageBytes,
    "grpc.max_send_message_length": maxMessageBytes,
    "grpc.keepalive_time_ms": keepaliveMs,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": 1,
  };
}

/** The `host:port` target of an environment URL: `grpc://host:port`, `grpcs://host:port` (TLS) or `host:port`. */
export function parseUrl(url: string): string {
  if (!url.includes("://")) {
    return url;
  }
  const u = new URL(url);
  if (u.protocol !== "grpc:" && u.protocol !== "grpcs:") {
    throw new Error(`unsupported URL scheme ${u.protocol} in ${url} (use grpc://host:port, grpcs://host:port ` +
      "or ws(s)://host:port/v1/session)");
  }
  if (u.hostname === "" || u.port === "") {
    throw new Error(`environment URL ${url} needs a host and a port`);
  }
  return `${u.hostname}:${u.port}`;
}
