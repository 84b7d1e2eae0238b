"""The dishonest-agent suite: scripted agents that cheat instead of fixing a bug, each run by
``pytest --ralph`` with the sandbox on and off (see :mod:`tests.chaos.cases`); ``python -m
tests.chaos.table`` prints what the loop did with each one."""
