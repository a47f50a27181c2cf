"""ResNet-50's layout table, without torch: the builders (`resnet`, `keras_builder`) and
the counting that a scenario's validation runs (`counting`) share it, and reading a
scenario must not import torch (3 s)."""

# (planes, blocks, stride of the first block) for the four stages of ResNet-50.
RESNET50_STAGES: tuple[tuple[int, int, int], ...] = (
    (64, 3, 1),
    (128, 4, 2),
    (256, 6, 2),
    (512, 3, 2),
)
EXPANSION = 4
