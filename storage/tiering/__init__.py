"""The tiering pipeline: KIP-405's copier, expirer and partition remover as a Spark job.

``tierproxy tier`` copies closed ranges of every topic with ``remote.storage.enable`` to
remote storage with Kafka's index files and KIP-405 metadata, deletes remote segments past
``retention.ms``/``retention.bytes``, finishes the remote data of deleted topics, and lets
the broker drop local data that is tiered and past ``local.retention.ms``/``.bytes`` (with
DeleteRecords, where the broker has it). How a cycle runs: :mod:`.pipeline`; what the
executors do: :mod:`.fetch_stage` and :mod:`.copy_stage`; where segments start and end:
:mod:`.planner`.

Modules: :mod:`.policy` (per-topic settings), :mod:`.config` (pipeline settings),
:mod:`.planner`, :mod:`.scan`, :mod:`.chain`, :mod:`.retention` (pure rules),
:mod:`.sampling`, :mod:`.fetch_stage`, :mod:`.copy_stage` and :mod:`.worker` (broker and
storage I/O on the executors), :mod:`.stages` (Spark jobs and the progress bar),
:mod:`.pipeline` (the driver, running the steps :mod:`.cleanup`, :mod:`.survey`,
:mod:`.copying` and :mod:`.retention_driver`, which share :mod:`.cycle`, while it holds
the cluster's transactional id: :mod:`.lease`, with the rules of :mod:`.holding`), :mod:`.report`
and :mod:`.status` (what operators see), :mod:`.job` (settings, SparkSession and the cycle
loop).

Running it
----------
In-process, on all local cores (the default), once or every
``remote.log.manager.task.interval.ms``::

    tierproxy tier --config tierproxy.toml --once
    tierproxy tier --config tierproxy.toml                       # loop until SIGTERM
    tierproxy tier --config tierproxy.toml --master local[8]

On a Spark cluster with spark-submit. Executors need the same Python packages as the driver:
install tierproxy on every node (``pip install tierproxy``), or ship a packed virtualenv with
``--archives`` (PySpark's "Python Package Management" guide). Then submit the job module::

    python -m venv --copies env && env/bin/pip install tierproxy venv-pack
    env/bin/venv-pack -o tierproxy-env.tar.gz
    spark-submit \\
        --master spark://spark-master:7077 \\
        --archives tierproxy-env.tar.gz#env \\
        --conf spark.pyspark.python=./env/bin/python \\
        --conf spark.executor.cores=4 \\
        --files tierproxy.toml \\
        "$(python -c 'import storage.tiering.job as j; print(j.__file__)')" \\
        --config tierproxy.toml

(On YARN or Kubernetes use ``--master yarn`` or ``--master k8s://...`` the same way.) The
driver needs the broker and the metadata topic; every executor needs the broker, the
metadata topic and the object store. A task keeps what it reads in ``tiering.spill.dir`` on
its executor's local disk until it has uploaded the segments cut from it, so nothing but
correctness depends on task placement. Only the pipeline holding the cluster's
``transactional.id`` acts (:mod:`.lease`); a second one waits, and takes over when the first
stops. Speculative execution is turned off for the job (``spark.speculation=false``): a
second attempt of a copy task would announce and upload copies nobody finishes.

Broker settings that keep this safe
-----------------------------------
The pipeline moves the broker's log start only over data that is already in the remote tier
and past ``local.retention.ms``/``.bytes``. Keep the broker's own ``retention.ms`` and
``retention.bytes`` on tiered topics as a generous safety net (longer than the longest time
the pipeline may be down, for example several days), so that a stopped pipeline never lets
untiered data expire; ``log.retention.check.interval.ms`` (5 minutes by default) is how soon
the broker then deletes the segments below the new log start. Brokers without DeleteRecords
(Tansu) keep tiered data until their own retention removes it.
"""
