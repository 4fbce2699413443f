"""Run slime's real code on a CPU: the GPU-side pieces stood in for, everything else slime's own.

Used by ``shopsimrl slime check`` and the test suite (``tests/slime_harness/``).  slime's
source is imported from a checkout (``--slime-src`` / ``SLIME_SRC``), never copied here.
Only what needs a GPU is stood in for (:mod:`.stand_ins`): torch (numpy-backed, the few
names slime's rollout side touches), Ray (actors run in process, calls run eagerly),
Megatron's argument parser and training actor, SGLang's server arguments and HTTP
endpoints (:mod:`.scripted_sglang`: a router and worker on 127.0.0.1).  Each slime run
happens in a child process (:mod:`.leg`), so the stand-ins never leak into the caller.
"""
