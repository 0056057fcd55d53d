"""The launcher's flags, declared once in a table (`tgi.server.flags.table`): one typed `Flag` per flag of
`tgi launch`, from which the parser and `--help`, the environment variables, the start-up checks, the
engine's and the server's settings, and the compatibility table and flag reference of docs/reference/flags.md
are made. Adding a flag is one entry there (tests/unit/server/flags/test_flag_table.py checks each entry end to end).
"""

from tgi.server.flags.arguments import add_flags
from tgi.server.flags.checks import check_flags
from tgi.server.flags.destinations import engine_fields, server_fields
from tgi.server.flags.table import FLAGS

__all__ = ["FLAGS", "add_flags", "check_flags", "engine_fields", "server_fields"]
