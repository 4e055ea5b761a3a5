"""The Triton floor: ``tokenize`` and ``chat_render`` stand-ins that do no rendering work.

``make bench`` serves the same ensembles with these two ``model.py`` files in place of the real
ones (same configs, instances and batching) to measure what Triton and the Python backend cost
per request on this machine: each reads its inputs and answers fixed tensors of realistic size.
No server can beat this floor by making the renderer faster; the gap between ours and it is
all the renderer's own work.
"""
