"""The `tgi` command: `tgi backends`, `tgi launch` (also installed as `text-generation-launcher`),
`tgi watermark detect`, `tgi models pull|list|rm|show`."""

from __future__ import annotations

import argparse
import os
import sys


def _cmd_backends(args: argparse.Namespace) -> int:
    from tgi.core.plugins import BackendRegistry, BackendSelectionError

    registry = BackendRegistry()
    rows = []
    for entry in registry.entries():
        result = registry.probe(entry.name)
        priority = str(entry.spec.priority) if entry.spec else "-"
        rows.append((entry.name, entry.version, priority, "yes" if result.available else "no", result.reason))
    header = ("backend", "version", "priority", "available", "details")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths, strict=True)) + "  " + row[4])
    if not rows:
        print("(no backend plugin is installed)")
    try:
        spec = registry.select(args.backend)
    except BackendSelectionError as exc:
        print(f"\nerror: {exc}", file=sys.stderr)
        return 2
    print(f"\nselected ({args.backend}): {spec.name}")
    backend = spec.create()
    dtype = backend.default_dtype()
    why = backend.default_dtype_reason()
    print(f"default dtype: {dtype}" + (f" ({why})" if why else ""))
    for name, impl in backend.describe_kernels(dtype).items():
        print(f"  {name}: {impl}")
    formats = backend.weight_formats(dtype)
    print("quantized weight formats (--quantize):" + ("" if formats else " none"))
    for name, kernel in formats.items():
        print(f"  {name}: {kernel}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tgi", description="LLM inference server with hardware-backend plugins"
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p_backends = sub.add_parser("backends", help="list the registered backends and whether they can run here")
    p_backends.add_argument(
        "--backend",
        default=os.environ.get("TGI_BACKEND", "auto"),
        help="also resolve this selection (a name, or auto) [env: TGI_BACKEND]",
    )
    p_backends.set_defaults(func=_cmd_backends)

    from tgi.server.cli.launch import add_launch_arguments, run_launch

    p_launch = sub.add_parser("launch", help="load a model and serve TGI's and OpenAI's HTTP APIs")
    add_launch_arguments(p_launch)
    p_launch.set_defaults(func=run_launch)

    from tgi.server.cli.watermark import add_watermark_command

    add_watermark_command(sub)

    from tgi.server.cli.models import add_models_command

    add_models_command(sub)

    try:
        from tgi.benchmarks.cli import add_benchmark_command
    except ImportError:
        pass
    else:
        add_benchmark_command(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


def launcher_main(argv: list[str] | None = None) -> int:
    """`text-generation-launcher`: TGI's launcher command line, i.e. `tgi launch`."""
    return main(["launch", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
