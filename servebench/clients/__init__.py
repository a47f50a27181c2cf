"""Async inference clients behind one protocol (`base.InferenceClient`).

The protocols servebench speaks (names, transports, default ports, code) are defined once,
in `registry.PROTOCOLS`; `factory.create_client` builds a client by name. Each model
protocol's module (`triton_http`, `triton_grpc`, `tfs_rest`, `tfs_grpc`) holds its codec
(`codec`: requests and answers, no I/O, shared with the Locust users) and its async client
(the codec on the lean HTTP/1.1 transport or aiohttp; the lean HTTP/2 transport or
grpc.aio); `rawhttp` sends one fixed
body, for measuring the generator itself.

Nothing heavy is imported here: tritonclient and TensorFlow load only with the client that
needs them (TensorFlow only when a TF Serving gRPC request is first built or read).
"""
