"""OpenEnv's JSON protocol: pure translations between the contract and its JSON forms (no I/O).

(``openenv.wire`` until 0.2: the name said "wire", but the wire of this project is the
protobuf contract; this package is the JSON side of it. The old path still imports, with a
``DeprecationWarning``.)

* :mod:`~openenv.json_protocol.payloads`: ``Payload`` <-> canonical JSON, driven by the advertised
  ``EnvironmentInfo`` (descriptors, so any language's messages decode);
* :mod:`~openenv.json_protocol.frames`: OpenEnv's WebSocket frames, written by the bridge and read
  by the client (:class:`~openenv.json_protocol.frames.FrameTranslator`), with the error-code tables;
* :mod:`~openenv.json_protocol.jsonrpc`: JSON-RPC errors of ``/mcp``, both ways;
* :mod:`~openenv.json_protocol.jsontext`: the JSON text codec (orjson);
* :mod:`~openenv.json_protocol.render`: an environment's render as JSON.

The bridge encodes with it, the WebSocket client decodes with it, and the certifier's
WebSocket transport uses it too; the certifier keeps its own copy of the tables
(``openenv_conformance.tables``), compared with these by a test.
"""
