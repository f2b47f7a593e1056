# specserver: one image for both deployments (see docs/deploying.md).
#   embedded DuckDB:  SPECSERVER_DATABASE_URL=/data/specbench.duckdb  (one process, a volume at /data)
#   PostgreSQL:       SPECSERVER_DATABASE_URL=postgresql+psycopg://user:pass@host:5432/db  (N replicas)
# All configuration is through SPECSERVER_* environment variables; nothing is baked in.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
# Only the two distributions the server needs: specschema and specserver (the contributor's
# specsubmit stays out). .dockerignore keeps tests, venvs and stores out.
COPY schema ./schema
COPY server ./server
# ICU (UTS #39 name checks) comes bundled in the pyicu-wheels wheel: no compiler needed.
RUN pip install ./schema ./server \
    && rm -rf /app/schema /app/server

# Run as an unprivileged user that owns only its data folder.
RUN groupadd --system --gid 10001 specserver \
    && useradd --system --uid 10001 --gid specserver --home-dir /data --no-create-home \
       --shell /usr/sbin/nologin specserver \
    && mkdir -p /data && chown specserver:specserver /data
USER specserver:specserver
VOLUME ["/data"]

# The embedded default; the compose file's replicas set a PostgreSQL URL instead. The file
# keeps its name from before the rename to specatlas: existing /data volumes hold it.
ENV SPECSERVER_DATABASE_URL=/data/specbench.duckdb
EXPOSE 8000

HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"]

ENTRYPOINT ["specserver", "serve", "--host", "0.0.0.0"]
CMD ["--port", "8000"]
