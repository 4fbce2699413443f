"""Run slime's real code on a CPU: the GPU-side pieces stood in for, everything else slime's own.

Used by ``shopsimrl slime check`` and the test suite (``tests/slime_harness/``).  slime's
source is imported from a checkout (``--slime-src`` / ``SLIME_SRC``), never copied here.
Only what needs a GPU is stood in for (:mod:`.double`, the one restatement of slime the
project keeps): torch (numpy-backed, the few names slime's rollout side touches), Ray
(actors run in process, calls run eagerly), Megatron's argument parser and training actor,
SGLang's server arguments; SGLang's HTTP endpoints are :mod:`.scripted_sglang` (a router
and worker on 127.0.0.1, also the hook tests' server).  Each slime run happens in a child
process with a time limit (:mod:`.children`), so the stand-ins never leak into the caller
and a slime that blocks cannot hang it; :mod:`.checks` turns what the runs recorded into
verdicts (:mod:`.outcome`: PASS, FAIL, NOT RUN, N/A).
"""
