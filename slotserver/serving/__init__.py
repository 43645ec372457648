"""The serving layer: requests, jobs, slots, their lifecycle, the scheduler and the engine loop
(runner), and ``build``, which turns a config into a running service.

Imports ``config`` and every layer below it; never ``api``, ``flags`` or ``cli``."""
