"""The main job learns: a small linear policy over the heuristic's choices, trained by our own GRPO batch.

It is not a language model: one parameter vector of a few dozen numbers scores the
candidates of the heuristic shopper's four choices (query words, which result, buy or
look further, which option value) from features of candidate and goal; a softmax over
those scores is the policy.  Every task shares the vector, so what one task teaches
reaches the others, as a real model's weights do.  Parts: ``params`` (the vector's
layout), ``policy`` (episodes that record their log-probabilities), ``grpo`` (the loss,
its gradient and Adam), ``evaluate`` (held-out evaluation by slime's rules), ``learner``
(the hook the rollout step calls with its batch), ``compare`` (``shopsimrl compare``).
numpy only; imported on use.
"""
