"""``python -m proxy.embedded``: fetch Apache Kafka's pinned jars for the embedded brokers;
``python -m proxy.embedded emulators``: install the pinned object-store emulators.

The Makefile's ``kafka-jars`` and ``emulators`` targets run it. It is not ``python -m
proxy.embedded.kafka_jars``: this package imports that module first, so runpy would run a
module already imported and warn that this "may result in unpredictable behaviour".
"""

import sys

from proxy.embedded import emulators, kafka_jars

if sys.argv[1:2] == ["emulators"]:
    sys.exit(emulators.main(sys.argv[2:]))
sys.exit(kafka_jars.main())
