"""The one restatement of slime ShopSimRL keeps: what slime does where its real code cannot run here.

Every test that needs slime installs it from here; no other fake slime exists, in tests or in the package.

Each part is written from reading slime's source (THUDM/slime), each rule naming the file
it restates; ``shopsimrl slime check`` (the ``surface`` check) compares the parts that
mirror slime's own names with the user's slime, so a slime that moved fails there, not in
a test that still passes against the double.

- :mod:`.stand_ins`: what slime needs a GPU for (torch, Ray, Megatron's parser, SGLang's
  server arguments), installed in the harness's child processes so slime's *real* code runs;
- :mod:`.training_actor`: slime's Megatron training actor, which records what slime trains;
- :mod:`.rollout`: slime's rollout state (``Sample``, ``GenerateState``,
  ``generate_and_rm(_group)``, ``abort()``) for the tests that drive the generate hook without
  slime (in process, hundreds of times faster than a slime child process);
- :mod:`.slime_modules`: the rest of slime's package the hooks and the rollout function import
  (the filter hub, the rollout output types, ``run``, ``load_function``), installed with :mod:`.rollout`;
- :mod:`.checkouts`: slime checkouts that are broken (empty, an import that blocks, a ``train.py``
  that exits early or blocks), for what ``shopsimrl slime check`` does then;
- :mod:`.reference_loop`: a literal transcription of slime's ``generate_rollout_async`` loop,
  which the property tests compare the sampling core with over thousands of random supplies.

SGLang's HTTP side is :mod:`shopsimrl.slime.harness.scripted_sglang`.
"""
