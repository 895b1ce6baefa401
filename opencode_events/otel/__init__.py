"""OpenTelemetry export: sessions as GenAI traces and metrics, in OTLP JSON.

``spans`` turns normalized events (and the store's session rows) into spans and counters,
``otlp`` encodes them as OTLP JSON bodies, ``transport`` posts them over OTLP/HTTP, and
``export`` wires a source to a sink; ``follow`` sends each session of a followed store once
it is done, and ``sent`` keeps what a backend took across a follower's restarts. No
OpenTelemetry SDK is used (its import alone costs about 100 ms); nothing here imports click
or prints. See docs/otel.md.
"""
