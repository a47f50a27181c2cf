"""Generated model families: specs, mutation, counting, torch/Keras builders and exports."""

from model_zoo.spec import ModelSpec, SpecError, load_specs, parse_spec, resnet50_spec, save_specs

__all__ = ["ModelSpec", "SpecError", "load_specs", "parse_spec", "resnet50_spec", "save_specs"]
