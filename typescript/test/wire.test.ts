/**
 * Strict decoding of typed payloads: the bytes protobuf's reference parser (upb, the Python
 * runtime's) refuses are refused, the ones it accepts decode as it decodes them. The
 * expectations are the reference parser's answers (`Action.FromString` in Python).
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ActionSchema, Move } from "../src/gen/gridworld/v1/gridworld_pb.js";
import { CallToolRequestSchema } from "../src/gen/openenv/v1/tool_pb.js";
import { strictFromBinary } from "../src/wire.js";

const bytes = (...b: number[]): Uint8Array => new Uint8Array(b);

describe("strict protobuf decoding (as the reference parser)", () => {
  it("refuses truncated, malformed and mistyped-and-truncated fields protobuf-es would misread", () => {
    for (const b of [bytes(0x09, 0x01), bytes(0x0a, 0x01), bytes(0x08, 0x80, 0x80, 0x80), bytes(0xff), bytes(0x0a, 0xff),
      bytes(0x0c), bytes(0x00, 0x01), bytes(0x08, ...Array<number>(11).fill(0x80), 0x01)]) {
      assert.throws(() => strictFromBinary(ActionSchema, b), Error, Buffer.from(b).toString("hex"));
    }
  });

  it("decodes what the reference parser accepts, skipping known fields of another wire type as unknown", () => {
    assert.equal(strictFromBinary(ActionSchema, bytes(0x08, 0x01)).move, Move.UP);
    assert.equal(strictFromBinary(ActionSchema, bytes(0x0a, 0x01, 0x00)).move, Move.UNSPECIFIED); // not "move: 1"
    assert.equal(strictFromBinary(ActionSchema, bytes(0x0a, 0x02, 0xc3, 0x28, 0x08, 0x02)).move, Move.DOWN);
    assert.equal(strictFromBinary(ActionSchema, bytes(0x08, 0x01, 0x10, 0x05)).move, Move.UP); // unknown field 2
  });

  it("refuses invalid UTF-8 in string fields, also nested", () => {
    assert.throws(() => strictFromBinary(CallToolRequestSchema, bytes(0x0a, 0x02, 0xc3, 0x28)), /UTF-8/);
    assert.equal(strictFromBinary(CallToolRequestSchema, bytes(0x0a, 0x02, 0x68, 0x69)).name, "hi");
    // arguments (a Struct) whose map entry's key is invalid UTF-8
    assert.throws(() => strictFromBinary(CallToolRequestSchema, bytes(0x12, 0x06, 0x0a, 0x04, 0x0a, 0x02, 0xc3, 0x28)), /UTF-8/);
    assert.throws(() => strictFromBinary(CallToolRequestSchema, bytes(0x12, 0x03, 0x0a, 0x01, 0xff)));
  });
});
