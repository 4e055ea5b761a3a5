"""Set-up and launch of the Triton server: default model build, repository generation, process control."""
