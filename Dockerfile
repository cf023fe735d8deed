# dpsql in a container: mount a directory with your policy and data at /data.
#   docker build -t dpsql . && docker run -p 5433:5433 -v $PWD/sample_data:/data dpsql
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY dpsql ./dpsql
# PostgreSQL (engine or ledger) included; the Spark engine also needs Java 17+ and 'dpsql[spark]'.
RUN pip install --no-cache-dir ".[postgres]" && useradd --create-home dpsql
USER dpsql
EXPOSE 5433
CMD ["dpsql", "serve", "--policy", "/data/dpsql.toml", "--host", "0.0.0.0", "--port", "5433"]
