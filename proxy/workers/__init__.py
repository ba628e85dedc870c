"""``tierproxy serve`` on every core: a supervisor process and its worker processes.

With ``workers`` above 1 the ``serve`` process becomes a supervisor (:mod:`.supervisor`): it
starts that many workers (:mod:`.child`), each a whole proxy with its own event loop, remote
tier and metadata view, whose listeners share their ports with ``SO_REUSEPORT``; it restarts a
worker that dies, drains them all on SIGTERM, and answers ``/metrics``, ``/livez`` and
``/readyz`` on ``metrics.port`` from the workers' own endpoints (:mod:`.aggregate`), which
they serve on Unix sockets in a directory only the supervisor's user can enter. Host-wide
budgets are divided among the workers (:mod:`.budgets`).
"""
