"""Standard library only, run away from the controller's virtualenv: on the host (the knee search beside the
bench client, the engine's wait), inside the serving container, before the virtualenv exists
(prereqs), or under python -S (observer). tests/unit/repo/test_architecture.py keeps them so."""
