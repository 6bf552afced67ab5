"""rubinperf: analytical roofline performance for serving MoE language models on racks.

Data flows one way: specs -> kernels -> roofline -> step -> serving -> render -> cli.
"""


def __getattr__(name: str):
    if name == "__version__":  # looked up when asked (importing the package stays free)
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("rubinperf")
        except PackageNotFoundError:  # run from a checkout that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'rubinperf' has no attribute {name!r}")
