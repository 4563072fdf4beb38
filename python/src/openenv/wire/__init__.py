"""Pure translations between the protocol and OpenEnv's JSON wire (no I/O).

* :mod:`~openenv.wire.payloads`: ``Payload`` <-> canonical JSON, driven by the advertised
  ``EnvironmentInfo`` (descriptors, so any language's messages decode);
* :mod:`~openenv.wire.frames`: OpenEnv's WebSocket frames, written by the bridge and read
  by the client (:class:`~openenv.wire.frames.FrameTranslator`), with the error-code tables;
* :mod:`~openenv.wire.jsonrpc`: JSON-RPC errors of ``/mcp``, both ways;
* :mod:`~openenv.wire.jsontext`: the JSON text codec (orjson).

The bridge encodes with it, the WebSocket client decodes with it, and the certifier's
WebSocket transport uses it too; the certifier keeps its own copy of the tables
(``openenv_conformance.tables``), compared with these by a test.
"""
