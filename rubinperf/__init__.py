"""rubinperf: analytical roofline performance for serving MoE language models on racks.

Data flows one way: specs -> kernels -> roofline -> step -> serving -> report -> cli.
"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rubinperf")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "0+unknown"


__version__ = _version()
