"""The ceiling: a raw grpc.aio bidi echo with the same messages and no runtime.

Server: answers every SessionRequest with a SessionResponse whose step time step carries the
request's action as observation and reward 1.0. Run: ``python tools/bench/raw.py --port 0
--ready-file F``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

import grpc

from openenv.v1 import environment_pb2, environment_pb2_grpc


class RawEcho(environment_pb2_grpc.EnvironmentServiceServicer):
    async def Session(self, request_iterator, context):  # noqa: N802
        while True:
            req = await context.read()
            if req is grpc.aio.EOF:
                return
            resp = environment_pb2.SessionResponse(request_id=req.request_id)
            kind = req.WhichOneof("kind")
            if kind == "step":
                ts = resp.step.time_step
                ts.observation.CopyFrom(req.step.action)
                ts.reward = 1.0
            elif kind == "handshake":
                resp.handshake.session_id = "raw"
                resp.handshake.protocol_version = "1.0"
            elif kind == "reset":
                resp.reset.time_step.observation.json.struct_value.update({"x": 0})
            elif kind == "close":
                resp.close.SetInParent()
                await context.write(resp)
                return
            await context.write(resp)


async def main(port: int, ready_file: str | None) -> None:
    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    environment_pb2_grpc.add_EnvironmentServiceServicer_to_server(RawEcho(), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    if ready_file:
        with open(ready_file + ".tmp", "w") as f:
            f.write(f"grpc://127.0.0.1:{bound}")
        os.replace(ready_file + ".tmp", ready_file)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await server.stop(0.5)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ready-file")
    ns = ap.parse_args()
    asyncio.run(main(ns.port, ns.ready_file))
