"""What the Triton adapters share (the only code besides ``model_repository/*/1/*.py`` that imports
``triton_python_backend_utils``): tensors in and out with one error rule (``tensors``), responses
sent off the request thread (``outbox``), and BLS objects held until the stub lets go of them
(``deferred_release``)."""
