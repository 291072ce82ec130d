"""PySpark jobs over a store's files: ``reconcile`` (a distributed ``verify`` that can
write rebuilt consume queues and index files) and the ``mqstore`` data source
(messages as a DataFrame).

Everything here is importable on Spark workers: worker-side code lives in
:mod:`mqstore.jobs.units` and :mod:`mqstore.jobs.datasource`, the driver side in
:mod:`mqstore.jobs.reconcile`; :mod:`mqstore.jobs.spark` builds a session with the
settings this project needs. ``jobs/reconcile.py`` is the thin script for
``spark-submit``.
"""
