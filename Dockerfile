# tierproxy image: the proxy (`tierproxy serve`) and the pipeline (`tierproxy tier`,
# PySpark on local[*] or any Spark master). Slim, non-root, Java 17 for Spark. The same
# image runs a Spark master and worker in docker-compose's `spark` profile (the pyspark
# wheel ships spark-class), so driver, executors and cluster share Spark and Python versions.
FROM python:3.11-slim-bookworm

# The JRE's post-install scripts link man pages into /usr/share/man/man1, which slim
# images do not have.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java

# /opt/java points at the JRE whatever the architecture (amd64, arm64).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    JAVA_HOME=/opt/java

RUN useradd --create-home --uid 10001 tierproxy
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY proxy ./proxy
RUN pip install --no-compile '.'
# The integration service runs the test suite inside the stack; the tests, their extras
# and kcat (a real client the compatibility tests use) come in only with INSTALL_TESTS=1.
ARG INSTALL_TESTS=0
COPY tests ./tests
RUN if [ "$INSTALL_TESTS" = 1 ]; then \
      pip install --no-compile '.[dev]' \
      && apt-get update \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends kcat \
      && rm -rf /var/lib/apt/lists/*; \
    fi \
 && chown tierproxy:tierproxy /app

# /app itself belongs to the user so that relative paths (pytest's cache, a local
# remote-storage directory) can be created; the installed code stays root-owned.
USER tierproxy
ENTRYPOINT ["/usr/bin/tini", "--", "tierproxy"]
CMD ["--help"]
