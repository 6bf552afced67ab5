"""Presentation: tables that fit the terminal, the terminal chart, the --plot figures, JSON and CSV.

Renderers read records built by the core (plain dicts with SI values and the `_ms`
fields of the JSON records) and never compute a formula. Number formats live in `rubinperf.units` (neutral
ground: the core formats with them too); file writing in `rubinperf.files`. Nothing is
imported here, so that `import rubinperf.render.x` loads only x (start-up time).
"""
