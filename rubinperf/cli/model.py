"""`rubinperf model import`: a model spec TOML from a Hugging Face config.json (thin: specs.hfconfig does the work)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

model_app = typer.Typer(help="Model specs from Hugging Face configs.\n\n"
                        "Example: rubinperf model import path/to/config.json -o models/my-model.toml")


@model_app.command("import")
def import_cmd(
    config: Annotated[str, typer.Argument(help="A Hugging Face config.json, or a directory holding one "
                                          "(with hf_quant_config.json beside it when ModelOpt wrote one).")],
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="TOML file to write (default: print it).")] = None,
    name: Annotated[Optional[str], typer.Option(help="The spec's name. Default: the output file's stem, "
                                                "or the config's folder.")] = None,
    source: Annotated[Optional[str], typer.Option(help="Where the config comes from (repository and revision), "
                                                  "written as every table's source.")] = None,
):
    """Write a model spec TOML from a config.json; every field carries the config field it came from.

    Example: rubinperf model import ./Llama-3.1-70B/config.json -o llama.toml --source "meta-llama/Llama-3.1-70B"
    """
    from rubinperf.specs.model import import_model_toml

    label = name or (Path(output).stem if output else None)
    text = import_model_toml(config, label, source)
    if output is None:
        typer.echo(text, nl=False)
        return
    from rubinperf.files import write_atomic

    write_atomic(output, text)
    typer.echo(f"wrote {output}", err=True)
