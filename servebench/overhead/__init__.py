"""Container vs host: the same probes run on the host and inside a container of the
servebench image, interleaved, and compared metric by metric (`servebench overhead`).

Modelled on Xu et al. (2017), "Performance evaluation of deep learning tools in Docker
containers": HPL/HPCG-style CPU kernels, disk I/O with ioping and fio, GPU kernels,
end-to-end training and, for servebench, end-to-end serving.
"""
