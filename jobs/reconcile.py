"""spark-submit entry for ``mqstore reconcile``: every option of the command (the same
definitions: mqstore.cli.reconcile), plus mqstore's --log-level and --log-format.

    spark-submit --master spark://HOST:7077 --py-files mqstore.zip jobs/reconcile.py \
        --store /shared/store --output /shared/reconcile-out [--repair]

The job's code is the ``mqstore`` package (mqstore.jobs); it must be importable on the
driver and on every executor (installed there, or shipped with --py-files); see
deploy/README.md. Exit status: 0 clean, 1 when a finding is an error or the input
is bad.
"""

from mqstore.cli.reconcile import main

if __name__ == "__main__":
    main()
