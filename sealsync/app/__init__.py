"""The product surface: the ``sealsync`` command line, what it prints, and the demo.

This is the one layer that composes the roles. The core package (``sealsync`` outside
``app``) holds what every role shares and imports no role; ``sender``, ``receiver``
and ``spark_loader`` import the core and never each other; only this layer imports
them, each inside the command that needs it, and nothing imports this layer but the
entry points (``sealsync.__main__``, the console script). ``tests/test_layout.py``
holds these rules over every import.

* :mod:`.cli`: the click group, exit codes, signals, ``main()``
* :mod:`.send`: ``sealsync send`` and its ``--dry-run``
* :mod:`.commands`: every other command
* :mod:`.status`, :mod:`.check`: pick the role's status or check by the config
* :mod:`.output`: progress on a terminal, one summary line under cron
* :mod:`.demo`: ``sealsync demo``
"""
