"""Families of specs: a grid over depth x width x layer type, or seeded random mutation.

InferBench generates its models by varying depth, layer type and width; both ways here give
deduplicated, reproducible lists so a scenario names a family by a few numbers and a seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from model_zoo.spec import MUTABLE_LAYER_TYPES, SEQUENCE_TYPES, ModelSpec, SpecError, parse_spec
from servebench.common.limits import MAX_FAMILY_SIZE  # the most specs one family may hold

# Served input shapes used when a family does not say: a small CIFAR-like image for conv,
# 64 features for dense, 32 features per step for sequence models.
DEFAULT_INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "dense": (64,),
    "conv": (32, 32, 3),
    "lstm": (32,),
    "gru": (32,),
    "attention": (32,),
}

MUTATIONS = ("deepen", "shallow", "widen", "narrow", "swap_type")


def grid(
    layer_types: Sequence[str],
    depths: Sequence[int],
    widths: Sequence[int],
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    max_count: int = MAX_FAMILY_SIZE,
    **common: Any,
) -> list[ModelSpec]:
    """Every combination, in the order given; `common` holds shared fields and knobs.

    A knob that only some of the types take (e.g. `heads`) is applied to those types only,
    so one grid can mix conv and attention models. A grid of more than `max_count`
    combinations is refused before any spec is built.
    """
    combinations = len(layer_types) * len(depths) * len(widths)
    if combinations > max_count:
        raise SpecError(
            f"grid: {len(layer_types)} types x {len(depths)} depths x {len(widths)} widths = "
            f"{combinations:,} models; at most {max_count:,}"
        )
    shapes = {**DEFAULT_INPUT_SHAPES, **(input_shapes or {})}
    specs: list[ModelSpec] = []
    for layer_type in layer_types:
        if layer_type not in MUTABLE_LAYER_TYPES:
            raise SpecError(
                f"layer_type: {layer_type!r} is not one of {', '.join(MUTABLE_LAYER_TYPES)}"
            )
        fields = {k: v for k, v in common.items() if _applies(k, layer_type)}
        for depth in depths:
            for width in widths:
                data = {
                    "layer_type": layer_type,
                    "depth": depth,
                    "width": width,
                    "input_shape": list(shapes[layer_type]),
                    **fields,
                }
                where = f"grid[{layer_type}, depth={depth}, width={width}] "
                specs.append(parse_spec(data, where=where))
    return dedupe(specs)


def _applies(field: str, layer_type: str) -> bool:
    if field in ("kernel_size", "residual"):
        return layer_type == "conv"
    if field == "heads":
        return layer_type == "attention"
    if field == "seq_len":
        return layer_type in SEQUENCE_TYPES
    return True


def dedupe(specs: Iterable[ModelSpec]) -> list[ModelSpec]:
    """Keep the first spec of each id, in order."""
    seen: dict[str, ModelSpec] = {}
    for spec in specs:
        seen.setdefault(spec.id, spec)
    return list(seen.values())


def mutate_once(spec: ModelSpec, operation: str, rng: random.Random) -> ModelSpec:
    """Apply one named mutation; raise SpecError if it yields an invalid spec."""
    if operation == "deepen":
        return spec.replace(depth=spec.depth + 1)
    if operation == "shallow":
        return spec.replace(depth=max(1, spec.depth - 1))
    if operation == "widen":
        return spec.replace(width=spec.width * 2)
    if operation == "narrow":
        return spec.replace(width=max(1, spec.width // 2))
    if operation == "swap_type":
        choices = [t for t in MUTABLE_LAYER_TYPES if t != spec.layer_type]
        target = rng.choice(choices)
        # Same-rank inputs carry over (sequence <-> dense features); otherwise the target's
        # default shape, since an image cannot be fed to a recurrent layer as it is.
        same_rank = len(spec.input_shape) == len(DEFAULT_INPUT_SHAPES[target])
        shape = spec.input_shape if same_rank else DEFAULT_INPUT_SHAPES[target]
        return spec.replace(layer_type=target, input_shape=list(shape))
    raise ValueError(f"unknown mutation {operation!r}; expected one of {MUTATIONS}")


def random_mutations(
    base: ModelSpec,
    count: int,
    seed: int,
    *,
    max_depth: int = 16,
    max_width: int = 1024,
    max_attempts: int | None = None,
    max_count: int = MAX_FAMILY_SIZE,
) -> list[ModelSpec]:
    """`count` distinct mutants of `base`, each one mutation away from an earlier one.

    The same base, count and seed always give the same list. Mutants that break a rule
    (depth or width beyond the caps, heads not dividing width) are skipped and retried.
    More than `max_count` mutants are refused up front: the search for them would run for
    hours and the family could not be served anyway.
    """
    if count > max_count:
        raise SpecError(f"count: {count:,} mutants asked for; at most {max_count:,}")
    if base.layer_type not in MUTABLE_LAYER_TYPES:
        raise SpecError(f"layer_type: {base.layer_type} is a fixed reference and cannot mutate")
    rng = random.Random(seed)
    family = [base]
    seen = {base.id}
    attempts = max_attempts or 50 * count + 100
    while len(family) - 1 < count and attempts > 0:
        attempts -= 1
        parent = rng.choice(family)
        operation = rng.choice(MUTATIONS)
        try:
            child = mutate_once(parent, operation, rng)
        except SpecError:
            continue
        if child.id in seen or child.depth > max_depth or child.width > max_width:
            continue
        seen.add(child.id)
        family.append(child)
    if len(family) - 1 < count:
        raise SpecError(
            f"count: only {len(family) - 1} distinct mutants of {base.id} exist within "
            f"depth <= {max_depth} and width <= {max_width}; asked for {count}"
        )
    return family[1:]
