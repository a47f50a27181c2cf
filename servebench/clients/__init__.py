"""Async inference clients behind one protocol (`base.InferenceClient`).

Protocols, by the name `factory.create_client` takes:
- `triton-http` (`triton_http`): Triton's KServe v2 HTTP API, JSON or binary tensors;
- `triton-grpc` (`triton_grpc`): Triton's KServe v2 gRPC API;
- `tfs-rest` (`tfs_rest`): TF Serving's REST API, row (`instances`) or columnar (`inputs`);
- `tfs-grpc` (`tfs_grpc`): TF Serving's gRPC PredictionService / ModelService;
- `http` (`rawhttp`): one fixed HTTP body, for measuring the generator itself.

Nothing heavy is imported here: tritonclient and TensorFlow load only with the client that
needs them (TensorFlow only when a TF Serving gRPC client connects).
"""
