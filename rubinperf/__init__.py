"""rubinperf: analytical roofline performance for serving MoE language models on racks.

Data flows one way: specs -> kernels -> roofline -> step -> serving -> report -> cli.
"""

__version__ = "0.1.0"
