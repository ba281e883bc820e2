"""Triton's ``config.pbtxt`` as the real protobuf: parsing, and quoting values for templates.

The schema is Triton's own ``model_config.proto`` as shipped in ``tritonclient``
(``tritonclient.grpc.model_config_pb2``); a file that parses here has the fields and types
Triton expects (it does not prove the server can load the model).
"""

from __future__ import annotations

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from pdtrt.errors import ConfigParseError

__all__ = ["EnsembleStep", "ModelConfig", "ModelTensor", "data_type_name", "parse_config",
           "quote"]

ModelConfig = model_config_pb2.ModelConfig
EnsembleStep = model_config_pb2.ModelEnsembling.Step
ModelTensor = model_config_pb2.ModelInput | model_config_pb2.ModelOutput

def parse_config(text: str) -> model_config_pb2.ModelConfig:
    """Parse ``config.pbtxt`` text; raises :class:`ConfigParseError`."""
    try:
        return text_format.Parse(text, model_config_pb2.ModelConfig())
    except text_format.ParseError as exc:
        raise ConfigParseError(str(exc)) from None


def quote(value: str) -> str:
    """``value`` as a protobuf text-format string literal (double quotes, C escapes)."""
    escaped = (value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n"))
    return f'"{escaped}"'


def data_type_name(value: int) -> str:
    """``TYPE_INT32`` for the enum number of a ``data_type`` field."""
    return model_config_pb2.DataType.Name(value)
