"""`rubinperf calibrate`: measure kernels on a local GPU and fit the hardware efficiencies.

Modules:
    plan         the measurement plan and CSV schema; each row's Cost from rubinperf.kernels (no torch)
    rows         each measured row as the Kernel the model times
    fit          numpy fits of the roofline's efficiencies and floors; calibrated TOML writer
    layer        the DeepSeek-V4.1-Flash decode layer's op list and its comparison with the model
    outliers     rules that reject measured rows as artefacts of how they were measured
    measure/     the benchmarks that run on a GPU (PyTorch + CUDA, imported inside their functions):
      bench        kernel micro-benchmarks on one GPU
      shapes       the model-shape suite (`--suite shapes`): V4.1-Flash shapes in graph, eager (do_bench),
                   stream and cold mode, pointer-chase latency and bandwidth-vs-CTAs probes
      layer        the decode layer as one CUDA graph, op by op, and sparse attention's gather
      collectives  all-reduce / all-to-all over every local GPU (torch.distributed + NCCL)
"""
