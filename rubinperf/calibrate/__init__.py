"""`rubinperf calibrate`: measure kernels on a local GPU and fit the hardware efficiencies.

Modules:
    plan         the measurement plan and CSV schema; each row's Cost from rubinperf.kernels (no torch)
    bench        kernel micro-benchmarks on one GPU (PyTorch + CUDA, imported lazily)
    shapes_bench the model-shape suite (`--suite shapes`): V4.1-Flash shapes in graph, eager (do_bench), stream and cold
                 mode, pointer-chase latency and bandwidth-vs-CTAs probes (measured, not fitted)
    collectives  all-reduce / all-to-all benchmark over every local GPU (torch.distributed + NCCL)
    fit          numpy fits of the roofline's efficiencies and floors; calibrated TOML writer

Only `bench` and `collectives` need PyTorch, and they import it inside their functions.
"""
