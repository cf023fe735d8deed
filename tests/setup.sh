#!/bin/sh
# System packages the test suite needs, installed only when missing (Debian; needs root):
# python3-venv, a PostgreSQL server (ledger tests), psql, pgjdbc and a JDK (JDBC test),
# psqlODBC and unixODBC (ODBC test), HikariCP and pgbouncer (pool tests), Chromium (the console's
# browser tests, driven by Playwright; never a browser downloaded by playwright install). Python packages come from pip (pyproject's [test] extra).
set -e
need=""
python3 -c "import ensurepip, venv" 2>/dev/null || need="$need python3-venv"
found=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && found=yes; done
command -v initdb >/dev/null 2>&1 && found=yes
[ -n "$found" ] || need="$need postgresql"
command -v psql >/dev/null 2>&1 || need="$need postgresql-client"
[ -f /usr/share/java/postgresql.jar ] || need="$need libpostgresql-jdbc-java"
[ -f /usr/share/java/HikariCP.jar ] || need="$need libhikaricp-java"
command -v javac >/dev/null 2>&1 || need="$need default-jdk-headless"
[ -f /usr/lib/x86_64-linux-gnu/odbc/psqlodbcw.so ] || ls /usr/lib/*/odbc/psqlodbcw.so >/dev/null 2>&1 || need="$need odbc-postgresql"
command -v odbcinst >/dev/null 2>&1 || need="$need unixodbc"
[ -x /usr/sbin/pgbouncer ] || need="$need pgbouncer"
[ -x /usr/bin/chromium ] || need="$need chromium"
if [ -n "$need" ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing:$need"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $need >/dev/null
  else
    echo "missing system packages:$need (run: sudo apt-get install$need)" >&2
    exit 1
  fi
fi
