/**
 * A small RFC 6455 WebSocket client on node:http / node:https, for the binary WebSocket
 * transport (ws.ts) under Node.js: it sends `Authorization: Bearer` at the upgrade and takes
 * TLS material (CA, client certificate and key), which the standard WebSocket API cannot.
 * Client frames are masked; fragmented messages are reassembled and bounded; pings are
 * answered; a close frame is answered and reported with its code and reason; a connection
 * lost without one reports 1006.
 */

import { createHash, randomBytes } from "node:crypto";
import * as http from "node:http";
import * as https from "node:https";
import type { Duplex } from "node:stream";
import { Unavailable } from "./errors.js";
import { SUBPROTOCOL, httpError, type BinarySocket, type SocketEvents, type WebSocketOptions } from "./ws.js";

const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const DEFAULT_MAX = 64 * 1024 * 1024;

function frame(opcode: number, payload: Uint8Array): Buffer {
  const n = payload.length;
  const head = n < 126 ? 2 : n < 65536 ? 4 : 10;
  const out = Buffer.allocUnsafe(head + 4 + n);
  out[0] = 0x80 | opcode;
  if (n < 126) {
    out[1] = 0x80 | n;
  } else if (n < 65536) {
    out[1] = 0x80 | 126;
    out.writeUInt16BE(n, 2);
  } else {
    out[1] = 0x80 | 127;
    out.writeBigUInt64BE(BigInt(n), 2);
  }
  const mask = randomBytes(4);
  mask.copy(out, head);
  for (let i = 0; i < n; i++) {
    out[head + 4 + i] = payload[i]! ^ mask[i & 3]!;
  }
  return out;
}

function closePayload(code: number, reason: string): Buffer {
  const r = Buffer.from(reason, "utf8").subarray(0, 123);
  const out = Buffer.allocUnsafe(2 + r.length);
  out.writeUInt16BE(code, 0);
  r.copy(out, 2);
  return out;
}

/** Read frames from `socket`, reporting whole messages to `events`. */
function attach(socket: Duplex, head: Buffer, max: number, events: SocketEvents): BinarySocket {
  let buf: Buffer = head.length > 0 ? Buffer.from(head) : Buffer.alloc(0);
  let parts: Buffer[] = [];
  let partsLength = 0;
  let partsText = false;
  let reported = false;
  let closeSent = false;
  const report = (code: number, reason: string): void => {
    if (!reported) {
      reported = true;
      events.closed(code, reason);
    }
  };
  const sendClose = (code: number, reason: string): void => {
    if (!closeSent && socket.writable) {
      closeSent = true;
      socket.write(frame(0x8, closePayload(code, reason)));
    }
  };
  const fail = (code: number, reason: string): void => {
    sendClose(code, reason);
    report(code, reason);
    socket.end();
  };
  const parse = (): void => {
    while (buf.length >= 2) {
      const fin = (buf[0]! & 0x80) !== 0;
      const opcode = buf[0]! & 0x0f;
      const masked = (buf[1]! & 0x80) !== 0;
      let len = buf[1]! & 0x7f;
      let off = 2;
      if (len === 126) {
        if (buf.length < 4) {
          return;
        }
        len = buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (buf.length < 10) {
          return;
        }
        const big = buf.readBigUInt64BE(2);
        if (big > BigInt(max)) {
          fail(1009, "message too big");
          return;
        }
        len = Number(big);
        off = 10;
      }
      if (masked) {
        off += 4;
      }
      if (len > max + 125) {
        fail(1009, "message too big");
        return;
      }
      if (buf.length < off + len) {
        return;
      }
      let payload = buf.subarray(off, off + len);
      if (masked) {
        const mask = buf.subarray(off - 4, off);
        payload = Buffer.from(payload.map((b, i) => b ^ mask[i & 3]!));
      }
      buf = buf.subarray(off + len);
      if (opcode === 0x8) { // close: answer it, report its code
        const code = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        const reason = payload.length > 2 ? payload.subarray(2).toString("utf8") : "";
        sendClose(code === 1005 ? 1000 : code, "");
        report(code === 1005 ? 1000 : code, reason);
        socket.end();
        return;
      }
      if (opcode === 0x9) { // ping
        if (socket.writable) {
          socket.write(frame(0xa, payload));
        }
        continue;
      }
      if (opcode === 0xa) {
        continue;
      }
      if (opcode === 0x1 || opcode === 0x2) {
        parts = [];
        partsLength = 0;
        partsText = opcode === 0x1;
      } else if (opcode !== 0x0) {
        fail(1002, `unknown opcode ${opcode}`);
        return;
      }
      parts.push(Buffer.from(payload));
      partsLength += payload.length;
      if (partsLength > max) {
        fail(1009, "message too big");
        return;
      }
      if (fin) {
        const whole = parts.length === 1 ? parts[0]! : Buffer.concat(parts, partsLength);
        parts = [];
        partsLength = 0;
        if (partsText) {
          events.text();
        } else {
          events.message(new Uint8Array(whole.buffer, whole.byteOffset, whole.byteLength));
        }
      }
    }
  };
  socket.on("data", (chunk: Buffer) => {
    buf = buf.length === 0 ? chunk : Buffer.concat([buf, chunk]);
    parse();
  });
  socket.on("close", () => report(1006, "connection lost"));
  socket.on("error", () => undefined); // followed by "close"
  if (buf.length > 0) {
    queueMicrotask(parse);
  }
  return {
    send: (data) => {
      if (socket.writable && !closeSent) {
        socket.write(frame(0x2, data));
      }
    },
    close: (code = 1000, reason = "") => {
      sendClose(code, reason);
      socket.end();
    },
    abort: () => {
      socket.destroy();
    },
  };
}

function tlsOptions(opts: WebSocketOptions): https.RequestOptions {
  return {
    ca: opts.ca === undefined ? undefined : Buffer.from(opts.ca),
    cert: opts.cert === undefined ? undefined : Buffer.from(opts.cert),
    key: opts.key === undefined ? undefined : Buffer.from(opts.key),
  };
}

/** Open a WebSocket (RFC 6455) at `url` offering `protocols`. */
export function openNode(url: string, protocols: string[], opts: WebSocketOptions, events: SocketEvents): Promise<BinarySocket> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const secure = u.protocol === "wss:";
    const key = randomBytes(16).toString("base64");
    const headers: Record<string, string> = {
      Connection: "Upgrade",
      Upgrade: "websocket",
      "Sec-WebSocket-Key": key,
      "Sec-WebSocket-Version": "13",
      "Sec-WebSocket-Protocol": protocols.join(", "),
    };
    if (opts.token) {
      headers.Authorization = `Bearer ${opts.token}`;
    }
    const request = (secure ? https.request : http.request)({
      host: u.hostname.replace(/^\[|\]$/g, ""),
      port: u.port || (secure ? 443 : 80),
      path: u.pathname + u.search,
      headers,
      ...(secure ? tlsOptions(opts) : {}),
    });
    request.on("upgrade", (res: http.IncomingMessage, socket: Duplex, head: Buffer) => {
      const accept = createHash("sha1").update(key + GUID).digest("base64");
      if (res.headers["sec-websocket-accept"] !== accept) {
        socket.destroy();
        reject(new Unavailable("the server's WebSocket handshake is invalid (Sec-WebSocket-Accept)", { fatal: true }));
        return;
      }
      if (res.headers["sec-websocket-protocol"] !== SUBPROTOCOL) {
        socket.destroy();
        reject(new Unavailable(`the server did not select the ${SUBPROTOCOL} subprotocol`, { fatal: true }));
        return;
      }
      (socket as { setNoDelay?: (b: boolean) => void }).setNoDelay?.(true);
      resolve(attach(socket, head, opts.maxMessageBytes ?? DEFAULT_MAX, events));
    });
    request.on("response", (res: http.IncomingMessage) => { // the upgrade was refused
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => reject(httpError(res.statusCode ?? 0, Buffer.concat(chunks).toString("utf8"))));
    });
    request.on("error", (e: Error) => reject(new Unavailable(`cannot connect to ${url}: ${e.message}`, { fatal: true })));
    request.end();
  });
}

/** GET a JSON document (the transport's side calls: /load, /openenv/info). */
export function getJson(url: string, opts: WebSocketOptions): Promise<unknown> {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const secure = u.protocol === "https:";
    const request = (secure ? https.request : http.request)(u, {
      headers: opts.token ? { Authorization: `Bearer ${opts.token}` } : {},
      ...(secure ? tlsOptions(opts) : {}),
    }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => {
        const body = Buffer.concat(chunks).toString("utf8");
        if ((res.statusCode ?? 0) !== 200) {
          reject(httpError(res.statusCode ?? 0, body));
          return;
        }
        try {
          resolve(JSON.parse(body));
        } catch (e) {
          reject(new Unavailable(`${url} did not answer JSON: ${String(e)}`));
        }
      });
    });
    request.on("error", (e: Error) => reject(new Unavailable(`cannot reach ${url}: ${e.message}`)));
    request.end();
  });
}
