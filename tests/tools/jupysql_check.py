"""jupysql's magics against dpsql serve, through IPython's shell (no notebook needed)."""

import json
import os

from IPython.core.interactiveshell import InteractiveShell

shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "sql")
shell.run_line_magic(
    "sql",
    f"postgresql+psycopg2://alice:{os.environ['DPSQL_PASSWORD']}@127.0.0.1:"
    f"{os.environ['DPSQL_PORT']}/dpsql?sslmode=disable",
)
grouped = list(shell.run_line_magic("sql", "SELECT sex, COUNT(*) AS n FROM people GROUP BY sex"))
tables = shell.run_line_magic("sqlcmd", "tables")
columns = shell.run_line_magic("sqlcmd", "columns -t people")
print(json.dumps({"grouped": len(grouped), "tables": str(tables), "columns": str(columns)}))
