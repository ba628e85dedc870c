"""``python -m proxy.embedded``: fetch Apache Kafka's pinned jars for the embedded brokers.

The Makefile's ``kafka-jars`` target runs it. It is not ``python -m
proxy.embedded.kafka_jars``: this package imports that module first, so runpy would run a
module already imported and warn that this "may result in unpredictable behaviour".
"""

import sys

from proxy.embedded.kafka_jars import main

sys.exit(main())
