"""The `tgi` command: its subcommands (`launch`, `watermark`, ...) and their entry points."""
