"""The wiring: reader → normalizer → writer (``normalize``: input detection and the
``normalize``/``import`` loops), and a large ``import`` fanned out over worker processes
(``fanout``) in the single-process order."""
