# tierproxy image: the proxy (`tierproxy serve`) and the pipeline (`tierproxy tier`,
# PySpark on local[*] or any Spark master). Slim, non-root, Java 17 for Spark.
FROM python:3.11-slim-bookworm

RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      openjdk-17-jre-headless procps tini \
 && rm -rf /var/lib/apt/lists/*

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    JAVA_HOME=/usr/lib/jvm/java-17-openjdk-amd64

RUN useradd --create-home --uid 10001 tierproxy
WORKDIR /app
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY storage ./storage
COPY proxy ./proxy
RUN pip install --no-compile '.'
# The integration service runs the test suite inside the stack; tests and their
# extras come in only when the image is built with INSTALL_TESTS=1.
ARG INSTALL_TESTS=0
COPY tests ./tests
RUN if [ "$INSTALL_TESTS" = 1 ]; then pip install --no-compile '.[dev]'; fi

USER tierproxy
ENTRYPOINT ["/usr/bin/tini", "--", "tierproxy"]
CMD ["--help"]
