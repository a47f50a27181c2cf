"""TF Serving's `BatchingParameters` message, for writing `--batching_parameters_file`.

tensorflow-serving-api ships the client protos but not `session_bundle_config.proto`, where
this message lives, so its descriptor is declared here field for field (same package, names,
numbers and wrapper types as tensorflow_serving/servables/tensorflow/session_bundle_config.proto).
Writing and parsing through a real protobuf message, rather than formatting strings, is what
guarantees the file is valid text format for the server.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from google.protobuf import (
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    text_format,
    wrappers_pb2,  # noqa: F401  (registers wrappers.proto in the pool)
)

_FIELDS = (
    ("max_batch_size", 1, ".google.protobuf.Int64Value"),
    ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
    ("max_enqueued_batches", 3, ".google.protobuf.Int64Value"),
    ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
    ("thread_pool_name", 5, ".google.protobuf.StringValue"),
)


def _message_class():
    pool = descriptor_pool.Default()
    name = "tensorflow.serving.BatchingParameters"
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))
    except KeyError:
        pass
    proto = descriptor_pb2.FileDescriptorProto(
        name="servebench/tfs_batching_parameters.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = proto.message_type.add(name="BatchingParameters")
    label = descriptor_pb2.FieldDescriptorProto
    for field_name, number, type_name in _FIELDS:
        message.field.add(
            name=field_name, number=number, type=label.TYPE_MESSAGE,
            type_name=type_name, label=label.LABEL_OPTIONAL,
        )  # fmt: skip
    message.field.add(
        name="allowed_batch_sizes", number=6, type=label.TYPE_INT64, label=label.LABEL_REPEATED
    )
    message.field.add(
        name="pad_variable_length_inputs", number=7, type=label.TYPE_BOOL,
        label=label.LABEL_OPTIONAL,
    )  # fmt: skip
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))


BatchingParametersMessage = _message_class()


@dataclass(frozen=True)
class TfsBatching:
    """The batching settings users tune on TF Serving (`--enable_batching`)."""

    max_batch_size: int = 32
    batch_timeout_micros: int = 1000
    max_enqueued_batches: int = 100
    num_batch_threads: int = 2
    allowed_batch_sizes: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be >= 1, got {getattr(self, name)}")
        if self.batch_timeout_micros < 0:
            raise ValueError(f"batch_timeout_micros: must be >= 0, got {self.batch_timeout_micros}")
        sizes = self.allowed_batch_sizes
        if sizes and (list(sizes) != sorted(set(sizes)) or sizes[-1] != self.max_batch_size):
            # TF Serving refuses to start otherwise (session_bundle_config.proto).
            raise ValueError(
                "allowed_batch_sizes: must increase strictly and end with max_batch_size "
                f"{self.max_batch_size}, got {list(sizes)}"
            )

    def to_message(self):
        message = BatchingParametersMessage()
        message.max_batch_size.value = self.max_batch_size
        message.batch_timeout_micros.value = self.batch_timeout_micros
        message.max_enqueued_batches.value = self.max_enqueued_batches
        message.num_batch_threads.value = self.num_batch_threads
        message.allowed_batch_sizes.extend(self.allowed_batch_sizes)
        return message

    def to_text(self) -> str:
        return text_format.MessageToString(self.to_message())


def parse_batching_parameters(text: str):
    """Parse a batching parameters file as TF Serving would (raises on a bad field)."""
    return text_format.Parse(text, BatchingParametersMessage())
