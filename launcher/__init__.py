"""Set-up and control of the Triton server, in the order one module needs the next.

- ``settings``: every deployment choice (an environment variable each) and the build folder's paths;
- ``repository``: the model folders built and ``model_repository/`` rendered with the settings;
- ``server``: tritonserver's command line and environment;
- ``processes``: the processes and /dev/shm regions a build folder owns, found and ended;
- ``watchdog`` / ``load_watch``: beside a running server, a dead stub's model reloaded, and a
  stub that dies while its model loads reported;
- ``supervisor``: keeps tritonserver running (restarts, backoff, clean stops);
- ``cli``: ``python -m launcher serve | start | stop | status | render``.
"""
