"""``shopsimrl view``: a read-only web app over run folders, from the metrics down to each episode.

Not to be confused with ``shopsimrl rollout --view`` (:mod:`shopsimrl.rollout.view`), the live terminal view
of one rollout while it runs: this package serves a browser page over any number of runs, finished or not.
:mod:`~shopsimrl.webview.folder` reads a run folder (bounded, inside the folder only), :mod:`~.pages` turns it
into what each page shows, :mod:`~.app` serves it.
"""
