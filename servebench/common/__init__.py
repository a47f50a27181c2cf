"""The bottom of servebench: helpers every layer (and `model_zoo`) may use.

Nothing here imports any other part of servebench, so a layer that needs to read a
hand-written file, report every validation problem at once, import TensorFlow quietly,
call a Linux binding, name a well-known port or raise servebench's own error class takes
it from here instead of from a layer above or beside it (DESIGN.md, "Layout").
"""
