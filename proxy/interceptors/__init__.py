"""Kafka logic the proxy applies to the APIs it decodes (see :mod:`proxy.interceptors.base`)."""
