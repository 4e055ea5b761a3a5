"""Request chat templates that attack the renderer's worker (CPU, memory, compile time), shared by the
in-process worker tests (``tests/unit/test_template_worker.py``) and the live ones
(``tests/live/test_untrusted_templates_live.py``).
"""

from __future__ import annotations


COMPILE_MAX_BYTES = 1 << 20
"""The template byte limit the slow-compile tests raise REQUEST_TEMPLATE_MAX_BYTES to. At the
default 64 KiB compiling is bounded by the size check itself (the largest template it admits
compiles in about 0.5 s on a quiet core, under the deadline); 1 MiB of template compiles for about
7 s, past the deadline on any machine, so the test shows the clock runs during compilation."""
SLOW_COMPILE = "{{ ((((((((1+2)*3)-4)/5)+6)*7)-8)+9) }}" * 26000  # 1,014,000 bytes, under COMPILE_MAX_BYTES

CPU_ATTACKS = {
    "macro recursion, each level doubling": (
        "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}"
    ),
    "sort and unique statements on a large list": "{% set a = (range(100000)|list) * 80 %}"
    + "{% set b = a|sort(reverse=true)|unique|list %}" * 40,
    # Tuples: a sandbox may add lists in place, but a tuple sum copies the running total each step.
    "sum(start=()) quadratic": "{{ dict.fromkeys(range(200000), 0).items()|list|sum(start=())|length }}",
    "lipsum": "{{ lipsum(1000000)|length }}",
    "urlize": "{{ ('www.example.com ' * 1500000)|urlize|length }}",
    "wordwrap": "{{ ('a ' * 6000000)|wordwrap(1)|length }}",
    "slow compile under a raised byte limit": SLOW_COMPILE,
}

# One minimal template per attack class, each unbounded without the worker's limits.
NESTED_TUPLE = (
    "{% set ns = namespace(t=none) %}"
    + "{% for i in range(100000) %}{% set ns.t = (ns.t,) %}{% endfor %}" * 2
    + "{{ {ns.t: 1}|length }}"  # hashing recurses in C, with no recursion check
)
